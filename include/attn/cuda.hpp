#pragma once
/// \file
/// attn::cuda, host-safe part: the policy, device memory (`device_tensor`, `copy`), CUDA error
/// reporting and the declarations of `backend<cuda_policy>`. Plain C++: a `.cpp` compiled by
/// g++ may include it (it needs only the CUDA runtime's host header). The kernels live in
/// <attn/cuda.cuh>; a `.cu` file that includes it either calls the stages directly or
/// instantiates them for the `.cpp` files of the program with one line per element type:
///
///     // attn_cuda.cu
///     #include <attn/cuda.cuh>
///     ATTN_CUDA_INSTANTIATE(float)
///     ATTN_CUDA_INSTANTIATE(__half)
///
///     // main.cpp (g++), linked with attn_cuda.o and CUDA::cudart
///     #include <attn/cuda.hpp>
///     attn::device_tensor<float, 4> q({B, H, T, D}), k(...), v(...), o(...);
///     attn::copy(host_q.view(), q.view());
///     attn::attention(attn::cuda.on(stream), q.view(), k.view(), v.view(), o.view());

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attn/core/error.hpp"
#include "attn/core/host_tensor.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/options.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/tensor_view.hpp"
#include "attn/ops/attention.hpp"
#include "attn/ops/mask.hpp"
#include "attn/ops/multi_head.hpp"
#include "attn/ops/projection.hpp"
#include "attn/ops/scores.hpp"
#include "attn/ops/softmax.hpp"
#include "attn/ops/weighted_values.hpp"

namespace attn {

/// The CUDA kernel backend. Views are device views (`tensor_view<T, R, device_space>`), and so
/// is a bias span: it points to device memory. Work is queued on `stream` (the legacy default
/// stream when null); a call returns once its kernels are queued, not when they are done.
struct cuda_policy {
  using space = device_space;
  cudaStream_t stream = nullptr;

  /// The same policy on another stream: `attn::cuda.on(stream)`.
  constexpr cuda_policy on(cudaStream_t s) const { return cuda_policy{s}; }
};

/// The CUDA backend on the default stream.
inline constexpr cuda_policy cuda{};

namespace cuda_detail {

/// Throws backend_error "attn: CUDA error at <file>:<line> (<what>): <cudaGetErrorString>".
[[noreturn]] inline void throw_error(cudaError_t error, const char* what, const char* file,
                                     int line) {
  throw backend_error(std::string("attn: CUDA error at ") + file + ":" + std::to_string(line) +
                      " (" + what + "): " + cudaGetErrorString(error));
}

inline void check(cudaError_t error, const char* what, const char* file, int line) {
  if (error != cudaSuccess) throw_error(error, what, file, line);
}

}  // namespace cuda_detail

/// Evaluates a CUDA runtime call and throws attn::backend_error (with file, line and the CUDA
/// error string) unless it returned cudaSuccess.
#define ATTN_CUDA_CHECK(expr) ::attn::cuda_detail::check((expr), #expr, __FILE__, __LINE__)

/// Owning, contiguous, row-major device memory of `extents` (cudaMalloc; uninitialised). Move
/// only; `view()` gives a device view of it.
template <class T, int Rank>
class device_tensor {
 public:
  device_tensor() = default;
  /// Allocates extents[0] * ... * extents[Rank-1] elements. \throws backend_error.
  explicit device_tensor(const dims<Rank>& extents) : extents_(extents) {
    const index_t n = size();
    if (n > 0) ATTN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()));
  }
  device_tensor(device_tensor&& other) noexcept
      : extents_(other.extents_), data_(std::exchange(other.data_, nullptr)) {}
  device_tensor& operator=(device_tensor&& other) noexcept {
    std::swap(extents_, other.extents_);
    std::swap(data_, other.data_);
    return *this;
  }
  device_tensor(const device_tensor&) = delete;
  device_tensor& operator=(const device_tensor&) = delete;
  ~device_tensor() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }

  tensor_view<T, Rank, device_space> view() { return {data_, extents_}; }
  tensor_view<const T, Rank, device_space> view() const { return {data_, extents_}; }
  operator tensor_view<T, Rank, device_space>() { return view(); }  // NOLINT: implicit
  operator tensor_view<const T, Rank, device_space>() const {       // NOLINT: implicit
    return view();
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  index_t size() const {
    index_t n = 1;
    for (int i = 0; i < Rank; ++i) n *= extents_[i];
    return n;
  }
  std::size_t bytes() const { return static_cast<std::size_t>(size()) * sizeof(T); }
  index_t extent(int i) const { return extents_[i]; }
  const dims<Rank>& extents() const { return extents_; }

 private:
  dims<Rank> extents_{};
  T* data_ = nullptr;
};

