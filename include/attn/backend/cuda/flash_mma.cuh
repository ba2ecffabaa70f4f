#pragma once
/// \file
/// Fused flash-attention forward for __half and __nv_bfloat16 on tensor cores: mma.sync
/// m16n8k16 with fp32 accumulation (attn/backend/cuda/ptx.cuh).
///
/// CPU reference: attn/backend/reference/backend.hpp (attention). One block of 4 warps per
/// (64-query tile, head, batch); warp w owns query rows 16 w .. 16 w + 15. Q, K and V tiles sit
/// in shared memory with rows padded by 8 elements (16 bytes), so the 8 row addresses of an
/// ldmatrix fall in different banks. Head dims are padded with zeros to Dp (64, 128 or 256).
///
///   S = Q K^T    A = Q via ldmatrix.x4, B = K rows via ldmatrix.x4 (two 8-key tiles at once)
///   softmax      on the m16n8 accumulators: each lane holds rows g and g + 8 (g = lane / 4),
///                row max and sum over the 4 lanes of a row with two xor-shuffles, scores
///                scaled by scale * log2(e) and exponentiated with ex2.approx
///   O += P V     P never leaves registers: the accumulators of 8-key tiles 2 kk and 2 kk + 1,
///                packed to 16 bits, are exactly the A fragment of k-step kk; B = V rows via
///                ldmatrix.x4.trans
///
/// Loads are cp.async (16 bytes, zero-filled past the end) when the rows are 16-byte aligned
/// with unit column stride, element-wise otherwise. The next K/V tile is fetched while the
/// current one is used (two stages). Tiles above the causal diagonal are skipped; only tiles
/// that cross it or the end of the keys are masked.

#include "attn/backend/cuda/common.cuh"
#include "attn/backend/cuda/flash_params.cuh"
#include "attn/backend/cuda/ptx.cuh"

namespace attn::cuda_detail {

inline constexpr int mma_rows = 64, mma_warps = 4;

/// Keys per tile for a padded head dim: 64, or 32 at Dp = 256 to keep registers in bounds.
__host__ __device__ constexpr int mma_keys(int dp) { return dp > 128 ? 32 : 64; }

/// Bytes of dynamic shared memory of flash_mma_kernel<T, Dp, *>: Q, then two stages of K, V.
constexpr std::size_t flash_mma_shared(int dp) {
  return 2 * std::size_t(dp + 8) * (mma_rows + 4 * mma_keys(dp));
}

/// Copies rows [r0, r0 + rows) x [0, Dp) of a (n, cols) matrix into shared memory (pitch Dp + 8),
/// zeros outside [0, n) x [0, cols).
template <class T, int Dp>
__device__ __forceinline__ void load_tile(T* dst, const T* src, index_t rs, index_t cs, index_t r0,
                                          int rows, index_t n, int cols, bool vec) {
  constexpr int pitch = Dp + 8, chunks = Dp / 8;
  const int tid = static_cast<int>(threadIdx.x);
  if (vec) {  // 16-byte chunks: cols % 8 == 0, rows 16-byte aligned, cs == 1
    for (int e = tid; e < rows * chunks; e += 32 * mma_warps) {
      const int r = e / chunks, c = (e % chunks) * 8;
      const bool in = r0 + r < n && c < cols;
      cp_async_16(dst + r * pitch + c, in ? src + (r0 + r) * rs + c : src, in ? 16 : 0);
    }
  } else {
    for (int e = tid; e < rows * Dp; e += 32 * mma_warps) {
      const int r = e / Dp, c = e % Dp;
      dst[r * pitch + c] = r0 + r < n && c < cols ? src[(r0 + r) * rs + c * cs] : from_float<T>(0);
    }
  }
}

/// Two floats as a 32-bit register of two T (the first in the low half).
template <class T>
__device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
  std::uint32_t bits;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 x = __floats2half2_rn(lo, hi);
    memcpy(&bits, &x, 4);
  } else {
    const __nv_bfloat162 x = __floats2bfloat162_rn(lo, hi);
    memcpy(&bits, &x, 4);
  }
  return bits;
}

