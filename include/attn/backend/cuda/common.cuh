#pragma once
/// \file
/// What every kernel of the CUDA backend shares: element conversions to and from the fp32
/// accumulator, warp reductions, strided [B, H, rows, cols] operand descriptors, and the
/// launch check that turns a CUDA error into attn::backend_error.

#include <cstdint>
#include <type_traits>

#include "attn/backend/cuda/dialect.cuh"
#include "attn/core/tensor_view.hpp"
#include "attn/cuda.hpp"

/// `#pragma unroll` for nvcc; nothing for the host compiler of the emulated build. Undefined
/// again at the end of <attn/cuda.cuh>.
#if defined(__CUDACC__)
#define ATTN_CUDA_UNROLL _Pragma("unroll")
#else
#define ATTN_CUDA_UNROLL
#endif

namespace attn::cuda_detail {

/// The element types the kernels support.
template <class T>
inline constexpr bool is_element =
    std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

/// T -> float and float -> T (round to nearest even).
template <class T>
__host__ __device__ __forceinline__ float to_float(T x) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return x;
}
template <class T>
__host__ __device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return x;
}

inline constexpr float log2e = 1.4426950408889634f;
inline constexpr float ln2 = 0.6931471805599453f;
inline constexpr float neg_inf = -__builtin_huge_valf();

/// Max and sum over the 32 lanes of a warp (every lane gets the result).
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/// A batch of strided matrices inside a [Z0, Z1 / group, rows, cols] view: element
/// (z0, z1, r, c) at p[z0 * s0 + (z1 / group) * s1 + r * rs + c * cs], so `group` consecutive
/// z1 share one matrix (the query heads of one key/value head). Passed to kernels by value.
template <class T>
struct batched {
  T* p;
  index_t s0, s1, rs, cs;
  index_t group = 1;

  __device__ __forceinline__ T* at(index_t z0, index_t z1) const {
    return p + z0 * s0 + (z1 / group) * s1;
  }
};

/// [B, H, rows, cols] view as a batch of matrices; `transpose` swaps rows and cols; `group`
/// query heads per head of this view.
template <class T, class U>
batched<T> as_batched(const tensor_view<U, 4, device_space>& v, bool transpose = false,
                      index_t group = 1) {
  return {v.data(),
          v.stride(0),
          v.stride(1),
          transpose ? v.stride(3) : v.stride(2),
          transpose ? v.stride(2) : v.stride(3),
          group};
}

/// Throws backend_error (naming the kernel) when the last launch failed.
inline void check_launch(cudaError_t error, const char* kernel, const char* file, int line) {
  check(error, kernel, file, line);
}
#define ATTN_CUDA_LAUNCH(kernel, ...)                                                 \
  ::attn::cuda_detail::check_launch(::attn::cuda_detail::launch(kernel, __VA_ARGS__), \
                                    "launch of " #kernel, __FILE__, __LINE__)

inline unsigned blocks_for(index_t n, index_t per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

}  // namespace attn::cuda_detail
