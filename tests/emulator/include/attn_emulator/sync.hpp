#pragma once
/// \file
/// __syncthreads and the warp collectives. A fiber that reaches one parks; a barrier opens when
/// every live thread of the block waits at it (exited threads stop counting), a warp collective
/// resolves when the last lane of its mask arrives and follows the PTX ISA's rules for every
/// lane. Divergence (different source locations in one phase, or mismatched masks) and lanes
/// that never arrive abort with a message naming the source line.

#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "runtime.hpp"

namespace attn_emulator {

/// Every operation that needs the lanes of a warp together.
enum class collective : std::uint8_t {
  syncwarp,
  shfl_idx,
  shfl_up,
  shfl_down,
  shfl_xor,
  ballot,
  any,
  all,
  mma_f16,
  mma_bf16,
  ldmatrix_x1,
  ldmatrix_x2,
  ldmatrix_x4,
  ldmatrix_x1_trans,
  ldmatrix_x2_trans,
  ldmatrix_x4_trans,
};

/// Parks the calling fiber at the block barrier located at `where`.
void syncthreads(const std::source_location& where);

/// One lane's part of `op` over the lanes of `mask`: parks until they have all arrived, then
/// returns with `out` written from every lane's `in` (both stay valid while the lane waits).
void warp_collective(collective op, std::uint32_t mask, const void* in, void* out,
                     const std::source_location& where);

/// One lane's operand of a shuffle, ballot, any or all.
struct lane_value {
  std::uint64_t bits = 0;
  int lane_or_delta = 0;  // shuffles: source lane, delta or xor mask; votes: the predicate
  int width = 32;
};

/// A shuffle of any trivially copyable value of at most 8 bytes.
template <class T>
T shuffle(collective op, std::uint32_t mask, T value, int lane_or_delta, int width,
          const std::source_location& where) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle a 1-8 byte value");
  lane_value in{0, lane_or_delta, width};
  std::memcpy(&in.bits, &value, sizeof(T));
  std::uint64_t out = 0;
  warp_collective(op, mask, &in, &out, where);
  T result;
  std::memcpy(&result, &out, sizeof(T));
  return result;
}

/// A vote: the ballot of the lanes of `mask` whose predicate is non-zero.
inline std::uint32_t vote(collective op, std::uint32_t mask, int predicate,
                          const std::source_location& where) {
  lane_value in{0, predicate != 0, 32};
  std::uint32_t out = 0;
  warp_collective(op, mask, &in, &out, where);
  return out;
}

}  // namespace attn_emulator

inline void __syncthreads(std::source_location where = std::source_location::current()) {
  attn_emulator::syncthreads(where);
}

inline void __syncwarp(unsigned mask = 0xffffffffu,
                       std::source_location where = std::source_location::current()) {
  attn_emulator::warp_collective(attn_emulator::collective::syncwarp, mask, nullptr, nullptr,
                                 where);
}

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,
              std::source_location where = std::source_location::current()) {
  return attn_emulator::shuffle(attn_emulator::collective::shfl_idx, mask, var, src_lane, width,
                                where);
}

template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 std::source_location where = std::source_location::current()) {
  return attn_emulator::shuffle(attn_emulator::collective::shfl_up, mask, var,
                                static_cast<int>(delta), width, where);
}

template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   std::source_location where = std::source_location::current()) {
  return attn_emulator::shuffle(attn_emulator::collective::shfl_down, mask, var,
                                static_cast<int>(delta), width, where);
}

template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,
                  std::source_location where = std::source_location::current()) {
  return attn_emulator::shuffle(attn_emulator::collective::shfl_xor, mask, var, lane_mask, width,
                                where);
}

inline unsigned __ballot_sync(unsigned mask, int predicate,
                              std::source_location where = std::source_location::current()) {
  return attn_emulator::vote(attn_emulator::collective::ballot, mask, predicate, where);
}

inline int __any_sync(unsigned mask, int predicate,
                      std::source_location where = std::source_location::current()) {
  return static_cast<int>(
      attn_emulator::vote(attn_emulator::collective::any, mask, predicate, where));
}

inline int __all_sync(unsigned mask, int predicate,
                      std::source_location where = std::source_location::current()) {
  return static_cast<int>(
      attn_emulator::vote(attn_emulator::collective::all, mask, predicate, where));
}
