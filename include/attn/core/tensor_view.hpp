#pragma once
/// \file
/// `tensor_view`: a non-owning, strided view of rank 1 to 4, typed by memory space.

#include <array>
#include <concepts>
#include <ranges>
#include <type_traits>

#include "attn/core/config.hpp"

namespace attn {

/// Memory that the CPU reads and writes.
struct host_space {
  static constexpr const char* name = "host";  ///< For messages.
};

/// Memory of a CUDA device. Views of it are never dereferenced on the host.
struct device_space {
  static constexpr const char* name = "device";  ///< For messages.
};

/// Extents or strides of a view: `attn::dims<4>{B, H, T, D}` from any integers.
template <int Rank>
struct dims {
  index_t v[Rank]{};  ///< The values, outermost dimension first.

  /// All zero.
  constexpr dims() = default;
  /// From `Rank` integers of any type.
  template <std::integral... I>
  requires(sizeof...(I) == Rank) constexpr dims(I... i)
      : v{static_cast<index_t>(i)...} {}  // NOLINT: implicit by design

  /// Value `i` (0 <= i < Rank).
  ///@{
  ATTN_HOST_DEVICE constexpr index_t operator[](int i) const { return v[i]; }
  ATTN_HOST_DEVICE constexpr index_t& operator[](int i) { return v[i]; }
  ///@}
};

/// Row-major (last index fastest) strides for `extents`.
template <int Rank>
constexpr dims<Rank> contiguous_strides(const dims<Rank>& extents) {
  dims<Rank> s;
  index_t step = 1;
  for (int i = Rank - 1; i >= 0; --i) {
    s[i] = step;
    step *= extents[i];
  }
  return s;
}

/// A non-owning view of `T` elements in `Space` memory with `Rank` extents and strides
/// (counted in elements). `tensor_view<T>` converts to `tensor_view<const T>`; views of
/// different memory spaces never convert into each other. A rank-1 host view also converts
/// from a contiguous range (`std::vector`, `std::span`, an array), so biases and lengths can be
/// passed as they are.
///
///     float* buf = ...;                                     // [B, T, H, D] in memory
///     attn::tensor_view<const float, 4> q{buf, {B, H, T, D}, {T*H*D, D, H*D, 1}};
template <class T, int Rank, class Space = host_space>
class tensor_view {
  static_assert(Rank >= 1 && Rank <= 4, "attn::tensor_view: rank must be 1, 2, 3 or 4");

 public:
  using element_type = T;                  ///< `T`, const for a read-only view.
  using value_type = std::remove_cv_t<T>;  ///< `T` without const.
  using space = Space;                     ///< The memory the elements live in.
  static constexpr int rank = Rank;        ///< Number of extents.

  /// An empty view (null, all extents 0): an optional argument left out.
  constexpr tensor_view() = default;

  /// A contiguous row-major view of `extents`.
  constexpr tensor_view(T* data, const dims<Rank>& extents)
      : tensor_view(data, extents, contiguous_strides(extents)) {}

  /// A view with explicit strides (in elements), e.g. a permutation of a larger buffer.
  constexpr tensor_view(T* data, const dims<Rank>& extents, const dims<Rank>& strides)
      : data_(data), extents_(extents), strides_(strides) {}

  /// `T` -> `const T`.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>) constexpr tensor_view(
      const tensor_view<U, Rank, Space>& other)  // NOLINT: implicit
      : data_(other.data()), extents_(other.extents()), strides_(other.strides()) {}

  /// A rank-1 host view of a contiguous range of `T` (a vector, span or array).
  template <std::ranges::contiguous_range R>
  requires(Rank == 1 && std::is_same_v<Space, host_space> && std::ranges::sized_range<R> &&
           std::is_convertible_v<std::remove_reference_t<std::ranges::range_reference_t<R>> (*)[],
                                 T (*)[]>) constexpr tensor_view(R&& range)  // NOLINT: implicit
      : data_(std::ranges::data(range)),
        extents_(static_cast<index_t>(std::ranges::size(range))),
        strides_(index_t(1)) {}

  /// Views of another memory space never convert: this overload only exists to say so.
  template <class U, class OtherSpace>
  requires(!std::is_same_v<OtherSpace, Space>)
      tensor_view(const tensor_view<U, Rank, OtherSpace>&) {  // NOLINT: implicit
    static_assert(std::is_same_v<OtherSpace, Space>,
                  "attn: a view of one memory space was passed where another is required. "
                  "Copy the data with attn::copy, or call the policy that owns that memory "
                  "(attn::cuda for device views, attn::cpu or attn::reference for host views).");
  }

  /// The element at index (0, ..., 0).
  ATTN_HOST_DEVICE constexpr T* data() const { return data_; }
  /// Extent of dimension `i`.
  ATTN_HOST_DEVICE constexpr index_t extent(int i) const { return extents_[i]; }
  /// Stride of dimension `i`, in elements.
  ATTN_HOST_DEVICE constexpr index_t stride(int i) const { return strides_[i]; }
  /// All extents.
  constexpr const dims<Rank>& extents() const { return extents_; }
  /// All strides, in elements.
  constexpr const dims<Rank>& strides() const { return strides_; }

  /// Number of elements (product of the extents).
  ATTN_HOST_DEVICE constexpr index_t size() const {
    index_t n = 1;
    for (int i = 0; i < Rank; ++i) n *= extents_[i];
    return n;
  }
  /// True when some extent is 0 (no element).
  ATTN_HOST_DEVICE constexpr bool empty() const {
    for (int i = 0; i < Rank; ++i)
      if (extents_[i] == 0) return true;
    return false;
  }

  /// True when the strides are the row-major strides of the extents.
  constexpr bool is_contiguous() const {
    const dims<Rank> c = contiguous_strides(extents_);
    for (int i = 0; i < Rank; ++i)
      if (extents_[i] > 1 && strides_[i] != c[i]) return false;
    return true;
  }

  /// Element offset of an index tuple.
  template <std::integral... I>
  requires(sizeof...(I) == Rank) ATTN_HOST_DEVICE constexpr index_t offset(I... idx) const {
    const index_t i[] = {static_cast<index_t>(idx)...};
    index_t off = 0;
    for (int d = 0; d < Rank; ++d) off += i[d] * strides_[d];
    return off;
  }

  /// Element access; on the host only for host views, on the device only for device views.
  template <std::integral... I>
  requires(sizeof...(I) == Rank) ATTN_HOST_DEVICE constexpr T& operator()(I... idx) const {
    return data_[offset(idx...)];
  }

 private:
  T* data_ = nullptr;
  dims<Rank> extents_{};
  dims<Rank> strides_{};
};

/// The type of a read-only view parameter of the public functions: element type and memory
/// space are not deduced from it but taken from the output argument, so a `tensor_view<T>`
/// converts implicitly (`input_view<float, 4>` is `tensor_view<const float, 4>`).
template <class T, int Rank, class Space = host_space>
using input_view = tensor_view<const std::type_identity_t<T>, Rank, std::type_identity_t<Space>>;

/// The type of an optional output parameter (a gradient that may be skipped): nothing is
/// deduced from it, so an empty `{}` (not computed) converts, as does any view of T.
template <class T, int Rank, class Space = host_space>
using output_view = tensor_view<std::type_identity_t<T>, Rank, std::type_identity_t<Space>>;

/// A rank-1 view: biases [E], sequence lengths [B].
template <class T, class Space = host_space>
using vector_view = tensor_view<T, 1, Space>;

}  // namespace attn