template <class T, int Rank>
struct owning_tensor<device_space, T, Rank> {
  using type = device_tensor<T, Rank>;
};

namespace cuda_detail {

/// Elements from the view's first element to its last one (a strided view's memory span).
template <class T, int R, class S>
index_t span_elements(const tensor_view<T, R, S>& v) {
  if (v.empty()) return 0;
  index_t last = 0;
  for (int i = 0; i < R; ++i) last += (v.extent(i) - 1) * v.stride(i);
  return last + 1;
}

/// Calls f(offset) with each element's offset in row-major index order.
template <class T, int R, class S, class F>
void for_offsets(const tensor_view<T, R, S>& v, F&& f) {
  if (v.empty()) return;
  index_t idx[R] = {};
  for (;;) {
    index_t off = 0;
    for (int i = 0; i < R; ++i) off += idx[i] * v.stride(i);
    f(off);
    int d = R - 1;
    while (d >= 0 && ++idx[d] == v.extent(d)) idx[d--] = 0;
    if (d < 0) return;
  }
}

/// The memory span of a view, gathered into host memory (element by element, any space).
template <class U, int R, class S>
std::vector<U> read_span(const tensor_view<const U, R, S>& v) {
  std::vector<U> span(static_cast<std::size_t>(span_elements(v)));
  if (span.empty()) return span;
  if constexpr (std::is_same_v<S, host_space>)
    std::memcpy(span.data(), v.data(), span.size() * sizeof(U));
  else
    ATTN_CUDA_CHECK(
        cudaMemcpy(span.data(), v.data(), span.size() * sizeof(U), cudaMemcpyDeviceToHost));
  return span;
}

}  // namespace cuda_detail

