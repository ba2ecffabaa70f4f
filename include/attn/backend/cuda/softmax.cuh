#pragma once
/// \file
/// The mask and softmax stages on a [B, H, Tq, Tk] score view, one warp per row.
///
/// CPU reference: attn/backend/reference/backend.hpp (mask_args, softmax_args). The mask hides
/// what attn/core/visibility.hpp hides. Softmax is stable (the row maximum is subtracted,
/// exponentials in exp2 with log2(e) folded in); an all -inf row becomes zeros and a NaN makes
/// its row NaN. Warp reductions with shuffles; no shared memory.

#include "attn/backend/cuda/common.cuh"
#include "attn/core/visibility.hpp"

namespace attn::cuda_detail {

inline constexpr int row_warps = 4;  // rows per block of 128 threads

/// Row r of a [B, H, Tq, Tk] view as (z0, z1, i) with z1 extent H and i extent Tq.
template <class T>
__device__ __forceinline__ T* row_pointer(const batched<T>& s, index_t r, index_t H, index_t Tq) {
  const index_t i = r % Tq, bh = r / Tq;
  return s.at(bh / H, bh % H) + i * s.rs;
}

/// What the mask writes where it hides a key: -inf (forward) or 0 (its gradient).
struct mask_fill {
  mask_spec mask;
  bool gradient;
};

template <class T>
__global__ void __launch_bounds__(32 * row_warps)
    mask_kernel(batched<T> s, index_t H, index_t Tq, index_t Tk, index_t rows, mask_fill m) {
  const index_t r = index_t(blockIdx.x) * row_warps + threadIdx.x / 32;
  if (r >= rows) return;
  T* row = row_pointer(s, r, H, Tq);
  const key_range keys = visibility(m.mask, Tq, Tk).row(r % Tq);
  const T fill = from_float<T>(m.gradient ? 0.0f : neg_inf);
  for (index_t j = threadIdx.x % 32; j < Tk; j += 32)
    if (j < keys.begin || j >= keys.end) row[j * s.cs] = fill;
}

template <class T>
__global__ void __launch_bounds__(32 * row_warps)
    softmax_kernel(batched<T> s, index_t H, index_t Tq, index_t Tk, index_t rows, mask_fill) {
  const index_t r = index_t(blockIdx.x) * row_warps + threadIdx.x / 32;
  if (r >= rows) return;
  T* row = row_pointer(s, r, H, Tq);
  const int lane = static_cast<int>(threadIdx.x % 32);
  float m = neg_inf;
  bool any = false;  // an entry that is not -inf (NaN included)
  for (index_t j = lane; j < Tk; j += 32) {
    const float x = to_float(row[j * s.cs]);
    m = fmaxf(m, x);
    any = any || x != neg_inf;
  }
  m = warp_max(m);
  if (!__any_sync(0xffffffffu, any)) {  // every key hidden: zeros, never NaN
    for (index_t j = lane; j < Tk; j += 32) row[j * s.cs] = from_float<T>(0.0f);
    return;
  }
  const float m2 = max_used(m) * log2e;  // fmaxf skips NaN; exp2(NaN) brings it back
  float sum = 0.0f;
  for (index_t j = lane; j < Tk; j += 32) sum += exp2f(fmaf(to_float(row[j * s.cs]), log2e, -m2));
  const float inv = 1.0f / warp_sum(sum);
  for (index_t j = lane; j < Tk; j += 32)
    row[j * s.cs] = from_float<T>(exp2f(fmaf(to_float(row[j * s.cs]), log2e, -m2)) * inv);
}

/// ds = p * (dp - rowsum(dp * p)), one warp per row; each lane reads its entries before the
/// warp's sum is complete and writes them after, so ds may be dp.
template <class T>
__global__ void __launch_bounds__(32 * row_warps)
    softmax_backward_kernel(batched<const T> p, batched<const T> dp, batched<T> ds, index_t H,
                            index_t Tq, index_t Tk, index_t rows) {
  const index_t r = index_t(blockIdx.x) * row_warps + threadIdx.x / 32;
  if (r >= rows) return;
  const T* pr = row_pointer(p, r, H, Tq);
  const T* dpr = row_pointer(dp, r, H, Tq);
  T* dsr = row_pointer(ds, r, H, Tq);
  const int lane = static_cast<int>(threadIdx.x % 32);
  float dot = 0.0f;
  for (index_t j = lane; j < Tk; j += 32) dot += to_float(pr[j * p.cs]) * to_float(dpr[j * dp.cs]);
  dot = warp_sum(dot);
  for (index_t j = lane; j < Tk; j += 32)
    dsr[j * ds.cs] = from_float<T>(to_float(pr[j * p.cs]) * (to_float(dpr[j * dp.cs]) - dot));
}

/// Launches `kernel` with one warp per row of s [B, H, Tq, Tk]. \throws backend_error.
template <class T>
void row_launch(void (*kernel)(batched<T>, index_t, index_t, index_t, index_t, mask_fill),
                cudaStream_t stream, const tensor_view<T, 4, device_space>& s,
                const mask_fill& mask) {
  const index_t rows = s.extent(0) * s.extent(1) * s.extent(2);
  if (rows == 0 || s.extent(3) == 0) return;
  if (blocks_for(rows, row_warps) > 0x7fffffff)
    throw backend_error("attn: CUDA row kernel: too many rows (" + std::to_string(rows) + ")");
  ATTN_CUDA_LAUNCH(kernel, dim3(blocks_for(rows, row_warps)), dim3(32 * row_warps), 0, stream,
                   as_batched<T>(s), s.extent(1), s.extent(2), s.extent(3), rows, mask);
}

}  // namespace attn::cuda_detail
