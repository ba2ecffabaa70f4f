#pragma once
/// \file
/// The definitions of backend<cuda_policy> (declared in attn/cuda/backend.hpp): argument
/// plumbing from argument structs to kernels, the choice of kernel by element type and head
/// dim, and ATTN_CUDA_INSTANTIATE. Kernel instantiations per element type: one GEMM, mask,
/// softmax and copy each, and six flash kernels (three head-dim classes x causal or not).

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attn/backend/cuda/common.cuh"
#include "attn/backend/cuda/copy.cuh"
#include "attn/backend/cuda/flash_backward.cuh"
#include "attn/backend/cuda/flash_decode.cuh"
#include "attn/backend/cuda/flash_fp32.cuh"
#include "attn/backend/cuda/flash_mma.cuh"
#include "attn/backend/cuda/gemm.cuh"
#include "attn/backend/cuda/softmax.cuh"
#include "attn/core/operations.hpp"

namespace attn {

namespace cuda_detail {

/// Whether every (b, h) row of a [B, H, T, D] view starts 16-byte aligned with unit column
/// stride and D a multiple of 8 (so the flash kernel may use 16-byte cp.async).
template <class T>
bool rows_vectorizable(const tensor_view<const T, 4, device_space>& v) {
  constexpr index_t per16 = 16 / sizeof(T);
  return v.stride(3) == 1 && v.extent(3) % per16 == 0 &&
         reinterpret_cast<std::uintptr_t>(v.data()) % 16 == 0 && v.stride(0) % per16 == 0 &&
         v.stride(1) % per16 == 0 && v.stride(2) % per16 == 0;
}

/// The wider of a fused call's head dims, once the fused kernels' limits hold (head dims up to
/// 256; B and H up to 65535, the grid's y and z). `what`: "attention" or "attention backward".
inline int fused_head_width(const attention_shape& s, const std::string& what) {
  const int widest = static_cast<int>(s.head_dim > s.value_dim ? s.head_dim : s.value_dim);
  if (widest > 256)
    throw backend_error("attn: the CUDA " + what + " supports head dims up to 256, not " +
                        std::to_string(widest) + " (use the stages)");
  if (s.batch > 65535 || s.heads > 65535)
    throw backend_error("attn: CUDA " + what + ": B and H must be at most 65535");
  return widest;
}

/// Calls f(std::integral_constant<int, V>{}) with the kernel variant V for a head width:
/// Small up to 64 columns, Medium up to 128, Large up to 256.
template <int Small, int Medium, int Large, class F>
void by_head_width(int widest, F&& f) {
  if (widest <= 64)
    f(std::integral_constant<int, Small>{});
  else if (widest <= 128)
    f(std::integral_constant<int, Medium>{});
  else
    f(std::integral_constant<int, Large>{});
}

/// ATTN_CUDA_LAUNCH with `bytes` of dynamic shared memory, opted into first (a kernel needs
/// the opt-in past 48 KiB).
#define ATTN_CUDA_LAUNCH_SHARED(kernel, grid, block, bytes, stream, ...)                \
  (::attn::cuda_detail::check(::attn::cuda_detail::allow_dynamic_shared(kernel, bytes), \
                              "cudaFuncSetAttribute", __FILE__, __LINE__),              \
   ATTN_CUDA_LAUNCH(kernel, grid, block, bytes, stream, __VA_ARGS__))

template <class T, bool Causal>
void flash(cudaStream_t stream, const attention_args<T, device_space>& a) {
  const attention_shape& s = a.shape;
  const int D = static_cast<int>(s.head_dim), Dv = static_cast<int>(s.value_dim);
  const int widest = fused_head_width(s, "attention");
  const bool lse = a.lse.data() != nullptr && !a.lse.empty();
  flash_params<T> f{as_batched<const T>(a.q),
                    as_batched<const T>(a.k, false, s.group()),
                    as_batched<const T>(a.v, false, s.group()),
                    as_batched<T>(a.o),
                    lse ? a.lse.data() : nullptr,
                    lse ? a.lse.stride(0) : 0,
                    lse ? a.lse.stride(1) : 0,
                    lse ? a.lse.stride(2) : 0,
                    a.kv_lengths.empty() ? nullptr : a.kv_lengths.data(),
                    a.kv_lengths.empty() ? 0 : a.kv_lengths.stride(0),
                    s.q_len,
                    s.kv_len,
                    D,
                    Dv,
                    a.mask,
                    static_cast<float>(a.scale) * log2e,
                    false,
                    false};
  const dim3 grid_of = dim3(1, unsigned(s.heads), unsigned(s.batch));
  // A few query rows per key head against many keys: split-KV, a GQA group per block.
  if (s.q_len * s.group() <= decode_rows_max && s.kv_len > decode_keys && s.kv_heads <= 65535) {
    const index_t chunks = (s.kv_len + decode_keys - 1) / decode_keys;
    const index_t rows = s.batch * s.heads * s.q_len;
    const std::size_t bytes = sizeof(float) * std::size_t(chunks * rows * (Dv + 1));
    void* memory = nullptr;
    check(cudaMallocAsync(&memory, bytes, stream), "cudaMallocAsync", __FILE__, __LINE__);
    const decode_workspace w{static_cast<float*>(memory),
                             static_cast<float*>(memory) + chunks * rows * Dv, chunks};
    by_head_width<2, 4, 8>(widest, [&](auto width) {
      constexpr int C = decltype(width)::value;
      auto* kernel = &flash_decode_kernel<T, C>;
      ATTN_CUDA_LAUNCH_SHARED(
          kernel, dim3(unsigned(chunks), unsigned(s.kv_heads), unsigned(s.batch)),
          dim3(32 * f32_warps), flash_fp32_shared(C), stream, f, static_cast<int>(s.group()), w);
    });
    ATTN_CUDA_LAUNCH(&decode_merge_kernel<T>, dim3(blocks_for(rows, 4)), dim3(128), 0, stream, w, f,
                     s.batch, s.heads);
    check(cudaFreeAsync(memory, stream), "cudaFreeAsync", __FILE__, __LINE__);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    // fast: D <= 64 (2 chunks of 32 columns per lane) and D <= 128 (4); generic: up to 256.
    by_head_width<2, 4, 8>(widest, [&](auto chunks) {
      constexpr int C = decltype(chunks)::value;
      auto* kernel = &flash_fp32_kernel<C, Causal>;
      ATTN_CUDA_LAUNCH_SHARED(kernel, dim3(blocks_for(s.q_len, f32_rows), grid_of.y, grid_of.z),
                              dim3(32 * f32_warps), flash_fp32_shared(C), stream, f);
    });
  } else {
    f.vec_q = rows_vectorizable<T>(a.q);
    f.vec_kv = rows_vectorizable<T>(a.k) && rows_vectorizable<T>(a.v);
    by_head_width<64, 128, 256>(widest, [&](auto dp) {
      constexpr int Dp = decltype(dp)::value;
      auto* kernel = &flash_mma_kernel<T, Dp, Causal>;
      ATTN_CUDA_LAUNCH_SHARED(kernel, dim3(blocks_for(s.q_len, mma_rows), grid_of.y, grid_of.z),
                              dim3(32 * mma_warps), flash_mma_shared(Dp), stream, f);
    });
  }
}

template <class T, bool Causal>
void flash_backward(cudaStream_t stream, const attention_backward_args<T, device_space>& a) {
  const attention_shape& s = a.shape;
  const int D = static_cast<int>(s.head_dim), Dv = static_cast<int>(s.value_dim);
  const int widest = fused_head_width(s, "attention backward");
  const auto optional = [](const tensor_view<T, 4, device_space>& t, index_t group = 1) {
    return t.empty() ? batched<T>{nullptr, 0, 0, 0, 0, 1} : as_batched<T>(t, false, group);
  };
  const flash_backward_params<T> f{as_batched<const T>(a.q),
                                   as_batched<const T>(a.k, false, s.group()),
                                   as_batched<const T>(a.v, false, s.group()),
                                   as_batched<const T>(a.o),
                                   as_batched<const T>(a.d_o),
                                   a.lse.data(),
                                   a.lse.stride(0),
                                   a.lse.stride(1),
                                   a.lse.stride(2),
                                   optional(a.dq),
                                   optional(a.dk),
                                   optional(a.dv),
                                   a.kv_lengths.empty() ? nullptr : a.kv_lengths.data(),
                                   a.kv_lengths.empty() ? 0 : a.kv_lengths.stride(0),
                                   s.q_len,
                                   s.kv_len,
                                   D,
                                   Dv,
                                   static_cast<int>(s.group()),
                                   a.mask,
                                   static_cast<float>(a.scale),
                                   static_cast<float>(a.scale) * log2e};
  by_head_width<2, 4, 8>(widest, [&](auto chunks) {
    constexpr int C = decltype(chunks)::value;
    const std::size_t bytes = flash_backward_shared(C);
    if (f.dq.p != nullptr && s.q_len > 0) {
      auto* kernel = &flash_backward_dq_kernel<T, C, Causal>;
      ATTN_CUDA_LAUNCH_SHARED(
          kernel, dim3(blocks_for(s.q_len, bwd_tile), unsigned(s.heads), unsigned(s.batch)),
          dim3(32 * bwd_warps), bytes, stream, f);
    }
    if ((f.dk.p != nullptr || f.dv.p != nullptr) && s.kv_len > 0) {
      auto* kernel = &flash_backward_dkdv_kernel<T, C, Causal>;
      ATTN_CUDA_LAUNCH_SHARED(
          kernel, dim3(blocks_for(s.kv_len, bwd_tile), unsigned(s.kv_heads), unsigned(s.batch)),
          dim3(32 * bwd_warps), bytes, stream, f);
    }
  });
}

/// c (N, E) [+]= alpha * a^T b for matrices of one batch: a (M, N), b (M, E) as batched
/// operands at (z0, z1); when `sum_z1` consecutive z1 share one c, they are added in order.
template <class T>
void gemm_transposed_sum(cudaStream_t stream, const tensor_view<const T, 4, device_space>& a,
                         const tensor_view<const T, 4, device_space>& m,
                         const tensor_view<T, 4, device_space>& c, index_t group, float alpha) {
  // c[b, hk] = alpha * sum_g a[b, hk G + g]^T m[b, hk G + g]: G queued GEMMs, each over all
  // (b, hk), the g-th head of every group by offset.
  for (index_t g = 0; g < group; ++g) {
    const batched<const T> at{a.data() + g * a.stride(1), a.stride(0), group * a.stride(1),
                              a.stride(3), a.stride(2)};
    const batched<const T> mt{m.data() + g * m.stride(1), m.stride(0), group * m.stride(1),
                              m.stride(2), m.stride(3)};
    gemm<T>(stream, at, mt, as_batched<T>(c), bias_view<T>{}, c.extent(0), c.extent(1), c.extent(2),
            c.extent(3), a.extent(2), alpha, g > 0);
  }
}

}  // namespace cuda_detail

/// y[n] [B, T, E_n] = x [B, T, C] w[n] [C, E_n] + bias[n] [E_n], one GEMM launch each.
template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy,
                               const projection_args<T, device_space>& a) {
  using namespace cuda_detail;
  for (int n = 0; n < a.count; ++n) {
    const auto& x = a.x;
    const auto& y = a.y[n];
    const auto& w = a.w[n];
    const batched<const T> xa{x.data(), x.stride(0), 0, x.stride(1), x.stride(2)};
    const batched<const T> wb{w.data(), 0, 0, w.stride(0), w.stride(1)};
    const batched<T> yc{y.data(), y.stride(0), 0, y.stride(1), y.stride(2)};
    const bias_view<T> bias{a.bias[n].empty() ? nullptr : a.bias[n].data(),
                            a.bias[n].empty() ? 0 : a.bias[n].stride(0)};
    gemm<T>(policy.stream, xa, wb, yc, bias, x.extent(0), 1, x.extent(1), w.extent(1), x.extent(2),
            1.0f);
  }
}

