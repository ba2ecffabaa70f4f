#pragma once
/// \file
/// Gradients checked against central finite differences in double. With a loss
/// L = sum(out * w) for fixed random w (so dL/dout = w), the analytic gradient of an input x
/// (from a backward pass with dout = w) must match (L(x + h e_i) - L(x - h e_i)) / (2 h) for
/// every checked element i, to a relative error (against the largest gradient of x, or 1e-3
/// when all are smaller: an exactly zero gradient, such as a key bias's, meets differences of
/// rounding noise) below `gradcheck_rel`.

#include <gtest/gtest.h>

#include <algorithm>
#include <attn/core/host_tensor.hpp>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "tolerance.hpp"

namespace attn::test {

/// L = sum(out * w) over all elements.
template <int R>
double weighted_sum(const host_tensor<double, R>& out, const host_tensor<double, R>& w) {
  double sum = 0;
  for (index_t i = 0; i < out.size(); ++i) sum += out.data()[i] * w.data()[i];
  return sum;
}

/// Compares `analytic` (dL/dx) with central differences of `loss` in the elements of x: all of
/// them when x has at most `max_checked`, else that many chosen at random (fixed seed).
/// `loss()` must read x's current values.
template <int R>
::testing::AssertionResult gradcheck(host_tensor<double, R>& x,
                                     const host_tensor<double, R>& analytic,
                                     const std::function<double()>& loss, index_t max_checked = 48,
                                     double h = 1e-5) {
  std::vector<index_t> elements;
  if (x.size() <= max_checked) {
    for (index_t i = 0; i < x.size(); ++i) elements.push_back(i);
  } else {
    std::mt19937 gen(7);
    std::uniform_int_distribution<index_t> pick(0, x.size() - 1);
    for (index_t n = 0; n < max_checked; ++n) elements.push_back(pick(gen));
  }
  double largest = 0, worst = 0;
  index_t worst_i = -1;
  std::vector<double> numeric(elements.size());
  for (std::size_t n = 0; n < elements.size(); ++n) {
    double& xi = x.data()[elements[n]];
    const double saved = xi;
    xi = saved + h;
    const double up = loss();
    xi = saved - h;
    const double down = loss();
    xi = saved;
    numeric[n] = (up - down) / (2 * h);
  }
  for (index_t i = 0; i < analytic.size(); ++i)
    largest = std::max(largest, std::abs(analytic.data()[i]));
  for (double g : numeric) largest = std::max(largest, std::abs(g));
  for (std::size_t n = 0; n < elements.size(); ++n) {
    const double err = std::abs(analytic.data()[elements[n]] - numeric[n]);
    if (!(err <= worst)) {
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = elements[n];
    }
  }
  largest = std::max(largest, 1e-3);
  if (worst / largest < gradcheck_rel) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst_i << ": analytic " << analytic.data()[worst_i] << ", numeric "
         << numeric[std::find(elements.begin(), elements.end(), worst_i) - elements.begin()]
         << " (error " << worst / largest << " of the largest gradient " << largest << ")";
}

}  // namespace attn::test
