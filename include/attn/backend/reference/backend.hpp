#pragma once
/// \file
/// The reference backend: plain loops accumulating in double. Slow on purpose and written to be
/// read; every other backend is tested against it. Arguments arrive already checked.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "attn/core/numeric.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/tensor_view.hpp"

namespace attn {

template <>
struct backend<reference_policy> {
  static constexpr double inf = std::numeric_limits<double>::infinity();

  template <class T>
  static void project(const reference_policy&, input_view<T, 3> x, input_view<T, 2> w,
                      std::span<const T> bias, tensor_view<T, 3> y) {
    if (y.empty()) return;
    std::vector<double> acc(static_cast<std::size_t>(w.extent(1)));
    for (index_t b = 0; b < x.extent(0); ++b)
      for (index_t t = 0; t < x.extent(1); ++t) {
        for (index_t e = 0; e < w.extent(1); ++e) acc[e] = bias.empty() ? 0.0 : double(bias[e]);
        for (index_t c = 0; c < x.extent(2); ++c) {
          const double xc = x(b, t, c);
          const T* w_row = &w(c, 0);  // row c of w: elements w_row[e * w.stride(1)]
          for (index_t e = 0; e < w.extent(1); ++e) acc[e] += xc * double(w_row[e * w.stride(1)]);
        }
        for (index_t e = 0; e < w.extent(1); ++e) y(b, t, e) = T(acc[e]);
      }
  }

  template <class T>
  static void project_qkv(const reference_policy& p, input_view<T, 3> x, input_view<T, 2> w_q,
                          input_view<T, 2> w_k, input_view<T, 2> w_v, std::span<const T> b_q,
                          std::span<const T> b_k, std::span<const T> b_v, tensor_view<T, 3> q,
                          tensor_view<T, 3> k, tensor_view<T, 3> v) {
    project(p, x, w_q, b_q, q);
    project(p, x, w_k, b_k, k);
    project(p, x, w_v, b_v, v);
  }

  template <class T>
  static void scaled_scores(const reference_policy&, input_view<T, 4> q, input_view<T, 4> k,
                            tensor_view<T, 4> s, double scale) {
    for_rows(s, [&](index_t b, index_t h, index_t i) {
      for (index_t j = 0; j < k.extent(2); ++j) s(b, h, i, j) = T(scale * dot(q, k, b, h, i, j));
    });
  }

  template <class T>
  static void causal_mask(const reference_policy&, tensor_view<T, 4> s) {
    const index_t offset = s.extent(3) - s.extent(2);
    for_rows(s, [&](index_t b, index_t h, index_t i) {
      for (index_t j = std::max<index_t>(0, i + offset + 1); j < s.extent(3); ++j)
        s(b, h, i, j) = -std::numeric_limits<T>::infinity();
    });
  }

  template <class T>
  static void softmax_rows(const reference_policy&, tensor_view<T, 4> s) {
    std::vector<double> row(static_cast<std::size_t>(s.extent(3)));
    for_rows(s, [&](index_t b, index_t h, index_t i) {
      for (index_t j = 0; j < s.extent(3); ++j) row[j] = s(b, h, i, j);
      softmax(row);
      for (index_t j = 0; j < s.extent(3); ++j) s(b, h, i, j) = T(row[j]);
    });
  }

  template <class T>
  static void weighted_values(const reference_policy&, input_view<T, 4> p, input_view<T, 4> v,
                              tensor_view<T, 4> o) {
    std::vector<double> acc(static_cast<std::size_t>(o.extent(3)));
    for_rows(o, [&](index_t b, index_t h, index_t i) {
      weighted_sum(
          v, b, h, [&](index_t j) { return double(p(b, h, i, j)); }, acc);
      for (index_t d = 0; d < o.extent(3); ++d) o(b, h, i, d) = T(acc[d]);
    });
  }

  /// One query row at a time: scores in double, mask, softmax, weighted sum. Needs O(Tk)
  /// memory, never [Tq, Tk].
  template <class T>
  static void attention(const reference_policy&, input_view<T, 4> q, input_view<T, 4> k,
                        input_view<T, 4> v, tensor_view<T, 4> o, tensor_view<accum_t<T>, 3> lse,
                        bool causal, double scale) {
    const index_t Tk = k.extent(2), offset = Tk - q.extent(2);
    std::vector<double> row(static_cast<std::size_t>(Tk)), acc(std::size_t(o.extent(3)));
    for_rows(o, [&](index_t b, index_t h, index_t i) {
      for (index_t j = 0; j < Tk; ++j)
        row[j] = (causal && j > i + offset) ? -inf : scale * dot(q, k, b, h, i, j);
      const double log_sum = softmax(row);
      weighted_sum(
          v, b, h, [&](index_t j) { return row[j]; }, acc);
      for (index_t d = 0; d < o.extent(3); ++d) o(b, h, i, d) = T(acc[d]);
      if (lse.data() != nullptr) lse(b, h, i) = accum_t<T>(log_sum);
    });
  }

 private:
  /// Calls f(b, h, i) for every row of a [B, H, T, *] view.
  template <class View, class F>
  static void for_rows(const View& s, F&& f) {
    for (index_t b = 0; b < s.extent(0); ++b)
      for (index_t h = 0; h < s.extent(1); ++h)
        for (index_t i = 0; i < s.extent(2); ++i) f(b, h, i);
  }

  template <class T>
  static double dot(tensor_view<const T, 4> q, tensor_view<const T, 4> k, index_t b, index_t h,
                    index_t i, index_t j) {
    const T* qi = &q(b, h, i, 0);
    const T* kj = &k(b, h, j, 0);
    double acc = 0;
    for (index_t d = 0; d < q.extent(3); ++d)
      acc += double(qi[d * q.stride(3)]) * double(kj[d * k.stride(3)]);
    return acc;
  }

  /// acc[d] = sum_j weight(j) * v[b, h, j, d].
  template <class T, class W>
  static void weighted_sum(tensor_view<const T, 4> v, index_t b, index_t h, W&& weight,
                           std::vector<double>& acc) {
    std::fill(acc.begin(), acc.end(), 0.0);
    if (acc.empty()) return;
    for (index_t j = 0; j < v.extent(2); ++j) {
      const double wj = weight(j);
      const T* vj = &v(b, h, j, 0);
      for (index_t d = 0; d < v.extent(3); ++d) acc[d] += wj * double(vj[d * v.stride(3)]);
    }
  }

  /// Stable softmax of `row` in place; returns the log-sum-exp. All -inf gives zeros, -inf.
  static double softmax(std::vector<double>& row) {
    double m = -inf;
    for (double x : row) m = std::max(m, x);
    if (m == -inf) {
      std::fill(row.begin(), row.end(), 0.0);
      return -inf;
    }
    double sum = 0;
    for (double& x : row) sum += (x = std::exp(x - m));
    for (double& x : row) x /= sum;
    return m + std::log(sum);
  }
};

}  // namespace attn
