#pragma once
/// \file
/// The arguments of the fused-attention kernels, in one struct passed by value (as
/// FlashAttention's Flash_fwd_params): a new field reaches every kernel without a signature
/// change.

#include <cstdint>

#include "attn/backend/cuda/common.cuh"
#include "attn/core/visibility.hpp"

namespace attn::cuda_detail {

template <class T>
struct flash_params {
  batched<const T> q, k, v;  // (B, H, Tq, D), (B, Hkv, Tk, D), (B, Hkv, Tk, Dv); k, v grouped
  batched<T> o;              // (B, H, Tq, Dv)
  float* lse;                // (B, H, Tq) at lse_s0 b + lse_s1 h + lse_s2 i, or null
  index_t lse_s0, lse_s1, lse_s2;
  const std::int32_t* kv_lengths;  // (B) at lengths_s b, or null: every row has Tk keys
  index_t lengths_s;
  index_t Tq, Tk;
  int D, Dv;
  mask_spec mask;
  float scale_log2;    // scale * log2(e)
  bool vec_q, vec_kv;  // 16-byte rows: cp.async loads (mma kernel)

  /// The visibility rule of batch row b.
  __device__ __forceinline__ visibility vis(index_t b) const {
    return visibility(mask, Tq, kv_lengths != nullptr ? index_t(kv_lengths[b * lengths_s]) : Tk);
  }
  __device__ __forceinline__ float* lse_at(index_t b, index_t h, index_t i) const {
    return lse + b * lse_s0 + h * lse_s1 + i * lse_s2;
  }
};

}  // namespace attn::cuda_detail
