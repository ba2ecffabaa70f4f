#pragma once
/// \file
/// Split-KV decoding (Flash-Decoding) for a few queries against many keys, fp32 FMA for every
/// element type.
///
/// CPU reference: attn/backend/reference/backend.hpp (attention_args); the CPU twin is
/// attn/backend/cpu/simd/flash_decode.inl. The keys of each (batch, key head) are split into
/// chunks of decode_keys; one block of 4 warps per (chunk, key head, batch) takes every query
/// row of the group (G query heads x Tq queries, up to 32 rows: warp w owns rows 8w..8w+7), so a
/// GQA group's queries share one pass over the chunk's K and V. Per 32-key tile (K^T and V
/// staged in shared memory as fp32, as in flash_fp32.cuh): lane j scores key j for the warp's
/// rows, an online softmax per row, P V with lane l owning output columns l + 32 c. Each block
/// writes its chunk's normalised output and log-sum-exp into a workspace; decode_merge_kernel
/// then adds the chunks of every row in chunk order (deterministic).

#include "attn/backend/cuda/common.cuh"
#include "attn/backend/cuda/flash_fp32.cuh"
#include "attn/backend/cuda/flash_params.cuh"

namespace attn::cuda_detail {

inline constexpr int decode_rows_max = 32;   ///< query rows per block (4 warps x 8)
inline constexpr index_t decode_keys = 512;  ///< keys per chunk

/// The workspace of one decode: (chunks, B, H, Tq) rows of Dv outputs and one lse each.
struct decode_workspace {
  float* o;    // [chunks][B][H][Tq][Dv]
  float* lse;  // [chunks][B][H][Tq]
  index_t chunks;
};

template <class T, int Chunks>
__global__ void __launch_bounds__(32 * f32_warps, 1)
    flash_decode_kernel(flash_params<T> f, int group, decode_workspace w) {
  constexpr int width = 32 * Chunks, pitch = width + 4, kt_pitch = f32_keys + 1;
  ATTN_DYNAMIC_SHARED(float, smem);
  float* q_s = smem;                     // (rows, width)
  float* kt_s = q_s + f32_rows * pitch;  // (width, BLK_K)
  float* v_s = kt_s + width * kt_pitch;  // (BLK_K, width)
  float* p_s = v_s + f32_keys * pitch;   // (warps, 8, BLK_K)
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const index_t c = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int rows = group * static_cast<int>(f.Tq);
  const visibility vis = f.vis(b);
  const index_t len = vis.kv_len;
  const key_range chunk{c * decode_keys < len ? c * decode_keys : len,
                        (c + 1) * decode_keys < len ? (c + 1) * decode_keys : len};
  // The chunk's keys any row sees, and those every row sees.
  key_range span{chunk.end, chunk.begin}, common{chunk.begin, chunk.end};
  for (int r = 0; r < rows; ++r) {
    const key_range keys = vis.row(r % f.Tq);
    const index_t b0 = keys.begin > chunk.begin ? keys.begin : chunk.begin;
    const index_t b1 = keys.end < chunk.end ? keys.end : chunk.end;
    if (b1 > b0) {
      span.begin = b0 < span.begin ? b0 : span.begin;
      span.end = b1 > span.end ? b1 : span.end;
    }
    common.begin = b0 > common.begin ? b0 : common.begin;
    common.end = b1 < common.end ? b1 : common.end;
  }
  const int D = f.D, Dv = f.Dv, D4 = (D + 3) / 4 * 4;
  for (int e = tid; e < f32_rows * D4; e += 32 * f32_warps) {  // row r: head hk G + r / Tq
    const int r = e / D4, d = e % D4;
    const index_t h = hk * group + r / f.Tq, i = r % f.Tq;
    q_s[r * pitch + d] = r < rows && d < D ? to_float(f.q.at(b, h)[i * f.q.rs + d * f.q.cs]) : 0.0f;
  }
  const T* kp = f.k.at(b, hk * group);
  const T* vp = f.v.at(b, hk * group);
  fp32_rows<Chunks> st;
  const float* my_q = q_s + warp * 8 * pitch;
  float* my_p = p_s + warp * 8 * f32_keys;
  const auto row_keys = [&](int r) {  // the chunk's keys the warp's row r sees
    const int row = warp * 8 + r;
    if (row >= rows) return key_range{0, 0};
    const key_range keys = vis.row(row % f.Tq);
    return key_range{keys.begin > chunk.begin ? keys.begin : chunk.begin,
                     keys.end < chunk.end ? keys.end : chunk.end};
  };
  for (index_t j0 = span.begin; j0 < span.end; j0 += f32_keys) {
    const bool edge = !(common.begin <= j0 && j0 + f32_keys <= common.end);
    fp32_key_tile(kp, f.k.rs, f.k.cs, vp, f.v.rs, f.v.cs, D, Dv, j0, span.end, edge, f.scale_log2,
                  my_q, kt_s, v_s, my_p, row_keys, st);
  }
  ATTN_CUDA_UNROLL
  for (int r = 0; r < 8; ++r) {
    const int row = warp * 8 + r;
    if (row >= rows) continue;  // uniform across the warp
    const index_t h = hk * group + row / f.Tq, i = row % f.Tq;
    const key_range keys = vis.row(i);
    const bool sees = (keys.begin > chunk.begin ? keys.begin : chunk.begin) <
                      (keys.end < chunk.end ? keys.end : chunk.end);
    const float sum = warp_sum(st.l[r]);
    const softmax_end<float> end = finish_softmax_log2(sees, st.m[r], sum);
    const float scale = part_scale(end, sum);  // (a part: decode_merge_kernel merges it)
    const index_t H = index_t(gridDim.y) * group;
    const index_t at = ((c * index_t(gridDim.z) + b) * H + h) * f.Tq + i;
    ATTN_CUDA_UNROLL
    for (int cc = 0; cc < Chunks; ++cc)
      if (lane + 32 * cc < Dv) w.o[at * Dv + lane + 32 * cc] = st.acc[r][cc] * scale;
    if (lane == 0) w.lse[at] = end.lse;
  }
}

/// o and lse of every row from its chunks, added in chunk order (the merge of
/// merge_attention): one warp per row, lane l owning columns l + 32 c. f: the decode's
/// arguments (o, lse and the visibility rule are read from it).
template <class T>
__global__ void __launch_bounds__(128)
    decode_merge_kernel(decode_workspace w, flash_params<T> f, index_t B, index_t H) {
  const index_t Tq = f.Tq;
  const int Dv = f.Dv;
  const index_t r = index_t(blockIdx.x) * 4 + threadIdx.x / 32;
  if (r >= B * H * Tq) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const index_t i = r % Tq, h = (r / Tq) % H, b = r / (Tq * H), rows = B * H * Tq;
  float m = neg_inf;
  for (index_t c = 0; c < w.chunks; ++c) m = max_nan(m, w.lse[c * rows + r]);
  float sum = 0.0f;
  for (index_t c = 0; c < w.chunks; ++c) {
    const float x = w.lse[c * rows + r];
    sum += x == neg_inf ? 0.0f : exp2f((x - m) * log2e);
  }
  // A NaN in any chunk reaches the sum. m is -inf where no chunk saw a key, and also where
  // every score the row sees is -inf (an infinite q or k): that row ends as one pass over its
  // keys ends it, 0 / 0 = NaN with lse -inf, not with the zeros of a row that sees none.
  const softmax_end<float> end = finish_softmax(!f.vis(b).row(i).empty(), m, sum);
  // (every chunk, those of weight 0 too: their parts hold zeros, or NaN where the row saw a
  // NaN or Inf value with a score of -inf, which reaches the row as 0 x NaN would)
  for (int d = lane; d < Dv; d += 32) {
    float x = 0.0f;
    for (index_t c = 0; c < w.chunks; ++c) {
      const float lc = w.lse[c * rows + r];
      x += (lc == neg_inf ? 0.0f : exp2f((lc - m) * log2e)) * w.o[(c * rows + r) * Dv + d];
    }
    f.o.at(b, h)[i * f.o.rs + d * f.o.cs] = from_float<T>(x * end.scale);
  }
  if (f.lse != nullptr && lane == 0) *f.lse_at(b, h, i) = end.lse;
}

}  // namespace attn::cuda_detail
