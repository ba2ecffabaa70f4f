#pragma once
/// \file
/// Every tolerance the tests use, in one place. A result `a` matches a reference `r` when
/// |a - r| <= abs + rel * |r|. Inputs are unit-scale (uniform in [-1, 1], weights scaled by
/// 1/sqrt(fan-in)), so `abs` is relative to unit scale too.

namespace attn::test {

template <class T>
struct tolerance;

template <>
struct tolerance<float> {
  static constexpr double abs = 1e-5;
  static constexpr double rel = 1e-5;
};

template <>
struct tolerance<double> {
  static constexpr double abs = 1e-12;
  static constexpr double rel = 1e-12;
};

}  // namespace attn::test
