#pragma once
/// \file
/// The emulated twins of the inline-PTX instructions wrapped in attn/backend/cuda/ptx.cuh, from
/// the PTX ISA's documented semantics. mma.sync and ldmatrix are warp collectives (every lane of
/// the warp must arrive). cp.async poisons its destination with NaN bytes at issue and copies at
/// cp.async.wait_group, so data read before the wait shows up as NaN.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <vector>

#include "sync.hpp"

namespace attn_emulator {

/// Operands of one lane of mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32.
struct mma_operands {
  std::uint32_t a[4];
  std::uint32_t b[2];
  float c[4];
};

/// mma.sync m16n8k16 with f32 accumulation; `bf16` picks the element type of a and b.
inline void mma_m16n8k16(bool bf16, float (&d)[4], const mma_operands& operands,
                         const std::source_location& where) {
  warp_collective(bf16 ? collective::mma_bf16 : collective::mma_f16, 0xffffffffu, &operands, d,
                  where);
}

/// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16: lane 8 m + r gives the address of
/// row r of matrix m and reads that row (16 bytes) itself; the warp then exchanges the rows.
template <int Matrices>
void ldmatrix(bool trans, std::uint32_t (&r)[Matrices], const void* row,
              const std::source_location& where) {
  static_assert(Matrices == 1 || Matrices == 2 || Matrices == 4);
  std::uint32_t words[4] = {};
  const unsigned lane = linear_thread_index() % 32;
  if (lane < 8 * Matrices) {
    check_alignment(row, 16, "ldmatrix row address", where);
    std::memcpy(words, row, 16);
  }
  constexpr collective ops[2][3] = {
      {collective::ldmatrix_x1, collective::ldmatrix_x2, collective::ldmatrix_x4},
      {collective::ldmatrix_x1_trans, collective::ldmatrix_x2_trans,
       collective::ldmatrix_x4_trans}};
  warp_collective(ops[trans][Matrices == 1   ? 0
                             : Matrices == 2 ? 1
                                             : 2],
                  0xffffffffu, words, r, where);
}

/// One cp.async copy in flight.
struct async_copy {
  void* dst;
  const void* src;
  unsigned bytes;
  unsigned src_bytes;  // bytes read from src; the rest of dst is zero-filled
};

/// The calling thread's cp.async copies: not yet committed ones after the last group end.
struct async_copies {
  std::vector<async_copy> copies;
  std::vector<std::size_t> group_ends;  // one past the last copy of each committed group
};

/// The calling CUDA thread's cp.async state.
async_copies& thread_async_copies();

/// cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes.
inline void cp_async(void* dst, const void* src, unsigned bytes, unsigned src_bytes,
                     const std::source_location& where) {
  check_alignment(dst, bytes, "cp.async destination", where);
  check_alignment(src, bytes, "cp.async source", where);
  std::memset(dst, 0xff, bytes);  // NaN for f32, f16 and bf16 until the wait
  thread_async_copies().copies.push_back({dst, src, bytes, src_bytes < bytes ? src_bytes : bytes});
}

/// cp.async.commit_group: the copies issued since the last commit form a group.
inline void cp_async_commit() {
  async_copies& s = thread_async_copies();
  s.group_ends.push_back(s.copies.size());
}

/// cp.async.wait_group n: completes every committed group but the `pending` most recent.
inline void cp_async_wait(unsigned pending) {
  async_copies& s = thread_async_copies();
  if (s.group_ends.size() <= pending) return;
  const std::size_t groups = s.group_ends.size() - pending;
  const std::size_t done = s.group_ends[groups - 1];
  for (std::size_t i = 0; i < done; ++i) {
    const async_copy& c = s.copies[i];
    std::memcpy(c.dst, c.src, c.src_bytes);
    std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);
  }
  s.copies.erase(s.copies.begin(), s.copies.begin() + static_cast<std::ptrdiff_t>(done));
  s.group_ends.erase(s.group_ends.begin(),
                     s.group_ends.begin() + static_cast<std::ptrdiff_t>(groups));
  for (std::size_t& end : s.group_ends) end -= done;
}

/// ex2.approx.f32: 2^x (the GPU's is within 2 ulp; this one is correctly rounded).
inline float ex2_approx(float x) { return std::exp2(x); }

}  // namespace attn_emulator
