#pragma once
/// \file
/// Fused flash-attention forward for float, fp32 FMA on CUDA cores.
///
/// CPU reference: attn/backend/reference/backend.hpp (attention_args). One block of 4 warps
/// per (32-query tile, head, batch); each warp owns 8 query rows. Per 32-key tile (K and V
/// staged in shared memory as fp32): lane j computes the scores of key j for the warp's 8
/// rows, already multiplied by scale * log2(e); the online softmax keeps the running maximum
/// per row (uniform across the warp) and a per-lane partial row sum (reduced once at the end);
/// p = exp2(s - m) goes through a warp-private 8 x 32 shared slice into P V, where lane l owns
/// output columns l + 32 c, c < Chunks. K is stored transposed and Q rows and p are read as
/// float4, so each shared-memory load feeds 4 to 8 FMAs. Only the key tiles the tile's rows
/// see (attn/core/visibility.hpp) are loaded; in a tile some row sees only in part, hidden
/// scores are -inf and hidden values are skipped (a NaN stored there never meets p = 0).

#include <cstring>

#include "attn/backend/cuda/common.cuh"
#include "attn/backend/cuda/flash_params.cuh"

namespace attn::cuda_detail {

inline constexpr int f32_rows = 32, f32_keys = 32, f32_warps = 4;

/// Bytes of dynamic shared memory of flash_fp32_kernel<Chunks>.
constexpr std::size_t flash_fp32_shared(int chunks) {
  const std::size_t width = 32 * chunks, pitch = width + 4;
  return sizeof(float) *
         ((f32_rows + f32_keys) * pitch + width * (f32_keys + 1) + f32_rows * f32_keys);
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

/// acc (8, width) += p (8, BLK_K) v (BLK_K, width) for one warp: lane owns columns lane + 32 c,
/// p read four keys at a time. With `Edge`, row r takes only keys [lo[r], hi[r]) of the tile.
template <bool Edge, int Chunks>
__device__ __forceinline__ void fp32_values(float (&acc)[8][Chunks], const float* my_p,
                                            const float* v_s, int pitch, int lane,
                                            const int (&lo)[8], const int (&hi)[8]) {
  for (int jj = 0; jj < f32_keys; jj += 4) {
    float4 p4[8];
    ATTN_CUDA_UNROLL
    for (int r = 0; r < 8; ++r) p4[r] = load4(my_p + r * f32_keys + jj);
    ATTN_CUDA_UNROLL
    for (int u = 0; u < 4; ++u) {
      float vd[Chunks];
      ATTN_CUDA_UNROLL
      for (int c = 0; c < Chunks; ++c) vd[c] = v_s[(jj + u) * pitch + lane + 32 * c];
      ATTN_CUDA_UNROLL
      for (int r = 0; r < 8; ++r) {
        if (Edge && (jj + u < lo[r] || jj + u >= hi[r])) continue;  // uniform across the warp
        const float pr = u == 0 ? p4[r].x : u == 1 ? p4[r].y : u == 2 ? p4[r].z : p4[r].w;
        ATTN_CUDA_UNROLL
        for (int c = 0; c < Chunks; ++c) acc[r][c] = fmaf(pr, vd[c], acc[r][c]);
      }
    }
  }
}

/// The running state of one warp's 8 query rows: maxima and sums (log2 units), and the output
/// rows, lane owning columns lane + 32 c.
template <int Chunks>
struct fp32_rows {
  float m[8], l[8], acc[8][Chunks];
  __device__ __forceinline__ fp32_rows() {
    ATTN_CUDA_UNROLL
    for (int r = 0; r < 8; ++r) {
      m[r] = neg_inf;
      l[r] = 0.0f;
      ATTN_CUDA_UNROLL
      for (int c = 0; c < Chunks; ++c) acc[r][c] = 0.0f;
    }
  }
};

/// The key tile [j0, j0 + f32_keys) of a matrix K (rows k_rs, columns k_cs apart) and V, against
/// one warp's 8 query rows my_q (rows 32 Chunks + 4 apart, scaled by scale_log2 on the scores).
/// The block stages K^T in kt_s and V in v_s, zeros at keys from `end` on (a cache's unused tail
/// is never read) and past D, Dv; then each warp takes its rows' scores, online softmax (P in
/// my_p) and P V into st. row_keys(r): the keys the warp's row r sees; edge: some row does not
/// see every key of the tile. Every thread of the block calls it.
template <int Chunks, class T, class RowKeys>
__device__ __forceinline__ void fp32_key_tile(const T* kp, index_t k_rs, index_t k_cs, const T* vp,
                                              index_t v_rs, index_t v_cs, int D, int Dv, index_t j0,
                                              index_t end, bool edge, float scale_log2,
                                              const float* my_q, float* kt_s, float* v_s,
                                              float* my_p, RowKeys&& row_keys,
                                              fp32_rows<Chunks>& st) {
  constexpr int width = 32 * Chunks, pitch = width + 4, kt_pitch = f32_keys + 1;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  const int D4 = (D + 3) / 4 * 4;  // the score loop runs over 4 columns at a time
  __syncthreads();                 // every warp is done with the previous K, V tiles
  for (int e = tid; e < f32_keys * D4; e += 32 * f32_warps) {
    const int j = e / D4, d = e % D4;
    kt_s[d * kt_pitch + j] =
        j0 + j < end && d < D ? to_float(kp[(j0 + j) * k_rs + d * k_cs]) : 0.0f;
  }
  for (int e = tid; e < f32_keys * width; e += 32 * f32_warps) {
    const int j = e / width, d = e % width;
    v_s[j * pitch + d] = j0 + j < end && d < Dv ? to_float(vp[(j0 + j) * v_rs + d * v_cs]) : 0.0f;
  }
  __syncthreads();
  // s (8, BLK_K): lane = key; q rows as float4 broadcasts, K^T conflict-free.
  float s[8] = {};
  for (int d = 0; d < D4; d += 4) {
    const float k0 = kt_s[d * kt_pitch + lane], k1 = kt_s[(d + 1) * kt_pitch + lane],
                k2 = kt_s[(d + 2) * kt_pitch + lane], k3 = kt_s[(d + 3) * kt_pitch + lane];
    ATTN_CUDA_UNROLL
    for (int r = 0; r < 8; ++r) {
      const float4 qv = load4(my_q + r * pitch + d);
      s[r] = fmaf(qv.x, k0, fmaf(qv.y, k1, fmaf(qv.z, k2, fmaf(qv.w, k3, s[r]))));
    }
  }
  int lo[8], hi[8];  // tile-relative keys row r sees
  ATTN_CUDA_UNROLL
  for (int r = 0; r < 8; ++r) {
    const key_range keys = row_keys(r);
    lo[r] = int(keys.begin - j0 < 0 ? 0 : keys.begin - j0 > f32_keys ? f32_keys : keys.begin - j0);
    hi[r] = int(keys.end - j0 < lo[r]      ? lo[r]
                : keys.end - j0 > f32_keys ? f32_keys
                                           : keys.end - j0);
    s[r] *= scale_log2;
    if (edge && (lane < lo[r] || lane >= hi[r])) s[r] = neg_inf;
    const float m_new = fmaxf(st.m[r], warp_max(s[r]));
    // A row that has seen nothing finite yet exponentiates against 0: p = 0, alpha = 0 or 1.
    const float alpha = exp2f(st.m[r] - max_used(m_new));
    const float p = exp2f(s[r] - max_used(m_new));
    st.m[r] = m_new;
    st.l[r] = fmaf(st.l[r], alpha, p);
    ATTN_CUDA_UNROLL
    for (int c = 0; c < Chunks; ++c) st.acc[r][c] *= alpha;
    my_p[r * f32_keys + lane] = p;
  }
  __syncwarp();
  if (edge)
    fp32_values<true>(st.acc, my_p, v_s, pitch, lane, lo, hi);
  else
    fp32_values<false>(st.acc, my_p, v_s, pitch, lane, lo, hi);
  __syncwarp();  // my_p is rewritten by the next tile
}

template <int Chunks, bool Causal>
__global__ void __launch_bounds__(32 * f32_warps, 1) flash_fp32_kernel(flash_params<float> f) {
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
  const int D = f.D, Dv = f.Dv;
  const float* qp = f.q.at(b, h);
  const float* kp = f.k.at(b, h);
  const float* vp = f.v.at(b, h);
  mask_spec mask = f.mask;
  mask.causal = Causal;
  const visibility vis(mask, f.Tq, f.vis(b).kv_len);
  const index_t q_end = q0 + f32_rows < f.Tq ? q0 + f32_rows : f.Tq;
  const key_range span = vis.rows(q0, q_end), common = vis.common(q0, q_end);
  const int D4 = (D + 3) / 4 * 4;  // the score loop runs over 4 columns at a time
  for (int e = tid; e < f32_rows * D4; e += 32 * f32_warps) {
    const int r = e / D4, d = e % D4;
    q_s[r * pitch + d] = q0 + r < f.Tq && d < D ? qp[(q0 + r) * f.q.rs + d * f.q.cs] : 0.0f;
  }
  fp32_rows<Chunks> st;
  const float* my_q = q_s + warp * 8 * pitch;
  float* my_p = p_s + warp * 8 * f32_keys;
  for (index_t j0 = span.begin; j0 < span.end; j0 += f32_keys) {
    const bool edge = !(common.begin <= j0 && j0 + f32_keys <= common.end);
    fp32_key_tile(
        kp, f.k.rs, f.k.cs, vp, f.v.rs, f.v.cs, D, Dv, j0, span.end, edge, f.scale_log2, my_q, kt_s,
        v_s, my_p, [&](int r) { return vis.row(q0 + warp * 8 + r); }, st);
  }
  float* op = f.o.at(b, h);
  ATTN_CUDA_UNROLL
  for (int r = 0; r < 8; ++r) {
    const index_t i = q0 + warp * 8 + r;
    const softmax_end<float> end =
        finish_softmax_log2(!vis.row(i).empty(), st.m[r], warp_sum(st.l[r]));
    if (i < f.Tq) {
      ATTN_CUDA_UNROLL
      for (int c = 0; c < Chunks; ++c)
        if (lane + 32 * c < Dv)
          op[i * f.o.rs + (lane + 32 * c) * f.o.cs] = st.acc[r][c] * end.scale;
      if (f.lse != nullptr && lane == 0) *f.lse_at(b, h, i) = end.lse;
    }
  }
}

}  // namespace attn::cuda_detail
