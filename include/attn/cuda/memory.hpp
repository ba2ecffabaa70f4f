#pragma once
/// \file
/// Device memory: `device_tensor` (owning) and `attn::copy` between any memory spaces.
/// Host-safe (the CUDA runtime's host header only).

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attn/core/error.hpp"
#include "attn/core/host_tensor.hpp"
#include "attn/core/memory.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/tensor_view.hpp"
#include "attn/cuda/backend.hpp"
#include "attn/cuda/error.hpp"

namespace attn {

/// Owning, contiguous, row-major device memory of `extents` (cudaMalloc; uninitialised). Move
/// only; `view()` gives a device view of it.
template <class T, int Rank>
class device_tensor {
 public:
  /// No memory (all extents 0).
  device_tensor() = default;
  /// Allocates extents[0] * ... * extents[Rank-1] elements. \throws backend_error.
  explicit device_tensor(const dims<Rank>& extents) : extents_(extents) {
    if (size() > 0) ATTN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()));
  }
  /// Takes `other`'s memory; `other` is left empty.
  device_tensor(device_tensor&& other) noexcept
      : extents_(other.extents_), data_(std::exchange(other.data_, nullptr)) {}
  /// Swaps the memory of the two (this one's is freed with `other`).
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

  /// A row-major device view of the whole array; a device_tensor also converts to one.
  ///@{
  tensor_view<T, Rank, device_space> view() { return {data_, extents_}; }
  tensor_view<const T, Rank, device_space> view() const { return {data_, extents_}; }
  operator tensor_view<T, Rank, device_space>() { return view(); }  // NOLINT: implicit
  operator tensor_view<const T, Rank, device_space>() const {       // NOLINT: implicit
    return view();
  }
  ///@}

  /// The first element (device memory: not dereferenceable on the host).
  ///@{
  T* data() { return data_; }
  const T* data() const { return data_; }
  ///@}
  /// Number of elements (the product of the extents).
  index_t size() const {
    index_t n = 1;
    for (int i = 0; i < Rank; ++i) n *= extents_[i];
    return n;
  }
  /// Size in bytes.
  std::size_t bytes() const { return static_cast<std::size_t>(size()) * sizeof(T); }
  /// Extent of dimension `i`.
  index_t extent(int i) const { return extents_[i]; }
  /// All extents.
  const dims<Rank>& extents() const { return extents_; }

 private:
  dims<Rank> extents_{};
  T* data_ = nullptr;
};

/// Device memory is owned by `device_tensor`.
template <class T, int Rank>
struct owning_tensor<device_space, T, Rank> {
  using type = device_tensor<T, Rank>;  ///< device_tensor<T, Rank>
};

/// Device memory: `cudaMemcpy`.
template <>
struct memory<device_space> {
  /// Copies `bytes` from host memory `src` to device memory `dst` (synchronous: ordered after
  /// all work queued on blocking streams).
  static void upload(void* dst, const void* src, std::size_t bytes) {
    if (bytes != 0) ATTN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
};

namespace cuda_detail {

/// Copies a contiguous host or device buffer into a contiguous one of `n` elements.
template <class U>
void copy_contiguous(const U* src, bool src_host, U* dst, bool dst_host, index_t n) {
  const cudaMemcpyKind kind = src_host
                                  ? (dst_host ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice)
                                  : (dst_host ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
  ATTN_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<std::size_t>(n) * sizeof(U), kind));
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

}  // namespace cuda_detail

/// Copies `src` into `dst` element by element, between any memory spaces (host <-> device,
/// device <-> device, host <-> host), with any strides. Contiguous views take one cudaMemcpy;
/// strided device views are gathered or scattered on the device by a copy kernel (float,
/// __half and __nv_bfloat16: the types ATTN_CUDA_INSTANTIATE instantiates), strided host
/// views on the host; elements of `dst`'s memory that the view skips keep their values.
/// Synchronous: when it returns, the data is in `dst` (ordered with the legacy default stream).
///
/// \param src  [extents] source view, any space.
/// \param dst  [extents] destination view, any space; must not overlap `src`.
/// \throws shape_error when the extents differ or a strided device view has another element
///         type (nothing is copied), backend_error on a CUDA error.
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
  const index_t n = src.size();
  if (src.is_contiguous() && dst.is_contiguous())
    return cuda_detail::copy_contiguous<U>(src.data(), src_host, dst.data(), dst_host, n);
  if constexpr (src_host && dst_host) {
    std::vector<U> packed;
    packed.reserve(static_cast<std::size_t>(n));
    cuda_detail::for_offsets(src, [&](index_t off) { packed.push_back(src.data()[off]); });
    std::size_t i = 0;
    cuda_detail::for_offsets(dst, [&](index_t off) { dst.data()[off] = packed[i++]; });
  } else if constexpr (!detail::is_cuda_float<U>) {
    throw shape_error(
        "attn::copy: strided copies to or from device memory need float, __half or "
        "__nv_bfloat16 elements; copy contiguous views");
  } else {
    // The strided side is handled on the device (kernel) or the host (loop), through one
    // contiguous staging buffer where the two sides differ in space.
    const auto device_copy = [](tensor_view<const U, R, device_space> from,
                                tensor_view<U, R, device_space> to) {
      backend<cuda_policy>::run(
          cuda, copy_args<U, device_space>{detail::as_rank4(from), detail::as_rank4(to)});
      ATTN_CUDA_CHECK(cudaDeviceSynchronize());
    };
    if constexpr (!src_host && !dst_host) {
      device_copy(src, dst);
    } else {
      // Contiguous staging: on the device, and its host image.
      device_tensor<U, R> staged(src.extents());
      std::vector<U> host(static_cast<std::size_t>(n));
      if constexpr (src_host) {
        std::size_t i = 0;
        cuda_detail::for_offsets(src, [&](index_t off) { host[i++] = src.data()[off]; });
        cuda_detail::copy_contiguous<U>(host.data(), true, staged.data(), false, n);
        device_copy(staged.view(), dst);
      } else {
        device_copy(src, staged.view());
        cuda_detail::copy_contiguous<U>(staged.data(), false, host.data(), true, n);
        std::size_t i = 0;
        cuda_detail::for_offsets(dst, [&](index_t off) { dst.data()[off] = host[i++]; });
      }
    }
  }
}

}  // namespace attn
