/// \file
/// Warp collectives: each lane records its operation and parks; the last lane of the mask checks
/// that every lane is at the same operation with the same mask, computes every lane's result by
/// the PTX ISA's rules (shfl.sync, vote.sync, bar.warp.sync) and makes them all ready.

#include <bit>
#include <cstring>

#include "internal.hpp"

namespace attn_emulator {

namespace detail {

const char* name(collective op) {
  static constexpr const char* names[] = {"__syncwarp",
                                          "__shfl_sync",
                                          "__shfl_up_sync",
                                          "__shfl_down_sync",
                                          "__shfl_xor_sync",
                                          "__ballot_sync",
                                          "__any_sync",
                                          "__all_sync",
                                          "mma.sync.m16n8k16.f16",
                                          "mma.sync.m16n8k16.bf16",
                                          "ldmatrix.x1",
                                          "ldmatrix.x2",
                                          "ldmatrix.x4",
                                          "ldmatrix.x1.trans",
                                          "ldmatrix.x2.trans",
                                          "ldmatrix.x4.trans"};
  return names[static_cast<int>(op)];
}

namespace {

// shfl.sync: the source lane of `lane` by the PTX ISA's pseudocode, with CUDA's clamp operand
// c = ((32 - width) << 8) | (up ? 0 : 31). A lane whose source is out of its segment keeps
// its own value; one whose source is not in the mask reads an undefined value: all one bits.
void resolve_shuffle(collective op, std::uint32_t mask, const void* const in[32],
                     void* const out[32]) {
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1)) continue;
    const lane_value& v = *static_cast<const lane_value*>(in[lane]);
    if (v.width < 1 || v.width > 32 || !std::has_single_bit(static_cast<unsigned>(v.width)))
      fail("%s: width %d is not a power of two in 1..32", name(op), v.width);
    const int segmask = 32 - v.width;
    const int clamp = op == collective::shfl_up ? 0 : 31;
    const int l = static_cast<int>(lane), b = v.lane_or_delta & 31;
    const int max_lane = (l & segmask) | (clamp & ~segmask), min_lane = l & segmask;
    int j = l;
    bool valid = false;
    switch (op) {
      case collective::shfl_up:
        j = l - b, valid = j >= max_lane;
        break;
      case collective::shfl_down:
        j = l + b, valid = j <= max_lane;
        break;
      case collective::shfl_xor:
        j = l ^ b, valid = j <= max_lane;
        break;
      default:
        j = min_lane | (b & ~segmask), valid = j <= max_lane;
        break;
    }
    if (!valid) j = l;
    std::uint64_t result = ~std::uint64_t{0};
    if (mask >> j & 1) result = static_cast<const lane_value*>(in[j])->bits;
    std::memcpy(out[lane], &result, sizeof result);
  }
}

void resolve_vote(collective op, std::uint32_t mask, const void* const in[32],
                  void* const out[32]) {
  std::uint32_t ballot = 0;
  for (unsigned lane = 0; lane < 32; ++lane)
    if ((mask >> lane & 1) && static_cast<const lane_value*>(in[lane])->lane_or_delta)
      ballot |= 1u << lane;
  const std::uint32_t result = op == collective::ballot ? ballot
                               : op == collective::any  ? ballot != 0
                                                        : ballot == mask;
  for (unsigned lane = 0; lane < 32; ++lane)
    if (mask >> lane & 1) std::memcpy(out[lane], &result, sizeof result);
}

// The lanes of `mask` in warp `warp` have all arrived: check they agree, compute, release.
void resolve(block_state& b, unsigned warp, std::uint32_t mask) {
  thread_record* lanes = &b.threads[warp * 32];
  const thread_record& first = lanes[std::countr_zero(mask)];
  const void* in[32] = {};
  void* out[32] = {};
  std::uint32_t parities = 0;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1)) continue;
    const thread_record& t = lanes[lane];
    if (t.op != first.op || t.mask != first.mask || !same_place(t.where, first.where))
      fail(
          "divergent warp collective in block %s, warp %u: lane %u is at %s %s (mask 0x%08x), "
          "lane %u at %s %s (mask 0x%08x)",
          format(blockIdx).c_str(), warp, first.linear & 31, name(first.op),
          format(first.where).c_str(), first.mask, lane, name(t.op), format(t.where).c_str(),
          t.mask);
    in[lane] = t.in;
    out[lane] = t.out;
    parities |= (t.sync_parity & 1u) << lane;
  }
  switch (first.op) {
    case collective::syncwarp:
      break;
    case collective::shfl_idx:
    case collective::shfl_up:
    case collective::shfl_down:
    case collective::shfl_xor:
      resolve_shuffle(first.op, mask, in, out);
      break;
    case collective::ballot:
    case collective::any:
    case collective::all:
      resolve_vote(first.op, mask, in, out);
      break;
    case collective::mma_f16:
    case collective::mma_bf16:
      resolve_mma(first.op == collective::mma_bf16, in, out);
      break;
    default: {
      const int k = static_cast<int>(first.op) - static_cast<int>(collective::ldmatrix_x1);
      resolve_ldmatrix(1 << (k % 3), k >= 3, in, out);
    }
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!(mask >> lane & 1)) continue;
    lanes[lane].state = thread_state::ready;
    lanes[lane].acquire_mask = first.op == collective::syncwarp ? mask : 0;
    lanes[lane].acquire_parities = parities;
  }
  b.warp_arrived[warp] &= ~mask;
}

}  // namespace

}  // namespace detail

void warp_collective(collective op, std::uint32_t mask, const void* in, void* out,
                     const std::source_location& where) {
  using namespace detail;
  if (!current_thread) fail("%s at %s outside a kernel", name(op), format(where).c_str());
  block_state& b = *current_block;
  thread_record& t = *current_thread;
  const unsigned lane = t.linear & 31, warp = t.linear / 32;
  if (!(mask >> lane & 1))
    fail("%s at %s: lane %u of warp %u is not in its mask 0x%08x", name(op), format(where).c_str(),
         lane, warp, mask);
  t.op = op;
  t.mask = mask;
  t.in = in;
  t.out = out;
  t.where = where;
  t.state = thread_state::at_warp;
  if (op == collective::syncwarp) {  // bar.warp.sync orders memory among its lanes (for TSan)
    t.sync_parity ^= 1;
    sanitizer::tsan_release(&t.sync_objects[t.sync_parity]);
  }
  b.warp_arrived[warp] |= 1u << lane;
  if ((b.warp_arrived[warp] & mask) == mask) resolve(b, warp, mask);
  park(t);
  for (std::uint32_t m = t.acquire_mask; m; m &= m - 1) {
    const int j = std::countr_zero(m);
    sanitizer::tsan_acquire(&b.threads[warp * 32 + j].sync_objects[t.acquire_parities >> j & 1]);
  }
}

}  // namespace attn_emulator
