#pragma once
/// \file
/// Fused flash-attention backward, FMA on CUDA cores with fp32 accumulation, for every element
/// type (16-bit inputs are widened on load).
///
/// CPU reference: attn/backend/reference/backend.hpp (attention_backward_args). FlashAttention-2's
/// math (P recomputed from q, k and the forward's lse; D = rowsum(dO * O) recomputed per tile)
/// in two kernels, so that every gradient element is summed by one thread in one fixed order:
/// no atomics, the same bits on every run.
///
///   dq kernel:    one block per (32-query tile, head, batch); warp w owns rows 8w..8w+7; per
///                 32-key tile, lane j: s = q k_j, dp = dO v_j, ds = scale p (dp - D);
///                 then dQ (8, width) += ds (8, 32) K (32, width), lane l owning columns l + 32c.
///   dk/dv kernel: one block per (32-key tile, key head, batch); warp w owns keys 8w..8w+7; per
///                 query head of the group and 32-query tile, lane i: the same p and ds; then
///                 dV += p^T dO and dK += ds^T Q over the tile's queries.
///
/// Every tile sits once in shared memory as fp32 rows of an odd pitch (width + 1), so both a
/// lane-per-row walk along a row's columns and a lane-per-column walk along a row are free of
/// bank conflicts. Hidden (query, key) pairs get p = ds = 0 and, in a tile that some row sees
/// only in part, are left out of the sums (0 x NaN would be NaN where the gradient does not
/// depend on the NaN at all); keys past the span a tile sees are zero-filled, never read. This
/// is the straightforward kernel; the dq kernel recomputes S and dP, so it does 7 products where
/// FlashAttention does 5.

#include "attn/backend/cuda/common.cuh"
#include "attn/core/visibility.hpp"

namespace attn::cuda_detail {

inline constexpr int bwd_tile = 32, bwd_warps = 4, bwd_rows = 8;

template <class T>
struct flash_backward_params {
  batched<const T> q, k, v, o, d_o;  // k, v grouped by the key heads
  const float* lse;
  index_t lse_s0, lse_s1, lse_s2;
  batched<T> dq, dk, dv;  // null p: not computed (dk, dv per key head)
  const std::int32_t* kv_lengths;
  index_t lengths_s;
  index_t Tq, Tk;
  int D, Dv, group;
  mask_spec mask;
  float scale, scale_log2;

