#pragma once
/// \file
/// The definitions of backend<cuda_policy> (declared in attn/cuda.hpp): argument plumbing
/// from views to kernels, the choice of kernel by element type and head dim, and
/// ATTN_CUDA_INSTANTIATE. Kernel instantiations per element type: one GEMM, mask and softmax
/// each, and six flash kernels (three head-dim classes x causal or not).

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "attn/backend/cuda/common.cuh"
#include "attn/backend/cuda/flash_fp32.cuh"
#include "attn/backend/cuda/flash_mma.cuh"
#include "attn/backend/cuda/gemm.cuh"
#include "attn/backend/cuda/softmax.cuh"

namespace attn {

namespace cuda_detail {

/// x [B, T, C] w [C, E] + bias -> y [B, T, E] on one GEMM launch (batch z0 = b).
template <class T>
void project_one(cudaStream_t stream, tensor_view<const T, 3, device_space> x,
                 tensor_view<const T, 2, device_space> w, std::span<const T> bias,
                 tensor_view<T, 3, device_space> y) {
  const batched<const T> a{x.data(), x.stride(0), 0, x.stride(1), x.stride(2)};
  const batched<const T> bw{w.data(), 0, 0, w.stride(0), w.stride(1)};
  const batched<T> c{y.data(), y.stride(0), 0, y.stride(1), y.stride(2)};
  gemm<T>(stream, a, bw, c, bias.empty() ? nullptr : bias.data(), x.extent(0), 1, x.extent(1),
          w.extent(1), x.extent(2), 1.0f);
}

/// Whether every (b, h) row of a [B, H, T, D] view starts 16-byte aligned with unit column
/// stride and D a multiple of 8 (so the flash kernel may use 16-byte cp.async).
template <class T>
bool rows_vectorizable(const tensor_view<const T, 4, device_space>& v) {
  constexpr index_t per16 = 16 / sizeof(T);
  return v.stride(3) == 1 && v.extent(3) % per16 == 0 &&
         reinterpret_cast<std::uintptr_t>(v.data()) % 16 == 0 && v.stride(0) % per16 == 0 &&
         v.stride(1) % per16 == 0 && v.stride(2) % per16 == 0;
}

template <class T, bool Causal>
void flash(cudaStream_t stream, tensor_view<const T, 4, device_space> q,
           tensor_view<const T, 4, device_space> k, tensor_view<const T, 4, device_space> v,
           tensor_view<T, 4, device_space> o, tensor_view<float, 3, device_space> lse,
           double scale) {
  const index_t B = q.extent(0), H = q.extent(1), Tq = q.extent(2), Tk = k.extent(2);
  const int D = static_cast<int>(q.extent(3)), Dv = static_cast<int>(v.extent(3));
  const int widest = D > Dv ? D : Dv;
  if (widest > 256)
    throw backend_error("attn: the CUDA attention supports head dims up to 256, not " +
                        std::to_string(widest) + " (use the stages)");
  if (B > 65535 || H > 65535)
    throw backend_error("attn: CUDA attention: B and H must be at most 65535");
  const float scale_log2 = static_cast<float>(scale) * log2e;
  float* lse_p = lse.data();
  const index_t l0 = lse.stride(0), l1 = lse.stride(1), l2 = lse.stride(2);
  const auto qb = as_batched<const T>(q), kb = as_batched<const T>(k), vb = as_batched<const T>(v);
  const auto ob = as_batched<T>(o);
  if constexpr (std::is_same_v<T, float>) {
    // fast: D <= 64 (2 chunks of 32 columns per lane) and D <= 128 (4); generic: up to 256.
    auto run = [&](auto chunks) {
      constexpr int C = decltype(chunks)::value;
      auto* kernel = &flash_fp32_kernel<C, Causal>;
      const std::size_t bytes = flash_fp32_shared(C);
      check(allow_dynamic_shared(kernel, bytes), "cudaFuncSetAttribute", __FILE__, __LINE__);
      ATTN_CUDA_LAUNCH(kernel, dim3(blocks_for(Tq, f32_rows), unsigned(H), unsigned(B)),
                       dim3(32 * f32_warps), bytes, stream, qb, kb, vb, ob, lse_p, l0, l1, l2, Tq,
                       Tk, D, Dv, scale_log2);
    };
    if (widest <= 64)
      run(std::integral_constant<int, 2>{});
    else if (widest <= 128)
      run(std::integral_constant<int, 4>{});
    else
      run(std::integral_constant<int, 8>{});
  } else {
    const bool vec_q = rows_vectorizable<T>(q);
    const bool vec_kv = rows_vectorizable<T>(k) && rows_vectorizable<T>(v);
    auto run = [&](auto dp) {
      constexpr int Dp = decltype(dp)::value;
      auto* kernel = &flash_mma_kernel<T, Dp, Causal>;
      const std::size_t bytes = flash_mma_shared(Dp);
      check(allow_dynamic_shared(kernel, bytes), "cudaFuncSetAttribute", __FILE__, __LINE__);
      ATTN_CUDA_LAUNCH(kernel, dim3(blocks_for(Tq, mma_rows), unsigned(H), unsigned(B)),
                       dim3(32 * mma_warps), bytes, stream, qb, kb, vb, ob, lse_p, l0, l1, l2, Tq,
                       Tk, D, Dv, scale_log2, vec_q, vec_kv);
    };
    if (widest <= 64)
      run(std::integral_constant<int, 64>{});
    else if (widest <= 128)
      run(std::integral_constant<int, 128>{});
    else
      run(std::integral_constant<int, 256>{});
  }
}

}  // namespace cuda_detail

template <class T>
void backend<cuda_policy>::project(const cuda_policy& policy, in3<T> x, in2<T> w,
                                   std::span<const T> bias, out3<T> y) {
  static_assert(cuda_detail::is_element<T>, "attn::cuda supports float, __half, __nv_bfloat16");
  cuda_detail::project_one<T>(policy.stream, x, w, bias, y);
}

template <class T>
void backend<cuda_policy>::project_qkv(const cuda_policy& policy, in3<T> x, in2<T> w_q, in2<T> w_k,
                                       in2<T> w_v, std::span<const T> b_q, std::span<const T> b_k,
                                       std::span<const T> b_v, out3<T> q, out3<T> k, out3<T> v) {
  static_assert(cuda_detail::is_element<T>, "attn::cuda supports float, __half, __nv_bfloat16");
  cuda_detail::project_one<T>(policy.stream, x, w_q, b_q, q);
  cuda_detail::project_one<T>(policy.stream, x, w_k, b_k, k);
  cuda_detail::project_one<T>(policy.stream, x, w_v, b_v, v);
}

template <class T>
void backend<cuda_policy>::scaled_scores(const cuda_policy& policy, in4<T> q, in4<T> k, out4<T> s,
                                         double scale) {
  static_assert(cuda_detail::is_element<T>, "attn::cuda supports float, __half, __nv_bfloat16");
  using namespace cuda_detail;
  // s (Tq, Tk) = q (Tq, D) k^T (D, Tk) per (b, h)
  gemm<T>(policy.stream, as_batched<const T>(q), as_batched<const T>(k, true), as_batched<T>(s),
          nullptr, q.extent(0), q.extent(1), q.extent(2), k.extent(2), q.extent(3),
          static_cast<float>(scale));
}

template <class T>
void backend<cuda_policy>::causal_mask(const cuda_policy& policy, out4<T> s) {
  static_assert(cuda_detail::is_element<T>, "attn::cuda supports float, __half, __nv_bfloat16");
  cuda_detail::row_launch<T>(&cuda_detail::causal_mask_kernel<T>, policy.stream, s);
}

template <class T>
void backend<cuda_policy>::softmax_rows(const cuda_policy& policy, out4<T> s) {
  static_assert(cuda_detail::is_element<T>, "attn::cuda supports float, __half, __nv_bfloat16");
  cuda_detail::row_launch<T>(&cuda_detail::softmax_kernel<T>, policy.stream, s);
}

template <class T>
void backend<cuda_policy>::weighted_values(const cuda_policy& policy, in4<T> p, in4<T> v,
                                           out4<T> o) {
  static_assert(cuda_detail::is_element<T>, "attn::cuda supports float, __half, __nv_bfloat16");
  using namespace cuda_detail;
  // o (Tq, Dv) = p (Tq, Tk) v (Tk, Dv) per (b, h)
  gemm<T>(policy.stream, as_batched<const T>(p), as_batched<const T>(v), as_batched<T>(o), nullptr,
          p.extent(0), p.extent(1), p.extent(2), v.extent(3), p.extent(3), 1.0f);
}

template <class T>
void backend<cuda_policy>::attention(const cuda_policy& policy, in4<T> q, in4<T> k, in4<T> v,
                                     out4<T> o, lse_view<T> lse, bool causal, double scale) {
  static_assert(cuda_detail::is_element<T>, "attn::cuda supports float, __half, __nv_bfloat16");
  if (o.empty()) return;
  if (causal)
    cuda_detail::flash<T, true>(policy.stream, q, k, v, o, lse, scale);
  else
    cuda_detail::flash<T, false>(policy.stream, q, k, v, o, lse, scale);
}

}  // namespace attn