/// s (Tq, Tk) = scale * q (Tq, D) k^T (D, Tk) per (b, h).
template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy, const scores_args<T, device_space>& a) {
  using namespace cuda_detail;
  gemm<T>(policy.stream, as_batched<const T>(a.q), as_batched<const T>(a.k, true, a.shape.group()),
          as_batched<T>(a.s), bias_view<T>{}, a.q.extent(0), a.q.extent(1), a.q.extent(2),
          a.k.extent(2), a.q.extent(3), static_cast<float>(a.scale));
}

template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy, const mask_args<T, device_space>& a) {
  cuda_detail::row_launch<T>(&cuda_detail::mask_kernel<T>, policy.stream, a.s,
                             cuda_detail::mask_fill{a.mask, a.gradient});
}

template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy, const softmax_args<T, device_space>& a) {
  cuda_detail::row_launch<T>(&cuda_detail::softmax_kernel<T>, policy.stream, a.s,
                             cuda_detail::mask_fill{});
}

/// o (Tq, Dv) = p (Tq, Tk) v (Tk, Dv) per (b, h).
template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy,
                               const weighted_values_args<T, device_space>& a) {
  using namespace cuda_detail;
  gemm<T>(policy.stream, as_batched<const T>(a.p), as_batched<const T>(a.v, false, a.shape.group()),
          as_batched<T>(a.o), bias_view<T>{}, a.p.extent(0), a.p.extent(1), a.p.extent(2),
          a.v.extent(3), a.p.extent(3), 1.0f);
}