  __device__ __forceinline__ index_t kv_len(index_t b) const {
    return kv_lengths != nullptr ? index_t(kv_lengths[b * lengths_s]) : Tk;
  }
};

/// Bytes of dynamic shared memory of either kernel for a padded width of 32 * chunks.
constexpr std::size_t flash_backward_shared(int chunks) {
  const std::size_t pitch = 32 * chunks + 1;
  return sizeof(float) *
         (4 * bwd_tile * pitch + 2 * bwd_tile + 2 * bwd_warps * bwd_rows * bwd_tile);
}

/// rows [r0, r0 + tile) x [0, width) of a (n, cols) matrix as fp32 rows of `pitch`, zeros
/// outside [0, n) x [0, cols).
template <class T>
__device__ __forceinline__ void load_rows(float* dst, int pitch, int width, const T* src,
                                          index_t rs, index_t cs, index_t r0, index_t n, int cols) {
  for (int e = static_cast<int>(threadIdx.x); e < bwd_tile * width; e += 32 * bwd_warps) {
    const int r = e / width, c = e % width;
    dst[r * pitch + c] = r0 + r < n && c < cols ? to_float(src[(r0 + r) * rs + c * cs]) : 0.0f;
  }
}

/// dot(a[0..width), b[0..width)) of two shared fp32 rows (unrolled by 8 only: fully unrolled
/// inside the row loops, the kernels took nvcc minutes each).
template <int Width>
__device__ __forceinline__ float row_dot(const float* a, const float* b) {
  float acc = 0.0f;
#if defined(__CUDACC__)
#pragma unroll 8
#endif
  for (int d = 0; d < Width; ++d) acc = fmaf(a[d], b[d], acc);
  return acc;
}

/// The query tile [i0, i0 + bwd_tile) of head h of batch row b: Q and dO rows into q_s,
/// do_s, and per row D = rowsum(dO * O) into drow_s and lse * log2 e into lse2_s (zeros past
/// Tq). Each warp computes the statistics of its bwd_rows rows.
template <class T, int Width>
__device__ __forceinline__ void load_query_tile(const flash_backward_params<T>& f, index_t b,
                                                index_t h, index_t i0, float* q_s, float* do_s,
                                                float* drow_s, float* lse2_s) {
  constexpr int pitch = Width + 1;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  load_rows(q_s, pitch, Width, f.q.at(b, h), f.q.rs, f.q.cs, i0, f.Tq, f.D);
  load_rows(do_s, pitch, Width, f.d_o.at(b, h), f.d_o.rs, f.d_o.cs, i0, f.Tq, f.Dv);
  for (int r = warp * bwd_rows; r < (warp + 1) * bwd_rows; ++r) {
    const index_t i = i0 + r;
    float acc = 0.0f;
    if (i < f.Tq)
      for (int d = lane; d < f.Dv; d += 32)
        acc += to_float(f.d_o.at(b, h)[i * f.d_o.rs + d * f.d_o.cs]) *
               to_float(f.o.at(b, h)[i * f.o.rs + d * f.o.cs]);
    acc = warp_sum(acc);
    if (lane == 0) {
      drow_s[r] = acc;
      lse2_s[r] = i < f.Tq ? f.lse[b * f.lse_s0 + h * f.lse_s1 + i * f.lse_s2] * log2e : 0.0f;
    }
  }
}

template <class T, int Chunks, bool Causal>
__global__ void __launch_bounds__(32 * bwd_warps, 1)
    flash_backward_dq_kernel(flash_backward_params<T> f) {
  constexpr int width = 32 * Chunks, pitch = width + 1;
  ATTN_DYNAMIC_SHARED(float, smem);
  float* q_s = smem;                       // (BLK_Q, width)
  float* do_s = q_s + bwd_tile * pitch;    // (BLK_Q, width)
  float* k_s = do_s + bwd_tile * pitch;    // (BLK_K, width)
  float* v_s = k_s + bwd_tile * pitch;     // (BLK_K, width)
  float* lse2_s = v_s + bwd_tile * pitch;  // (BLK_Q) lse * log2 e
  float* drow_s = lse2_s + bwd_tile;       // (BLK_Q) rowsum(dO * O)
  float* ds_s = drow_s + bwd_tile;         // (warps, 8, BLK_K)
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const index_t b = blockIdx.z, h = blockIdx.y, q0 = index_t(blockIdx.x) * bwd_tile;
  mask_spec mask = f.mask;
  mask.causal = Causal;
  const visibility vis(mask, f.Tq, f.kv_len(b));
  const index_t q_end = q0 + bwd_tile < f.Tq ? q0 + bwd_tile : f.Tq;
  const key_range span = vis.rows(q0, q_end), common = vis.common(q0, q_end);

  load_query_tile<T, width>(f, b, h, q0, q_s, do_s, drow_s, lse2_s);
  float acc[bwd_rows][Chunks] = {};
  float* my_ds = ds_s + warp * bwd_rows * bwd_tile;
  for (index_t j0 = span.begin; j0 < span.end; j0 += bwd_tile) {
    __syncthreads();  // the previous K, V tiles are done with (and the Q tile is in)
    load_rows(k_s, pitch, width, f.k.at(b, h), f.k.rs, f.k.cs, j0, span.end, f.D);
    load_rows(v_s, pitch, width, f.v.at(b, h), f.v.rs, f.v.cs, j0, span.end, f.Dv);
    __syncthreads();
    const bool edge = !(common.begin <= j0 && j0 + bwd_tile <= common.end);
    const index_t j = j0 + lane;
    ATTN_CUDA_UNROLL
    for (int r = 0; r < bwd_rows; ++r) {
      const int row = warp * bwd_rows + r;
      const float s = row_dot<width>(q_s + row * pitch, k_s + lane * pitch);
      const float dp = row_dot<width>(do_s + row * pitch, v_s + lane * pitch);
      const bool seen = !edge || vis.visible(q0 + row, j);
      const float p = seen ? exp2f(s * f.scale_log2 - lse2_s[row]) : 0.0f;
      my_ds[r * bwd_tile + lane] = seen ? f.scale * p * (dp - drow_s[row]) : 0.0f;
    }
    __syncwarp();
    for (int jj = 0; jj < bwd_tile; ++jj) {
      float kd[Chunks];
      ATTN_CUDA_UNROLL
      for (int c = 0; c < Chunks; ++c) kd[c] = k_s[jj * pitch + lane + 32 * c];
      ATTN_CUDA_UNROLL
      for (int r = 0; r < bwd_rows; ++r) {
        if (edge && !vis.visible(q0 + warp * bwd_rows + r, j0 + jj)) continue;  // warp-uniform
        const float ds = my_ds[r * bwd_tile + jj];
        ATTN_CUDA_UNROLL
        for (int c = 0; c < Chunks; ++c) acc[r][c] = fmaf(ds, kd[c], acc[r][c]);
      }
    }
    __syncwarp();  // my_ds is rewritten by the next tile
  }
  T* dq = f.dq.at(b, h);
  ATTN_CUDA_UNROLL
  for (int r = 0; r < bwd_rows; ++r) {
    const index_t i = q0 + warp * bwd_rows + r;
    if (i >= f.Tq) continue;
    ATTN_CUDA_UNROLL
    for (int c = 0; c < Chunks; ++c)
      if (lane + 32 * c < f.D)
        dq[i * f.dq.rs + (lane + 32 * c) * f.dq.cs] = from_float<T>(acc[r][c]);
  }
}

template <class T, int Chunks, bool Causal>
__global__ void __launch_bounds__(32 * bwd_warps, 1)
    flash_backward_dkdv_kernel(flash_backward_params<T> f) {
  constexpr int width = 32 * Chunks, pitch = width + 1;
  ATTN_DYNAMIC_SHARED(float, smem);
  float* k_s = smem;                        // (BLK_K, width)
  float* v_s = k_s + bwd_tile * pitch;      // (BLK_K, width)
  float* q_s = v_s + bwd_tile * pitch;      // (BLK_Q, width)
  float* do_s = q_s + bwd_tile * pitch;     // (BLK_Q, width)
  float* lse2_s = do_s + bwd_tile * pitch;  // (BLK_Q)
  float* drow_s = lse2_s + bwd_tile;        // (BLK_Q)
  float* p_s = drow_s + bwd_tile;           // (warps, 8, BLK_Q)
  float* ds_s = p_s + bwd_warps * bwd_rows * bwd_tile;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const index_t b = blockIdx.z, hk = blockIdx.y, k0 = index_t(blockIdx.x) * bwd_tile;
  const index_t len = f.kv_len(b);
  mask_spec mask = f.mask;
  mask.causal = Causal;
  const visibility vis(mask, f.Tq, len);
  // Keys past the row's length are zero-filled: nobody sees them, so their gradients are 0.
  load_rows(k_s, pitch, width, f.k.at(b, hk * f.group), f.k.rs, f.k.cs, k0, len, f.D);
  load_rows(v_s, pitch, width, f.v.at(b, hk * f.group), f.v.rs, f.v.cs, k0, len, f.Dv);
  float acc_k[bwd_rows][Chunks] = {}, acc_v[bwd_rows][Chunks] = {};
  float* my_p = p_s + warp * bwd_rows * bwd_tile;
  float* my_ds = ds_s + warp * bwd_rows * bwd_tile;
  for (int g = 0; g < f.group; ++g) {
    const index_t h = hk * f.group + g;
    for (index_t i0 = 0; i0 < f.Tq; i0 += bwd_tile) {
      const index_t i_end = i0 + bwd_tile < f.Tq ? i0 + bwd_tile : f.Tq;
      const key_range seen_by_tile = vis.rows(i0, i_end);
      if (seen_by_tile.empty() || seen_by_tile.end <= k0 || seen_by_tile.begin >= k0 + bwd_tile)
        continue;  // uniform across the block
      const key_range common = vis.common(i0, i_end);
      const bool edge = !(common.begin <= k0 && k0 + bwd_tile <= common.end) || k0 + bwd_tile > len;
      __syncthreads();  // the previous Q, dO tiles are done with
      load_query_tile<T, width>(f, b, h, i0, q_s, do_s, drow_s, lse2_s);
      __syncthreads();
      const index_t i = i0 + lane;
      ATTN_CUDA_UNROLL
      for (int r = 0; r < bwd_rows; ++r) {
        const int key = warp * bwd_rows + r;
        const float s = row_dot<width>(k_s + key * pitch, q_s + lane * pitch);
        const float dp = row_dot<width>(v_s + key * pitch, do_s + lane * pitch);
        const bool seen = i < f.Tq && (!edge || vis.visible(i, k0 + key));
        const float p = seen ? exp2f(s * f.scale_log2 - lse2_s[lane]) : 0.0f;
        my_p[r * bwd_tile + lane] = p;
        my_ds[r * bwd_tile + lane] = seen ? f.scale * p * (dp - drow_s[lane]) : 0.0f;
      }
      __syncwarp();
      for (int ii = 0; ii < bwd_tile; ++ii) {
        float qd[Chunks], dod[Chunks];
        ATTN_CUDA_UNROLL
        for (int c = 0; c < Chunks; ++c) {
          qd[c] = q_s[ii * pitch + lane + 32 * c];
          dod[c] = do_s[ii * pitch + lane + 32 * c];
        }
        ATTN_CUDA_UNROLL
        for (int r = 0; r < bwd_rows; ++r) {
          if (edge && !vis.visible(i0 + ii, k0 + warp * bwd_rows + r)) continue;  // warp-uniform
          const float p = my_p[r * bwd_tile + ii], ds = my_ds[r * bwd_tile + ii];
          ATTN_CUDA_UNROLL
          for (int c = 0; c < Chunks; ++c) {
            acc_v[r][c] = fmaf(p, dod[c], acc_v[r][c]);
            acc_k[r][c] = fmaf(ds, qd[c], acc_k[r][c]);
          }
        }
      }
      __syncwarp();  // my_p and my_ds are rewritten by the next tile
    }
  }
  T* dk = f.dk.p != nullptr ? f.dk.at(b, hk) : nullptr;
  T* dv = f.dv.p != nullptr ? f.dv.at(b, hk) : nullptr;
  ATTN_CUDA_UNROLL
  for (int r = 0; r < bwd_rows; ++r) {
    const index_t j = k0 + warp * bwd_rows + r;
    if (j >= f.Tk) continue;
    ATTN_CUDA_UNROLL
    for (int c = 0; c < Chunks; ++c) {
      const int d = lane + 32 * c;
      if (dk != nullptr && d < f.D) dk[j * f.dk.rs + d * f.dk.cs] = from_float<T>(acc_k[r][c]);
      if (dv != nullptr && d < f.Dv) dv[j * f.dv.rs + d * f.dv.cs] = from_float<T>(acc_v[r][c]);
    }
  }
}

}  // namespace attn::cuda_detail
