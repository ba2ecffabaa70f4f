#pragma once
/// \file
/// The device-side strided copy behind attn::copy: dst = src for two [E0, E1, E2, E3] device
/// views of any strides, one element per thread in row-major index order.
///
/// CPU reference: attn::copy between host views (attn/cuda/memory.hpp).

#include "attn/backend/cuda/common.cuh"

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

}  // namespace attn::cuda_detail