template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy,
                               const attention_args<T, device_space>& a) {
  if (!a.lengths_checked && !a.kv_lengths.empty()) {  // read back, checked before any work
    std::vector<std::int32_t> lengths(static_cast<std::size_t>(a.kv_lengths.extent(0)));
    for (index_t b = 0; b < a.kv_lengths.extent(0); ++b)
      ATTN_CUDA_CHECK(cudaMemcpy(&lengths[std::size_t(b)],
                                 a.kv_lengths.data() + b * a.kv_lengths.stride(0),
                                 sizeof(std::int32_t), cudaMemcpyDeviceToHost));
    for (std::size_t b = 0; b < lengths.size(); ++b)
      if (lengths[b] < 0 || lengths[b] > a.shape.kv_len)
        throw shape_error("attn::attention: kv_lengths[" + std::to_string(b) + "] is " +
                          std::to_string(lengths[b]) + "; it must be in [0, k.Tk (extent 2) = " +
                          std::to_string(a.shape.kv_len) + "]");
  }
  if (a.o.empty() && a.lse.empty()) return;  // (with Dv = 0, lse is still written)
  if (a.mask.causal)
    cuda_detail::flash<T, true>(policy.stream, a);
  else
    cuda_detail::flash<T, false>(policy.stream, a);
}

