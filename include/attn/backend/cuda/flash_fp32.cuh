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
/// output columns l + 32 c, c < Chunks. K is stored transposed and Q rows and p are read as
/// float4, so each shared-memory load feeds 4 to 8 FMAs. Key tiles above the diagonal are never
/// loaded; only tiles that cross the diagonal or the end of the keys are masked.

#include <cstring>

#include "attn/backend/cuda/common.cuh"

namespace attn::cuda_detail {

inline constexpr int f32_rows = 32, f32_keys = 32, f32_warps = 4;

/// Bytes of dynamic shared memory of flash_fp32_kernel<Chunks>.
constexpr std::size_t flash_fp32_shared(int chunks) {
  const std::size_t width = 32 * chunks, pitch = width + 4;
  return sizeof(float) *
         ((f32_rows + f32_keys) * pitch + width * (f32_keys + 1) + f32_rows * f32_keys);
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

/// Four consecutive floats of shared memory (16-byte aligned) in one load.
__device__ __forceinline__ float4 load4(const float* p) {
#if defined(__CUDACC__)
  return *reinterpret_cast<const float4*>(p);
#else
  float4 v;
  memcpy(&v, p, sizeof v);
  return v;
#endif
}

template <int Chunks, bool Causal>
__global__ void __launch_bounds__(32 * f32_warps, 1)
    flash_fp32_kernel(batched<const float> q, batched<const float> k, batched<const float> v,
                      batched<float> o, float* lse, index_t lse_s0, index_t lse_s1, index_t lse_s2,
                      index_t Tq, index_t Tk, int D, int Dv, float scale_log2) {
  constexpr int width = 32 * Chunks;      // head dims padded with zeros
  constexpr int pitch = width + 4;        // q_s, v_s rows: 16-byte aligned
  constexpr int kt_pitch = f32_keys + 1;  // K^T rows: the transposing stores hit distinct banks
  ATTN_DYNAMIC_SHARED(float, smem);
  float* q_s = smem;                     // (BLK_Q, width)
  float* kt_s = q_s + f32_rows * pitch;  // (width, BLK_K): K transposed
  float* v_s = kt_s + width * kt_pitch;  // (BLK_K, width)
  float* p_s = v_s + f32_keys * pitch;   // (warps, 8, BLK_K)
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const index_t b = blockIdx.z, h = blockIdx.y, q0 = index_t(blockIdx.x) * f32_rows;
  const float* qp = q.at(b, h);
  const float* kp = k.at(b, h);
  const float* vp = v.at(b, h);
  const index_t off = Tk - Tq;
  const int D4 = (D + 3) / 4 * 4;  // the score loop runs over 4 columns at a time
  for (int e = tid; e < f32_rows * D4; e += 32 * f32_warps) {
    const int r = e / D4, d = e % D4;
    q_s[r * pitch + d] = q0 + r < Tq && d < D ? qp[(q0 + r) * q.rs + d * q.cs] : 0.0f;
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
    for (int e = tid; e < f32_keys * D4; e += 32 * f32_warps) {
      const int j = e / D4, d = e % D4;
      kt_s[d * kt_pitch + j] = j0 + j < Tk && d < D ? kp[(j0 + j) * k.rs + d * k.cs] : 0.0f;
    }
    for (int e = tid; e < f32_keys * width; e += 32 * f32_warps) {
      const int j = e / width, d = e % width;
      v_s[j * pitch + d] = j0 + j < Tk && d < Dv ? vp[(j0 + j) * v.rs + d * v.cs] : 0.0f;
    }
    __syncthreads();
    // s (8, BLK_K): lane = key; q rows as float4 broadcasts, K^T conflict-free.
    float s[8] = {};
    for (int d = 0; d < D4; d += 4) {
      const float k0 = kt_s[d * kt_pitch + lane], k1 = kt_s[(d + 1) * kt_pitch + lane],
                  k2 = kt_s[(d + 2) * kt_pitch + lane], k3 = kt_s[(d + 3) * kt_pitch + lane];
      ATTN_UNROLL
      for (int r = 0; r < 8; ++r) {
        const float4 qv = load4(my_q + r * pitch + d);
        s[r] = fmaf(qv.x, k0, fmaf(qv.y, k1, fmaf(qv.z, k2, fmaf(qv.w, k3, s[r]))));
      }
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
    // acc (8, width) += p (8, BLK_K) v (BLK_K, width): lane owns columns lane + 32 c; p read
    // four keys at a time.
    for (int jj = 0; jj < f32_keys; jj += 4) {
      float4 p4[8];
      ATTN_UNROLL
      for (int r = 0; r < 8; ++r) p4[r] = load4(my_p + r * f32_keys + jj);
      ATTN_UNROLL
      for (int u = 0; u < 4; ++u) {
        float vd[Chunks];
        ATTN_UNROLL
        for (int c = 0; c < Chunks; ++c) vd[c] = v_s[(jj + u) * pitch + lane + 32 * c];
        ATTN_UNROLL
        for (int r = 0; r < 8; ++r) {
          const float pr = u == 0 ? p4[r].x : u == 1 ? p4[r].y : u == 2 ? p4[r].z : p4[r].w;
          ATTN_UNROLL
          for (int c = 0; c < Chunks; ++c) acc[r][c] = fmaf(pr, vd[c], acc[r][c]);
        }
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
