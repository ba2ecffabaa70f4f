#pragma once
/// \file
/// `host_tensor`: an owning, contiguous, zero-initialised host array that hands out views.

#include <vector>

#include "attn/core/tensor_view.hpp"

namespace attn {

/// Owning row-major host storage of `extents`; `view()` gives a `tensor_view` of it.
template <class T, int Rank>
class host_tensor {
 public:
  /// An empty tensor (all extents 0).
  host_tensor() = default;
  /// Zero-initialised storage for `extents`.
  explicit host_tensor(const dims<Rank>& extents) : extents_(extents) {
    index_t n = 1;
    for (int i = 0; i < Rank; ++i) n *= extents[i];
    data_.resize(static_cast<std::size_t>(n));
  }

  /// A row-major view of the whole array; a host_tensor also converts to one implicitly.
  ///@{
  tensor_view<T, Rank> view() { return {data_.data(), extents_}; }
  tensor_view<const T, Rank> view() const { return {data_.data(), extents_}; }
  operator tensor_view<T, Rank>() { return view(); }              // NOLINT: implicit
  operator tensor_view<const T, Rank>() const { return view(); }  // NOLINT: implicit
  ///@}

  /// The first element.
  ///@{
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  ///@}
  /// Number of elements (the product of the extents).
  index_t size() const { return static_cast<index_t>(data_.size()); }
  /// Extent of dimension `i`.
  index_t extent(int i) const { return extents_[i]; }
  /// All extents.
  const dims<Rank>& extents() const { return extents_; }

  /// The element at an index tuple of `Rank` integers (not bounds-checked).
  ///@{
  template <std::integral... I>
  T& operator()(I... idx) {
    return data_[static_cast<std::size_t>(view().offset(idx...))];
  }
  template <std::integral... I>
  const T& operator()(I... idx) const {
    return data_[static_cast<std::size_t>(view().offset(idx...))];
  }
  ///@}

 private:
  dims<Rank> extents_{};
  std::vector<T> data_;
};

/// The owning tensor type for a memory space; backends with their own memory specialise it.
template <class Space, class T, int Rank>
struct owning_tensor;

/// Host memory is owned by `host_tensor`.
template <class T, int Rank>
struct owning_tensor<host_space, T, Rank> {
  using type = host_tensor<T, Rank>;  ///< host_tensor<T, Rank>
};

}  // namespace attn