template <class T, int Dp, bool Causal>
__global__ void __launch_bounds__(32 * mma_warps, 1) flash_mma_kernel(flash_params<T> f) {
  static_assert(Dp % 16 == 0 && Dp <= 256, "the padded head dim is a multiple of 16, <= 256");
  static_assert(mma_rows == 16 * mma_warps, "each warp owns 16 query rows of the tile");
  constexpr int BN = mma_keys(Dp), pitch = Dp + 8;
  static_assert(BN % 16 == 0, "P V takes the keys 16 at a time");
  constexpr int n_tiles = BN / 8;  // 8-key accumulator tiles of S
  constexpr int d_tiles = Dp / 8;  // 8-column accumulator tiles of O
  ATTN_DYNAMIC_SHARED(T, smem);
  T* q_s = smem;                     // (BLK_Q, Dp)
  T* kv_s = q_s + mma_rows * pitch;  // 2 stages x [(BLK_K, Dp) K, (BLK_K, Dp) V]
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const index_t b = blockIdx.z, h = blockIdx.y, q0 = index_t(blockIdx.x) * mma_rows;
  const T* kp = f.k.at(b, h);
  const T* vp = f.v.at(b, h);
  mask_spec mask = f.mask;
  mask.causal = Causal;
  const visibility vis(mask, f.Tq, f.vis(b).kv_len);
  const index_t q_end = q0 + mma_rows < f.Tq ? q0 + mma_rows : f.Tq;
  const key_range span = vis.rows(q0, q_end), common = vis.common(q0, q_end);
  const index_t tiles = (span.size() + BN - 1) / BN;
  // Keys past the span are zero-filled, never read (a cache's unused tail may hold anything).
  const auto load_kv = [&](T* dst, index_t j0) {
    load_tile<T, Dp>(dst, kp, f.k.rs, f.k.cs, j0, BN, span.end, f.D, f.vec_kv);
    load_tile<T, Dp>(dst + BN * pitch, vp, f.v.rs, f.v.cs, j0, BN, span.end, f.Dv, f.vec_kv);
  };

  load_tile<T, Dp>(q_s, f.q.at(b, h), f.q.rs, f.q.cs, q0, mma_rows, f.Tq, f.D, f.vec_q);
  if (tiles > 0) load_kv(kv_s, span.begin);
  cp_async_commit();

  float acc[d_tiles][4] = {};
  float m[2] = {neg_inf, neg_inf}, l[2] = {0.0f, 0.0f};  // rows g and g + 8
  const T* my_q = q_s + (warp * 16) * pitch;
  for (index_t tile = 0; tile < tiles; ++tile) {
    const index_t j0 = span.begin + tile * BN;
    T* k_s = kv_s + (tile % 2) * 2 * BN * pitch;
    T* v_s = k_s + BN * pitch;
    cp_async_wait<0>();
    __syncthreads();  // this tile is in; every warp is done with the other stage
    if (tile + 1 < tiles) load_kv(kv_s + ((tile + 1) % 2) * 2 * BN * pitch, j0 + BN);
    cp_async_commit();

    // S (16, BN) = Q (16, Dp) K^T (Dp, BN)
    float s[n_tiles][4] = {};
    ATTN_CUDA_UNROLL
    for (int kk = 0; kk < Dp / 16; ++kk) {
      std::uint32_t a[4];
      ldmatrix_x4(a, my_q + (lane % 8 + ((lane / 8) % 2) * 8) * pitch + kk * 16 + (lane / 16) * 8);
      ATTN_CUDA_UNROLL
      for (int nt = 0; nt < n_tiles; nt += 2) {
        std::uint32_t bk[4];
        ldmatrix_x4(
            bk, k_s + ((nt + lane / 16) * 8 + lane % 8) * pitch + kk * 16 + ((lane / 8) % 2) * 8);
        const std::uint32_t b0[2] = {bk[0], bk[1]}, b1[2] = {bk[2], bk[3]};
        mma_m16n8k16<T>(s[nt], a, b0, s[nt]);
        mma_m16n8k16<T>(s[nt + 1], a, b1, s[nt + 1]);
      }
    }

    // Online softmax in log2 units; masking only on tiles that need it.
    const bool edge = !(common.begin <= j0 && j0 + BN <= common.end);
    float tile_max[2] = {neg_inf, neg_inf};
    ATTN_CUDA_UNROLL
    for (int nt = 0; nt < n_tiles; ++nt) ATTN_CUDA_UNROLL
    for (int e = 0; e < 4; ++e) {
      float x = s[nt][e] * f.scale_log2;
      if (edge) {
        const index_t i = q0 + warp * 16 + g + (e / 2) * 8, j = j0 + nt * 8 + 2 * t + e % 2;
        if (!vis.visible(i, j)) x = neg_inf;
      }
      s[nt][e] = x;
      tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
    }
    float alpha[2], m_use[2];
    ATTN_CUDA_UNROLL
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(m[r], tile_max[r]);
      m_use[r] = max_used(m_new);  // nothing finite seen yet: p = 0
      alpha[r] = ex2_approx(m[r] - m_use[r]);
      m[r] = m_new;
      l[r] *= alpha[r];
    }
    ATTN_CUDA_UNROLL
    for (int dt = 0; dt < d_tiles; ++dt) ATTN_CUDA_UNROLL
    for (int e = 0; e < 4; ++e) acc[dt][e] *= alpha[e / 2];
    ATTN_CUDA_UNROLL
    for (int nt = 0; nt < n_tiles; ++nt) ATTN_CUDA_UNROLL
    for (int e = 0; e < 4; ++e) {
      s[nt][e] = ex2_approx(s[nt][e] - m_use[e / 2]);
      l[e / 2] += s[nt][e];
    }

    // O (16, Dp) += P (16, BN) V (BN, Dp), P straight from the S accumulators.
    ATTN_CUDA_UNROLL
    for (int kk = 0; kk < BN / 16; ++kk) {
      const std::uint32_t a[4] = {
          pack<T>(s[2 * kk][0], s[2 * kk][1]), pack<T>(s[2 * kk][2], s[2 * kk][3]),
          pack<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      ATTN_CUDA_UNROLL
      for (int dt = 0; dt < d_tiles; dt += 2) {
        std::uint32_t bv[4];
        ldmatrix_x4_trans(
            bv, v_s + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * pitch + (dt + lane / 16) * 8);
        const std::uint32_t b0[2] = {bv[0], bv[1]}, b1[2] = {bv[2], bv[3]};
        mma_m16n8k16<T>(acc[dt], a, b0, acc[dt]);
        mma_m16n8k16<T>(acc[dt + 1], a, b1, acc[dt + 1]);
      }
    }
  }
  cp_async_wait<0>();

  // Normalise once; a row that sees no key gives zeros and lse = -inf (finish_softmax).
  T* op = f.o.at(b, h);
  ATTN_CUDA_UNROLL
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const index_t i = q0 + warp * 16 + g + r * 8;
    const softmax_end<float> end = finish_softmax_log2(!vis.row(i).empty(), m[r], l[r]);
    if (i >= f.Tq) continue;
    ATTN_CUDA_UNROLL
    for (int dt = 0; dt < d_tiles; ++dt) ATTN_CUDA_UNROLL
    for (int e = 0; e < 2; ++e) {
      const int d = dt * 8 + 2 * t + e;
      if (d < f.Dv) op[i * f.o.rs + d * f.o.cs] = from_float<T>(acc[dt][r * 2 + e] * end.scale);
    }
    if (f.lse != nullptr && t == 0) *f.lse_at(b, h, i) = end.lse;
  }
}

}  // namespace attn::cuda_detail
