#pragma once
/// \file
/// The device-side strided copy behind attn::copy: dst = src for two [E0, E1, E2, E3] device
/// views of any strides, one element per thread in row-major index order.
///
/// CPU reference: attn::copy between host views (attn/cuda/memory.hpp).

#include "attn/backend/cuda/common.cuh"
#include "attn/core/visibility.hpp"

namespace attn::cuda_detail {

inline constexpr int copy_threads = 256;

template <class T>
__global__ void __launch_bounds__(copy_threads)
    copy_kernel(tensor_view<const T, 4, device_space> src, tensor_view<T, 4, device_space> dst,
                index_t n) {
  const index_t i = index_t(blockIdx.x) * copy_threads + threadIdx.x;
  if (i >= n) return;
  const index_t e3 = src.extent(3), e2 = src.extent(2), e1 = src.extent(1);
  const index_t i3 = i % e3, i2 = (i / e3) % e2, i1 = (i / (e3 * e2)) % e1, i0 = i / (e3 * e2 * e1);
  dst(i0, i1, i2, i3) = src(i0, i1, i2, i3);
}

/// Queues the copy on `stream`. \throws backend_error.
template <class T>
void strided_copy(cudaStream_t stream, tensor_view<const T, 4, device_space> src,
                  tensor_view<T, 4, device_space> dst) {
  const index_t n = src.size();
  if (n == 0) return;
  if (blocks_for(n, copy_threads) > 0x7fffffff)
    throw backend_error("attn: CUDA copy: too many elements (" + std::to_string(n) + ")");
  ATTN_CUDA_LAUNCH(&copy_kernel<T>, dim3(blocks_for(n, copy_threads)), dim3(copy_threads), 0,
                   stream, src, dst, n);
}

/// o = w_a o_a + w_b o_b with the weights of the two log-sum-exps, one thread per row (see
/// merge_attention). A row is read before it is written and no other thread touches it, so o
/// may be o_a or o_b and lse may be lse_a or lse_b.
template <class T>
__global__ void __launch_bounds__(copy_threads)
    merge_kernel(tensor_view<const T, 4, device_space> o_a,
                 tensor_view<const T, 4, device_space> o_b,
                 tensor_view<const float, 3, device_space> lse_a,
                 tensor_view<const float, 3, device_space> lse_b, tensor_view<T, 4, device_space> o,
                 tensor_view<float, 3, device_space> lse, index_t rows) {
  const index_t r = index_t(blockIdx.x) * copy_threads + threadIdx.x;
  if (r >= rows) return;
  const index_t Dv = o.extent(3), Tq = o.extent(2), H = o.extent(1);
  const index_t i = r % Tq, h = (r / Tq) % H, b = r / (Tq * H);
  const float la = lse_a(b, h, i), lb = lse_b(b, h, i), m = max_nan(la, lb);
  const float wa = m == neg_inf ? 0.0f : exp2f((la - m) * log2e);
  const float wb = m == neg_inf ? 0.0f : exp2f((lb - m) * log2e);
  // m is -inf only when neither side saw a key; a NaN on either side reaches the sum.
  const softmax_end<float> end = finish_softmax(m != neg_inf, m, wa + wb);
  for (index_t d = 0; d < Dv; ++d) {
    const float x = (wa == 0.0f ? 0.0f : wa * to_float(o_a(b, h, i, d))) +
                    (wb == 0.0f ? 0.0f : wb * to_float(o_b(b, h, i, d)));
    o(b, h, i, d) = from_float<T>(x * end.scale);
  }
  if (lse.data() != nullptr) lse(b, h, i) = end.lse;
}

}  // namespace attn::cuda_detail