/// dx = sum_n dy[n] w[n]^T, dw[n] = sum_b x_b^T dy[n]_b, db[n] = column sums of dy[n]: GEMM
/// launches queued in a fixed order.
template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy,
                               const projection_backward_args<T, device_space>& a) {
  using namespace cuda_detail;
  const auto& x = a.x;
  const index_t B = x.extent(0), rows = x.extent(1), C = x.extent(2);
  if (!a.dx.empty()) {
    bool first = true;
    for (int n = 0; n < a.count; ++n) {
      const auto& dy = a.dy[n];
      const auto& w = a.w[n];
      if (w.extent(1) == 0) continue;
      // dx (T, C) = dy (T, E) w^T (E, C) per batch entry
      gemm<T>(policy.stream,
              batched<const T>{dy.data(), dy.stride(0), 0, dy.stride(1), dy.stride(2)},
              batched<const T>{w.data(), 0, 0, w.stride(1), w.stride(0)},
              batched<T>{a.dx.data(), a.dx.stride(0), 0, a.dx.stride(1), a.dx.stride(2)},
              bias_view<T>{}, B, 1, rows, C, w.extent(1), 1.0f, !first);
      first = false;
    }
    if (first) {  // no projection has outputs: dx = 0
      device_tensor<T, 3> zero(dims<3>{B, rows, C});
      ATTN_CUDA_CHECK(cudaMemsetAsync(zero.data(), 0, zero.bytes(), policy.stream));
      strided_copy<T>(policy.stream,
                      detail::as_rank4(tensor_view<const T, 3, device_space>(zero.view())),
                      detail::as_rank4(a.dx));
      ATTN_CUDA_CHECK(cudaStreamSynchronize(policy.stream));
    }
  }
  for (int n = 0; n < a.count; ++n) {
    const auto& dy = a.dy[n];
    if (!a.dw[n].empty())
      for (index_t b = 0; b < B; ++b)  // dw (C, E) += x_b^T (C, T) dy_b (T, E)
        gemm<T>(policy.stream,
                batched<const T>{x.data() + b * x.stride(0), 0, 0, x.stride(2), x.stride(1)},
                batched<const T>{dy.data() + b * dy.stride(0), 0, 0, dy.stride(1), dy.stride(2)},
                batched<T>{a.dw[n].data(), 0, 0, a.dw[n].stride(0), a.dw[n].stride(1)},
                bias_view<T>{}, 1, 1, C, dy.extent(2), rows, 1.0f, b > 0);
    if (!a.db[n].empty()) column_sums<T>(policy.stream, dy, a.db[n]);
  }
}