/// Copies `src` into `dst` element by element, between any memory spaces (host <-> device,
/// device <-> device, host <-> host). Contiguous views take one cudaMemcpy; strided views are
/// gathered and scattered through host memory (slower, but any strides work; elements of
/// `dst`'s memory that the view skips keep their values). Synchronous: when it returns, the
/// data is in `dst` (cudaMemcpy, ordered with the legacy default stream).
///
/// \param src  [extents] source view, any space.
/// \param dst  [extents] destination view, any space; must not overlap `src`.
/// \throws shape_error when the extents differ (nothing is copied), backend_error on a CUDA
///         error.
template <class T, class U, int R, class SrcSpace, class DstSpace>
requires std::is_same_v<std::remove_const_t<T>, U>
void copy(tensor_view<T, R, SrcSpace> src, tensor_view<U, R, DstSpace> dst) {
  for (int i = 0; i < R; ++i)
    if (src.extent(i) != dst.extent(i))
      throw shape_error("attn::copy: src extent " + std::to_string(i) + " is " +
                        std::to_string(src.extent(i)) + " but dst extent " + std::to_string(i) +
                        " is " + std::to_string(dst.extent(i)) + "; they must be equal");
  if (src.empty()) return;
  constexpr bool src_host = std::is_same_v<SrcSpace, host_space>;
  constexpr bool dst_host = std::is_same_v<DstSpace, host_space>;
  constexpr cudaMemcpyKind kind =
      src_host ? (dst_host ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice)
               : (dst_host ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
  if (src.is_contiguous() && dst.is_contiguous()) {
    ATTN_CUDA_CHECK(
        cudaMemcpy(dst.data(), src.data(), static_cast<std::size_t>(src.size()) * sizeof(U), kind));
    return;
  }
  // Gather src in index order, then scatter into dst's span (read first: its gaps survive).
  const std::vector<U> src_span = cuda_detail::read_span(tensor_view<const U, R, SrcSpace>(src));
  std::vector<U> packed;
  packed.reserve(static_cast<std::size_t>(src.size()));
  cuda_detail::for_offsets(src, [&](index_t off) { packed.push_back(src_span[off]); });
  std::vector<U> dst_span = cuda_detail::read_span(tensor_view<const U, R, DstSpace>(dst));
  std::size_t n = 0;
  cuda_detail::for_offsets(dst, [&](index_t off) { dst_span[off] = packed[n++]; });
  if constexpr (dst_host)
    std::memcpy(dst.data(), dst_span.data(), dst_span.size() * sizeof(U));
  else
    ATTN_CUDA_CHECK(cudaMemcpy(dst.data(), dst_span.data(), dst_span.size() * sizeof(U),
                               cudaMemcpyHostToDevice));
}

/// The CUDA backend's stages, declared for every element type T in {float, __half,
/// __nv_bfloat16}; defined in <attn/cuda.cuh>, instantiated by ATTN_CUDA_INSTANTIATE(T). Each
/// queues its kernels on `policy.stream` and throws backend_error on a launch error.
template <>
struct backend<cuda_policy> {
  template <class T>
  using in2 = tensor_view<const T, 2, device_space>;
  template <class T>
  using in3 = tensor_view<const T, 3, device_space>;
  template <class T>
  using in4 = tensor_view<const T, 4, device_space>;
  template <class T>
  using out3 = tensor_view<T, 3, device_space>;
  template <class T>
  using out4 = tensor_view<T, 4, device_space>;
  template <class T>
  using lse_view = tensor_view<accum_t<T>, 3, device_space>;

  /// y [B, T, E] = x [B, T, C] w [C, E] + bias [E] (device memory, or empty).
  template <class T>
  static void project(const cuda_policy& policy, in3<T> x, in2<T> w, std::span<const T> bias,
                      out3<T> y);
  /// q, k, v [B, T, E] = x [B, T, C] w_{q,k,v} [C, E] + b_{q,k,v} [E].
  template <class T>
  static void project_qkv(const cuda_policy& policy, in3<T> x, in2<T> w_q, in2<T> w_k, in2<T> w_v,
                          std::span<const T> b_q, std::span<const T> b_k, std::span<const T> b_v,
                          out3<T> q, out3<T> k, out3<T> v);
  /// s [B, H, Tq, Tk] = scale * q [B, H, Tq, D] k [B, H, Tk, D]^T.
  template <class T>
  static void scaled_scores(const cuda_policy& policy, in4<T> q, in4<T> k, out4<T> s, double scale);
  /// s [B, H, Tq, Tk] = -inf where j > i + Tk - Tq.
  template <class T>
  static void causal_mask(const cuda_policy& policy, out4<T> s);
  /// Stable softmax of every row of s [B, H, Tq, Tk]; an all -inf row becomes zeros.
  template <class T>
  static void softmax_rows(const cuda_policy& policy, out4<T> s);
  /// o [B, H, Tq, Dv] = p [B, H, Tq, Tk] v [B, H, Tk, Dv].
  template <class T>
  static void weighted_values(const cuda_policy& policy, in4<T> p, in4<T> v, out4<T> o);
  /// Fused flash attention forward; lse [B, H, Tq] (null data: not written).
  template <class T>
  static void attention(const cuda_policy& policy, in4<T> q, in4<T> k, in4<T> v, out4<T> o,
                        lse_view<T> lse, bool causal, double scale);
};

}  // namespace attn