/// Explicitly instantiates every stage of attn::cuda for element type T (float, __half or
/// __nv_bfloat16) in this .cu file, so .cpp files that include <attn/cuda.hpp> can call them.
/// Write it once per element type, at namespace scope, in one .cu file of the program.
#define ATTN_CUDA_INSTANTIATE(T)                                                                  \
  template void ::attn::backend<::attn::cuda_policy>::project<T>(                                 \
      const ::attn::cuda_policy&, in3<T>, in2<T>, std::span<const T>, out3<T>);                   \
  template void ::attn::backend<::attn::cuda_policy>::project_qkv<T>(                             \
      const ::attn::cuda_policy&, in3<T>, in2<T>, in2<T>, in2<T>, std::span<const T>,             \
      std::span<const T>, std::span<const T>, out3<T>, out3<T>, out3<T>);                         \
  template void ::attn::backend<::attn::cuda_policy>::scaled_scores<T>(                           \
      const ::attn::cuda_policy&, in4<T>, in4<T>, out4<T>, double);                               \
  template void ::attn::backend<::attn::cuda_policy>::causal_mask<T>(const ::attn::cuda_policy&,  \
                                                                     out4<T>);                    \
  template void ::attn::backend<::attn::cuda_policy>::softmax_rows<T>(const ::attn::cuda_policy&, \
                                                                      out4<T>);                   \
  template void ::attn::backend<::attn::cuda_policy>::weighted_values<T>(                         \
      const ::attn::cuda_policy&, in4<T>, in4<T>, out4<T>);                                       \
  template void ::attn::backend<::attn::cuda_policy>::attention<T>(                               \
      const ::attn::cuda_policy&, in4<T>, in4<T>, in4<T>, out4<T>, lse_view<T>, bool, double);
