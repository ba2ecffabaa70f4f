#pragma once
/// \file
/// Shared test helpers: random unit-scale data, comparisons that report the worst element,
/// the backends under test and the shapes every stage is checked over.

#include <gtest/gtest.h>

#include <algorithm>
#include <attn/attn.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shape.hpp"
#include "tolerance.hpp"

namespace attn::test {

/// One backend and element type under test.
template <class Policy, class T>
struct backend_case {
  using policy_type = Policy;
  using value_type = T;
};

using cpu_float = backend_case<cpu_policy, float>;
using cpu_double = backend_case<cpu_policy, double>;
using backends = ::testing::Types<cpu_float, cpu_double>;

struct backend_names {
  template <class C>
  static std::string GetName(int) {
    using T = typename C::value_type;
    return std::string("cpu_") + (std::is_same_v<T, float> ? "float" : "double");
  }
};

/// Fills `t` with uniform values in [-amp, amp] from a fixed seed.
template <class T, int R>
void fill(host_tensor<T, R>& t, std::uint32_t seed, double amp = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-amp, amp);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = T(u(gen));
}

/// Every element of `a` within tolerance<T> of `ref` (which may hold +-inf: then equal).
template <class T, int R>
::testing::AssertionResult close(const host_tensor<T, R>& a, const host_tensor<T, R>& ref,
                                 double scale = 1.0) {
  if (a.size() != ref.size()) return ::testing::AssertionFailure() << "sizes differ";
  double worst = 0;
  index_t worst_i = -1;
  for (index_t i = 0; i < a.size(); ++i) {
    const double x = a.data()[i], r = ref.data()[i];
    if (std::isinf(r) && x == r) continue;
    const double err =
        std::abs(x - r) / (scale * tolerance<T>::abs + tolerance<T>::rel * std::abs(r));
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst_i << " is " << a.data()[worst_i] << ", reference "
         << ref.data()[worst_i] << " (" << worst << "x the tolerance)";
}

/// True when every element is finite.
template <class T, int R>
bool all_finite(const host_tensor<T, R>& t) {
  for (index_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(double(t.data()[i]))) return false;
  return true;
}

/// Bitwise equality.
template <class T, int R>
bool identical(const host_tensor<T, R>& a, const host_tensor<T, R>& b) {
  return a.size() == b.size() && std::equal(a.data(), a.data() + a.size(), b.data(), [](T x, T y) {
           return std::memcmp(&x, &y, sizeof(T)) == 0;
         });
}

/// The shapes every stage is checked over: T in {1, 2, 7, 9, 63, 64, 65, 127, 200, 1000}, D in
/// {1, 8, 16, 64, 80, 128, 256}, B and H in {1, 2, 3}, Tq < Tk, Tq > Tk and Dv != D.
inline const std::vector<shape>& shapes() {
  static const std::vector<shape> s = {
      {1, 1, 1, 1, 1, 1},         {1, 1, 2, 2, 8, 8},
      {2, 3, 7, 7, 64, 64},       {1, 2, 63, 63, 80, 80},
      {3, 1, 64, 64, 128, 128},   {1, 1, 65, 65, 256, 256},
      {2, 2, 127, 127, 64, 64},   {1, 1, 1000, 1000, 64, 64},
      {1, 1, 1000, 1000, 80, 80}, {1, 1, 7, 65, 8, 8},
      {2, 1, 65, 7, 64, 64},      {1, 3, 63, 127, 256, 256},
      {1, 2, 64, 200, 64, 80},    {3, 3, 2, 1, 1, 8},
      {1, 2, 200, 9, 16, 16},  // causal: rows 0..190 see no key (whole work items)
  };
  return s;
}

/// Random q [B,H,Tq,D], k [B,H,Tk,D], v [B,H,Tk,Dv] for a shape.
template <class T>
struct qkv {
  host_tensor<T, 4> q, k, v;
  explicit qkv(const shape& s, std::uint32_t seed = 1)
      : q({s.B, s.H, s.Tq, s.D}), k({s.B, s.H, s.Tk, s.D}), v({s.B, s.H, s.Tk, s.Dv}) {
    fill(q, seed);
    fill(k, seed + 1);
    fill(v, seed + 2);
  }
};

}  // namespace attn::test
