#pragma once
/// \file
/// Batched strided GEMM with fp32 accumulation, the kernel behind the projections, the scores
/// and the weighted values and their gradients:
///
///     c[z0, z1, m, n] = alpha * sum_k a[z0, z1, m, k] * b[z0, z1, k, n] + bias[n]
///                       (+ c[z0, z1, m, n] when accumulating: sums of several products are
///                       queued one after another, so they add in a fixed order)
///
/// CPU reference: attn/backend/reference/backend.hpp (project, scaled_scores, weighted_values).
/// One 64 x 64 output tile per block of 256 threads, each thread a 4 x 4 register tile; the
/// a and b tiles (64 x 16 and 16 x 64) are staged in shared memory as fp32. Any strides work
/// (loads are element-wise, coalesced when the fastest-moving index has stride 1).

#include "attn/backend/cuda/common.cuh"

namespace attn::cuda_detail {

inline constexpr int gemm_tile = 64, gemm_k = 16, gemm_threads = 256;

/// An optional bias of a GEMM's columns: p[n * stride], or none when p is null.
template <class T>
struct bias_view {
  const T* p = nullptr;
  index_t stride = 0;
};

template <class T>
__global__ void __launch_bounds__(gemm_threads)
    gemm_kernel(batched<const T> a, batched<const T> b, batched<T> c, bias_view<T> bias, int z1s,
                index_t M, index_t N, index_t K, float alpha, bool accumulate) {
  static_assert(gemm_threads == (gemm_tile / 4) * (gemm_tile / 4), "a 4 x 4 tile per thread");
  __shared__ float a_s[gemm_k][gemm_tile + 4];  // (BLK_K, BLK_M): a transposed
  __shared__ float b_s[gemm_k][gemm_tile + 4];  // (BLK_K, BLK_N)
  const int tid = static_cast<int>(threadIdx.x);
  const int tm = tid / 16, tn = tid % 16;  // this thread's rows tm + 16 i, cols tn + 16 j
  const index_t m0 = index_t(blockIdx.y) * gemm_tile, n0 = index_t(blockIdx.x) * gemm_tile;
  const index_t z0 = blockIdx.z / z1s, z1 = blockIdx.z % z1s;
  const T* pa = a.at(z0, z1);
  const T* pb = b.at(z0, z1);
  float acc[4][4] = {};
  for (index_t k0 = 0; k0 < K; k0 += gemm_k) {
    // 64 x 16 elements of each operand, 4 per thread; a's k and b's n move fastest.
    for (int e = tid; e < gemm_tile * gemm_k; e += gemm_threads) {
      const int r = e / gemm_k, kk = e % gemm_k;
      const index_t m = m0 + r, k = k0 + kk;
      a_s[kk][r] = m < M && k < K ? to_float(pa[m * a.rs + k * a.cs]) : 0.0f;
      const int kb = e / gemm_tile, nb = e % gemm_tile;
      const index_t kb_g = k0 + kb, n = n0 + nb;
      b_s[kb][nb] = kb_g < K && n < N ? to_float(pb[kb_g * b.rs + n * b.cs]) : 0.0f;
    }
    __syncthreads();
    ATTN_CUDA_UNROLL
    for (int kk = 0; kk < gemm_k; ++kk) {
      float av[4], bv[4];
      ATTN_CUDA_UNROLL
      for (int i = 0; i < 4; ++i) av[i] = a_s[kk][tm + 16 * i];
      ATTN_CUDA_UNROLL
      for (int j = 0; j < 4; ++j) bv[j] = b_s[kk][tn + 16 * j];
      ATTN_CUDA_UNROLL
      for (int i = 0; i < 4; ++i) ATTN_CUDA_UNROLL
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  T* pc = c.at(z0, z1);
  ATTN_CUDA_UNROLL
  for (int i = 0; i < 4; ++i) ATTN_CUDA_UNROLL
  for (int j = 0; j < 4; ++j) {
    const index_t m = m0 + tm + 16 * i, n = n0 + tn + 16 * j;
    if (m < M && n < N) {
      T& out = pc[m * c.rs + n * c.cs];
      const float bias_n = bias.p != nullptr ? to_float(bias.p[n * bias.stride]) : 0.0f;
      out = from_float<T>(alpha * acc[i][j] + bias_n + (accumulate ? to_float(out) : 0.0f));
    }
  }
}

/// Launches gemm_kernel over z0 in [0, Z0), z1 in [0, Z1) on `stream`. \throws backend_error.
template <class T>
void gemm(cudaStream_t stream, batched<const T> a, batched<const T> b, batched<T> c,
          bias_view<T> bias, index_t Z0, index_t Z1, index_t M, index_t N, index_t K, float alpha,
          bool accumulate = false) {
  if (Z0 * Z1 == 0 || M == 0 || N == 0) return;
  if (Z0 * Z1 > 65535 || blocks_for(M, gemm_tile) > 65535)
    throw backend_error("attn: CUDA GEMM batch (" + std::to_string(Z0 * Z1) + ") or rows (" +
                        std::to_string(M) + ") exceed the grid limits");
  const dim3 grid(blocks_for(N, gemm_tile), blocks_for(M, gemm_tile),
                  static_cast<unsigned>(Z0 * Z1));
  auto* kernel = &gemm_kernel<T>;
  ATTN_CUDA_LAUNCH(kernel, grid, dim3(gemm_threads), 0, stream, a, b, c, bias, static_cast<int>(Z1),
                   M, N, K, alpha, accumulate);
}

/// out[n] = sum over (z, r) of in[z * zs + r * rs + n * cs], one thread per column, rows in
/// order (deterministic): a bias gradient.
template <class T>
__global__ void __launch_bounds__(gemm_threads)
    column_sums_kernel(const T* in, index_t Z, index_t zs, index_t R, index_t rs, index_t N,
                       index_t cs, T* out, index_t os) {
  const index_t n = index_t(blockIdx.x) * gemm_threads + threadIdx.x;
  if (n >= N) return;
  float acc = 0.0f;
  for (index_t z = 0; z < Z; ++z)
    for (index_t r = 0; r < R; ++r) acc += to_float(in[z * zs + r * rs + n * cs]);
  out[n * os] = from_float<T>(acc);
}

/// out [N] = column sums of in [Z, R, N]. \throws backend_error.
template <class T>
void column_sums(cudaStream_t stream, const tensor_view<const T, 3, device_space>& in,
                 const tensor_view<T, 1, device_space>& out) {
  const index_t N = in.extent(2);
  if (N == 0) return;
  ATTN_CUDA_LAUNCH(&column_sums_kernel<T>, dim3(blocks_for(N, gemm_threads)), dim3(gemm_threads), 0,
                   stream, in.data(), in.extent(0), in.stride(0), in.extent(1), in.stride(1), N,
                   in.stride(2), out.data(), out.stride(0));
}

}  // namespace attn::cuda_detail
