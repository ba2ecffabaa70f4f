#pragma once
/// \file
/// The kernel dialect: the only header a kernel file includes for CUDA itself. Under nvcc it is
/// plain CUDA. Under a host compiler it requires ATTN_CUDA_EMULATION and brings in the CPU
/// execution harness (tests/emulator), where every CUDA thread is a fiber.
///
///   ATTN_DEVICE_ARCH            1 in device code (nvcc's device pass, or emulated), else 0;
///                               use it instead of __CUDA_ARCH__, which g++ must never see.
///   ATTN_DYNAMIC_SHARED(T, p)   declares `T* p`, the block's dynamic shared memory (16-byte
///                               aligned; emulated: NaN bytes at the start of every block).
///   attn::cuda_detail::launch   the <<<grid, block, shared_bytes, stream>>> launch, which a
///                               host compiler cannot parse.
///   attn::cuda_detail::allow_dynamic_shared   a kernel's opt-in to over 48 KiB of it.

#include <cstddef>
#include <tuple>
#include <utility>

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__)
#define ATTN_DEVICE_ARCH 1
#else
#define ATTN_DEVICE_ARCH 0
#endif

#define ATTN_DYNAMIC_SHARED(T, name)                                         \
  extern __shared__ __align__(16) unsigned char attn_dynamic_shared_bytes[]; \
  T* name = reinterpret_cast<T*>(attn_dynamic_shared_bytes)

#elif defined(ATTN_CUDA_EMULATION)

#include <attn_emulator/cuda.hpp>

#define ATTN_DEVICE_ARCH 1
#define ATTN_DYNAMIC_SHARED(T, name) \
  T* name = static_cast<T*>(::attn_emulator::dynamic_shared_memory())

#else
#error "attn/backend/cuda/dialect.cuh needs nvcc, or a host compiler with ATTN_CUDA_EMULATION"
#endif

namespace attn::cuda_detail {

/// Launches `kernel(args...)` on `grid` x `block` threads with `shared_bytes` of dynamic
/// shared memory on `stream`, and returns the launch error (cudaGetLastError). Emulated, the
/// grid runs to completion on the calling thread before this returns (the stream is ignored),
/// and the arguments are converted to the kernel's parameter types once, as a launch does.
template <class... Params, class... Args>
[[nodiscard]] cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block,
                                 std::size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "one argument per kernel parameter");
#if defined(__CUDACC__)
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#else
  (void)stream;
  const std::tuple<Params...> params(std::forward<Args>(args)...);
  auto thread = [&] { std::apply(kernel, params); };
  (void)::attn_emulator::launch(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes,
                                thread);
#endif
  return cudaGetLastError();
}

/// Lets `kernel` launch with up to `bytes` of dynamic shared memory (over 48 KiB needs this
/// opt-in; sm_80 allows 163 KiB, sm_90 227 KiB). Returns the CUDA error.
template <class... Params>
[[nodiscard]] cudaError_t allow_dynamic_shared(void (*kernel)(Params...), std::size_t bytes) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace attn::cuda_detail
