#pragma once
/// \file
/// Helpers of the kernel tests, which build twice: emulated by g++ and natively by nvcc. The
/// host code is the same in both (the harness emulates the runtime calls used here).

#include <gtest/gtest.h>

#include <attn/backend/cuda/dialect.cuh>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace attn::kernel_test {

/// Skips the test when no GPU is usable (the nvcc build without a driver); emulated, it runs.
#define ATTN_REQUIRE_DEVICE()                                                 \
  do {                                                                        \
    int devices_ = 0;                                                         \
    const cudaError_t error_ = cudaGetDeviceCount(&devices_);                 \
    if (error_ != cudaSuccess || devices_ == 0)                               \
      GTEST_SKIP() << "no usable GPU (" << cudaGetErrorString(error_) << ")"; \
  } while (0)

/// Throws std::runtime_error naming `what` unless `error` is cudaSuccess.
inline void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
}

/// n elements of device memory (host memory when emulated), freed on destruction.
template <class T>
class device_buffer {
 public:
  explicit device_buffer(std::size_t n) : n_(n) {
    check(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)), "cudaMalloc");
  }
  explicit device_buffer(const std::vector<T>& host) : device_buffer(host.size()) {
    check(cudaMemcpy(data_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { cudaFree(data_); }

  T* get() const { return data_; }

  /// Waits for the device, then copies the buffer back.
  std::vector<T> to_host() const {
    check(cudaDeviceSynchronize(), "kernel");
    std::vector<T> host(n_);
    check(cudaMemcpy(host.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }

 private:
  std::size_t n_;
  T* data_ = nullptr;
};

/// n uniform values in [-1, 1), the same for a given seed.
inline std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values) v = uniform(engine);
  return values;
}

/// Whether this binary runs its kernels on the CPU harness.
inline constexpr bool emulated =
#if defined(__CUDACC__)
    false;
#else
    true;
#endif

}  // namespace attn::kernel_test
