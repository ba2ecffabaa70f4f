#pragma once
/// \file
/// Strided 2-D slices of attn views as Eigen matrices. Eigen's GEMM wants unit column stride;
/// a slice without it is packed into a temporary (reads) or computed into one and scattered
/// (writes), so every layout works and the common one costs nothing.

#include <Eigen/Core>

#include "attn/core/tensor_view.hpp"

namespace attn::cpu_detail {

template <class T>
using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using matrix_map = Eigen::Map<matrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

/// `rows` x `cols` elements at `p`, row stride `rs`, column stride `cs` (in elements).
template <class T>
struct slice {
  T* p;
  index_t rows, cols, rs, cs;

  bool unit_columns() const { return cs == 1 || cols <= 1; }
  T& operator()(index_t r, index_t c) const { return p[r * rs + c * cs]; }
};

/// Rows [i0, i0 + rows) of the (b, h) matrix of a rank-4 view.
template <class T>
slice<T> rows_of(const tensor_view<T, 4>& v, index_t b, index_t h, index_t i0, index_t rows) {
  return {v.data() + b * v.stride(0) + h * v.stride(1) + i0 * v.stride(2), rows, v.extent(3),
          v.stride(2), v.stride(3)};
}

/// Rows [i0, i0 + rows) of batch entry b of a rank-3 view.
template <class T>
slice<T> rows_of(const tensor_view<T, 3>& v, index_t b, index_t i0, index_t rows) {
  return {v.data() + b * v.stride(0) + i0 * v.stride(1), rows, v.extent(2), v.stride(1),
          v.stride(2)};
}

/// A whole rank-2 view.
template <class T>
slice<T> whole(const tensor_view<T, 2>& v) {
  return {v.data(), v.extent(0), v.extent(1), v.stride(0), v.stride(1)};
}

/// Read-only Eigen map of `s`; packs into `scratch` when the columns are not contiguous.
template <class T>
Eigen::Map<const matrix<T>, Eigen::Unaligned, Eigen::OuterStride<>> read(slice<const T> s,
                                                                         matrix<T>& scratch) {
  using map = Eigen::Map<const matrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
  if (s.unit_columns())
    return map(s.p, s.rows, s.cols, Eigen::OuterStride<>(s.rows > 1 ? s.rs : s.cols));
  scratch.resize(s.rows, s.cols);
  for (index_t r = 0; r < s.rows; ++r)
    for (index_t c = 0; c < s.cols; ++c) scratch(r, c) = s(r, c);
  return map(scratch.data(), s.rows, s.cols, Eigen::OuterStride<>(s.cols));
}

/// Calls compute(map) with a writable Eigen map of `s`, directly when its columns are
/// contiguous, otherwise through a temporary that is scattered into `s` afterwards.
template <class T, class F>
void write(slice<T> s, F&& compute) {
  if (s.unit_columns()) {
    compute(matrix_map<T>(s.p, s.rows, s.cols, Eigen::OuterStride<>(s.rows > 1 ? s.rs : s.cols)));
    return;
  }
  matrix<T> tmp(s.rows, s.cols);
  compute(matrix_map<T>(tmp.data(), s.rows, s.cols, Eigen::OuterStride<>(s.cols)));
  for (index_t r = 0; r < s.rows; ++r)
    for (index_t c = 0; c < s.cols; ++c) s(r, c) = tmp(r, c);
}

}  // namespace attn::cpu_detail
