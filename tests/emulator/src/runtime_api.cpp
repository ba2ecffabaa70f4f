/// \file
/// The CUDA runtime calls a test or a backend makes around its kernels, on host memory: the
/// same host code then runs emulated and on a GPU. cudaMalloc'ed memory starts as NaN bytes.

#include <cstdlib>
#include <cstring>
#include <map>

#include "internal.hpp"

namespace attn_emulator::detail {

namespace {
thread_local cudaError_t last_error = cudaSuccess;
std::map<const void*, std::size_t> dynamic_shared_limits;
constexpr std::size_t default_dynamic_shared = 48 * 1024;
constexpr std::size_t opt_in_dynamic_shared = 227 * 1024;  // sm_90; sm_80 allows 163 KiB
}  // namespace

void set_last_error(cudaError_t error) { last_error = error; }

cudaError_t take_last_error(bool reset) {
  const cudaError_t error = last_error;
  if (reset) last_error = cudaSuccess;
  return error;
}

std::size_t max_dynamic_shared(const void* kernel) {
  const auto it = dynamic_shared_limits.find(kernel);
  return it == dynamic_shared_limits.end() ? default_dynamic_shared : it->second;
}

void set_max_dynamic_shared(const void* kernel, std::size_t bytes) {
  dynamic_shared_limits[kernel] = bytes;
}

}  // namespace attn_emulator::detail

using namespace attn_emulator::detail;

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  *pointer = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!*pointer) return cudaErrorMemoryAllocation;
  std::memset(*pointer, 0xff, bytes);
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  std::free(pointer);
  return cudaSuccess;
}

// Stream-ordered allocation: every launch completes before returning, so plain allocation is
// already in stream order.
cudaError_t cudaMallocAsync(void** pointer, std::size_t bytes, cudaStream_t) {
  return cudaMalloc(pointer, bytes);
}

cudaError_t cudaFreeAsync(void* pointer, cudaStream_t) { return cudaFree(pointer); }

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes) {
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t) {
  return cudaMemset(pointer, value, bytes);
}

// Streams only order work on a GPU; emulated, every launch and copy completes before returning.
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = reinterpret_cast<cudaStream_t>(new char);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaGetLastError() { return take_last_error(true); }
cudaError_t cudaPeekAtLastError() { return take_last_error(false); }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || static_cast<std::size_t>(value) > opt_in_dynamic_shared)
    return cudaErrorInvalidValue;
  set_max_dynamic_shared(kernel, static_cast<std::size_t>(value));
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    default:
      return "unknown error (emulated runtime)";
  }
}