/// dq = scale ds k (per head, its key head), dk = scale sum over the group of ds^T q.
template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy,
                               const scores_backward_args<T, device_space>& a) {
  using namespace cuda_detail;
  if (!a.dq.empty())
    gemm<T>(policy.stream, as_batched<const T>(a.ds),
            as_batched<const T>(a.k, false, a.shape.group()), as_batched<T>(a.dq), bias_view<T>{},
            a.dq.extent(0), a.dq.extent(1), a.dq.extent(2), a.dq.extent(3), a.ds.extent(3),
            static_cast<float>(a.scale));
  if (!a.dk.empty())
    gemm_transposed_sum<T>(policy.stream, a.ds, a.q, a.dk, a.shape.group(),
                           static_cast<float>(a.scale));
}

template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy,
                               const softmax_backward_args<T, device_space>& a) {
  using namespace cuda_detail;
  const index_t rows = a.ds.extent(0) * a.ds.extent(1) * a.ds.extent(2);
  if (rows == 0 || a.ds.extent(3) == 0) return;
  ATTN_CUDA_LAUNCH(&softmax_backward_kernel<T>, dim3(blocks_for(rows, row_warps)),
                   dim3(32 * row_warps), 0, policy.stream, as_batched<const T>(a.p),
                   as_batched<const T>(a.dp), as_batched<T>(a.ds), a.ds.extent(1), a.ds.extent(2),
                   a.ds.extent(3), rows);
}

/// dp = d_o v^T (per head, its value head), dv = sum over the group of p^T d_o.
template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy,
                               const weighted_values_backward_args<T, device_space>& a) {
  using namespace cuda_detail;
  if (!a.dp.empty())
    gemm<T>(policy.stream, as_batched<const T>(a.d_o),
            as_batched<const T>(a.v, true, a.shape.group()), as_batched<T>(a.dp), bias_view<T>{},
            a.dp.extent(0), a.dp.extent(1), a.dp.extent(2), a.dp.extent(3), a.d_o.extent(3), 1.0f);
  if (!a.dv.empty()) gemm_transposed_sum<T>(policy.stream, a.p, a.d_o, a.dv, a.shape.group(), 1.0f);
}

template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy,
                               const attention_backward_args<T, device_space>& a) {
  if (a.mask.causal)
    cuda_detail::flash_backward<T, true>(policy.stream, a);
  else
    cuda_detail::flash_backward<T, false>(policy.stream, a);
}

template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy, const merge_args<T, device_space>& a) {
  using namespace cuda_detail;
  const index_t rows = a.o.extent(0) * a.o.extent(1) * a.o.extent(2);
  if (rows == 0) return;
  if (blocks_for(rows, copy_threads) > 0x7fffffff)
    throw backend_error("attn: CUDA merge: too many rows (" + std::to_string(rows) + ")");
  ATTN_CUDA_LAUNCH(&merge_kernel<T>, dim3(blocks_for(rows, copy_threads)), dim3(copy_threads), 0,
                   policy.stream, a.o_a, a.o_b, a.lse_a, a.lse_b, a.o, a.lse, rows);
}

template <class T>
void backend<cuda_policy>::run(const cuda_policy& policy, const copy_args<T, device_space>& a) {
  cuda_detail::strided_copy<T>(policy.stream, a.src, a.dst);
}

}  // namespace attn

/// Explicitly instantiates every operation of attn::cuda for element type T (float, __half or
/// __nv_bfloat16) in this .cu file, so .cpp files that include <attn/cuda.hpp> can call them.
/// Write it once per element type, at namespace scope, in one .cu file of the program.
#define ATTN_CUDA_INSTANTIATE(T) ATTN_OPERATIONS(ATTN_CUDA_INSTANTIATE_ONE, T)
/// One operation of ATTN_CUDA_INSTANTIATE.
#define ATTN_CUDA_INSTANTIATE_ONE(op, T)                      \
  template void ::attn::backend<::attn::cuda_policy>::run<T>( \
      const ::attn::cuda_policy&, const ::attn::op<T, ::attn::device_space>&);
