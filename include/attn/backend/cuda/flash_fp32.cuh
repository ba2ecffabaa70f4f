#pragma once
/// \file
/// Fused flash-attention forward for float, fp32 FMA on CUDA cores.
///
/// CPU reference: attn/backend/reference/backend.hpp (attention). One block of 4 warps per
/// (32-query tile, head, batch); each warp owns 8 query rows. Per 32-key tile (K and V staged
/// in shared memory as fp32): lane j computes the scores of key j for the warp's 8 rows,
/// already multiplied by scale * log2(e); the online softmax keeps the running maximum per
/// row (uniform across the warp) and a per-lane partial row sum (reduced once at the end);
/// p = exp2(s - m) goes through a warp-private 8 x 32 shared slice into P V, where lane l owns
/// output columns l + 32 c, c < Chunks. Key tiles above the diagonal are never loaded; only
/// tiles that cross the diagonal or the end of the keys are masked.

#include "attn/backend/cuda/common.cuh"

namespace attn::cuda_detail {

inline constexpr int f32_rows = 32, f32_keys = 32, f32_warps = 4;

/// Bytes of dynamic shared memory of flash_fp32_kernel<Chunks>.
constexpr std::size_t flash_fp32_shared(int chunks) {
  const int pitch = 32 * chunks + 1;
  return sizeof(float) * (std::size_t(f32_rows + 2 * f32_keys) * pitch + f32_rows * f32_keys);
}

/// Query-tile bookkeeping shared by both flash kernels: with `off` = Tk - Tq, query i sees keys
/// j <= i + off. Returns how many key tiles of `tile_keys` the query rows [q0, q0 + rows) need.
__host__ __device__ __forceinline__ index_t key_tiles(bool causal, index_t q0, index_t rows,
                                                      index_t Tq, index_t Tk, int tile_keys) {
  index_t end = Tk;  // one past the last key any row of the tile sees
  if (causal) {
    const index_t last_row = (q0 + rows < Tq ? q0 + rows : Tq) - 1;
    const index_t last_key = last_row + (Tk - Tq);
    end = last_key + 1 < Tk ? last_key + 1 : Tk;
    if (end < 0) end = 0;
  }
  return (end + tile_keys - 1) / tile_keys;
}

template <int Chunks, bool Causal>
__global__ void __launch_bounds__(32 * f32_warps, 1)
    flash_fp32_kernel(batched<const float> q, batched<const float> k, batched<const float> v,
                      batched<float> o, float* lse, index_t lse_s0, index_t lse_s1, index_t lse_s2,
                      index_t Tq, index_t Tk, int D, int Dv, float scale_log2) {
  constexpr int pitch = 32 * Chunks + 1;  // +1: lane j reading k_s[j][d] hits bank (j + d) % 32
  ATTN_DYNAMIC_SHARED(float, smem);
  float* q_s = smem;                    // (BLK_Q, D)
  float* k_s = q_s + f32_rows * pitch;  // (BLK_K, D)
  float* v_s = k_s + f32_keys * pitch;  // (BLK_K, Dv)
  float* p_s = v_s + f32_keys * pitch;  // (warps, 8, BLK_K)
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const index_t b = blockIdx.z, h = blockIdx.y, q0 = index_t(blockIdx.x) * f32_rows;
  const float* qp = q.at(b, h);
  const float* kp = k.at(b, h);
  const float* vp = v.at(b, h);
  const index_t off = Tk - Tq;
  for (int e = tid; e < f32_rows * D; e += 32 * f32_warps) {
    const int r = e / D, d = e % D;
    q_s[r * pitch + d] = q0 + r < Tq ? qp[(q0 + r) * q.rs + d * q.cs] : 0.0f;
  }
  float m[8], l[8], acc[8][Chunks];
  ATTN_UNROLL
  for (int r = 0; r < 8; ++r) {
    m[r] = neg_inf;
    l[r] = 0.0f;
    ATTN_UNROLL
    for (int c = 0; c < Chunks; ++c) acc[r][c] = 0.0f;
  }
  const float* my_q = q_s + warp * 8 * pitch;
  float* my_p = p_s + warp * 8 * f32_keys;
  const index_t tiles = key_tiles(Causal, q0, f32_rows, Tq, Tk, f32_keys);
  for (index_t tile = 0; tile < tiles; ++tile) {
    const index_t j0 = tile * f32_keys;
    __syncthreads();  // every warp is done with the previous K, V tiles
    for (int e = tid; e < f32_keys * D; e += 32 * f32_warps) {
      const int j = e / D, d = e % D;
      k_s[j * pitch + d] = j0 + j < Tk ? kp[(j0 + j) * k.rs + d * k.cs] : 0.0f;
    }
    for (int e = tid; e < f32_keys * Dv; e += 32 * f32_warps) {
      const int j = e / Dv, d = e % Dv;
      v_s[j * pitch + d] = j0 + j < Tk ? vp[(j0 + j) * v.rs + d * v.cs] : 0.0f;
    }
    __syncthreads();
    float s[8] = {};
    const float* my_k = k_s + lane * pitch;
    for (int d = 0; d < D; ++d) {
      const float kd = my_k[d];
      ATTN_UNROLL
      for (int r = 0; r < 8; ++r) s[r] = fmaf(my_q[r * pitch + d], kd, s[r]);
    }
    const index_t j = j0 + lane;
    const bool edge = j0 + f32_keys > Tk || (Causal && j0 + f32_keys - 1 > q0 + off);
    ATTN_UNROLL
    for (int r = 0; r < 8; ++r) {
      s[r] *= scale_log2;
      if (edge) {
        const index_t i = q0 + warp * 8 + r;
        if (j >= Tk || (Causal && j > i + off)) s[r] = neg_inf;
      }
      const float m_new = fmaxf(m[r], warp_max(s[r]));
      // A row that has seen no key yet keeps m = -inf: its p and alpha are 0 and 1.
      const float m_use = m_new == neg_inf ? 0.0f : m_new;
      const float alpha = exp2f(m[r] - m_use);
      const float p = exp2f(s[r] - m_use);
      m[r] = m_new;
      l[r] = fmaf(l[r], alpha, p);
      ATTN_UNROLL
      for (int c = 0; c < Chunks; ++c) acc[r][c] *= alpha;
      my_p[r * f32_keys + lane] = p;
    }
    __syncwarp();
    for (int jj = 0; jj < f32_keys; ++jj) {
      float vd[Chunks];
      ATTN_UNROLL
      for (int c = 0; c < Chunks; ++c) vd[c] = v_s[jj * pitch + lane + 32 * c];
      ATTN_UNROLL
      for (int r = 0; r < 8; ++r) {
        const float p = my_p[r * f32_keys + jj];
        ATTN_UNROLL
        for (int c = 0; c < Chunks; ++c) acc[r][c] = fmaf(p, vd[c], acc[r][c]);
      }
    }
    __syncwarp();  // p_s is rewritten by the next tile
  }
  float* op = o.at(b, h);
  ATTN_UNROLL
  for (int r = 0; r < 8; ++r) {
    const index_t i = q0 + warp * 8 + r;
    const float sum = warp_sum(l[r]);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (i < Tq) {
      ATTN_UNROLL
      for (int c = 0; c < Chunks; ++c)
        if (lane + 32 * c < Dv) op[i * o.rs + (lane + 32 * c) * o.cs] = acc[r][c] * inv;
      if (lse != nullptr && lane == 0)
        lse[b * lse_s0 + h * lse_s1 + i * lse_s2] =
            sum > 0.0f ? (m[r] + log2f(sum)) * ln2 : neg_inf;
    }
  }
}

}  // namespace attn::cuda_detail
