#pragma once
/// \file
/// An element-wise copy between two views of one memory space, as an operation of every
/// backend (the KV cache's append runs on it; attn::copy between spaces is in attn/cuda.hpp).

#include "attn/core/policy.hpp"

namespace attn {

/// Arguments of a copy: dst = src, both [*, *, *, *] views of one space (rank 4; lower ranks
/// are padded with unit extents in front).
template <class T, class Space = host_space>
struct copy_args {
  tensor_view<const T, 4, Space> src;  ///< [*, *, *, *]
  tensor_view<T, 4, Space> dst;        ///< the same extents as src

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return copy_args<T, S>{f(src), f(dst)};
  }
};

namespace detail {
/// A view as rank 4, outer unit extents prepended.
template <class T, int R, class S>
tensor_view<T, 4, S> as_rank4(const tensor_view<T, R, S>& v) {
  dims<4> e{1, 1, 1, 1}, s{0, 0, 0, 0};
  for (int i = 0; i < R; ++i) e[4 - R + i] = v.extent(i), s[4 - R + i] = v.stride(i);
  return {v.data(), e, s};
}
}  // namespace detail

}  // namespace attn
