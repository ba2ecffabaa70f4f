#pragma once
/// \file
/// `cuda_staged`: a test-only policy on host views that runs every operation on attn::cuda,
/// so the shared test bodies (tests/bodies/) run on the CUDA backend unchanged. One function
/// serves every operation: each view of the argument struct is mapped to a device copy of its
/// memory span (same strides, so the kernels see the layout the test built), the real
/// attn::cuda operation runs, the device is synchronised and the outputs' elements (only
/// those) are copied back.

#include <attn/cuda.cuh>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "../support/testing.hpp"

namespace attn::test {

/// Host views in, attn::cuda underneath.
struct cuda_staged {
  using space = host_space;
  template <class T>
  static constexpr void require_element() {
    cuda_policy::require_element<T>();
  }
};

template <>
struct policy_name<cuda_staged> {
  static constexpr const char* value = "cuda";
};

/// Maps host views to device copies of their spans, and copies the writable ones back.
class stager {
 public:
  using target_space = device_space;

  stager() = default;
  stager(const stager&) = delete;
  stager& operator=(const stager&) = delete;
  ~stager() {
    for (void* p : allocations_) (void)cudaFree(p);
  }

  template <class T, int R>
  tensor_view<T, R, device_space> operator()(const tensor_view<T, R, host_space>& host) {
    using U = std::remove_const_t<T>;
    if (host.data() == nullptr || host.empty()) return {nullptr, host.extents(), host.strides()};
    index_t n = 1;  // the span: first to last element
    for (int i = 0; i < R; ++i) n += (host.extent(i) - 1) * host.stride(i);
    U* device = nullptr;
    ATTN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device), std::size_t(n) * sizeof(U)));
    allocations_.push_back(device);
    ATTN_CUDA_CHECK(
        cudaMemcpy(device, host.data(), std::size_t(n) * sizeof(U), cudaMemcpyHostToDevice));
    if constexpr (!std::is_const_v<T>)
      write_backs_.push_back([host, device, n] {
        std::vector<U> span(static_cast<std::size_t>(n));
        ATTN_CUDA_CHECK(
            cudaMemcpy(span.data(), device, span.size() * sizeof(U), cudaMemcpyDeviceToHost));
        cuda_detail::for_offsets(host, [&](index_t off) { host.data()[off] = span[off]; });
      });
    return {device, host.extents(), host.strides()};
  }

  /// Waits for the device and copies every writable view's elements back.
  void write_back() {
    ATTN_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& f : write_backs_) f();
  }

 private:
  std::vector<void*> allocations_;
  std::vector<std::function<void()>> write_backs_;
};

}  // namespace attn::test

namespace attn {

template <>
struct backend<test::cuda_staged> {
  template <class Args>
  static void run(const test::cuda_staged&, const Args& args) {
    test::stager s;
    detail::run(cuda, args.map(s));
    s.write_back();
  }
};

}  // namespace attn
