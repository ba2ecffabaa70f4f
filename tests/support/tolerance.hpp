#pragma once
/// \file
/// Every tolerance the tests use, in one place. A result `a` matches a reference `r` when
/// |a - r| <= abs + rel * |r|. Inputs are unit-scale (uniform in [-1, 1], weights scaled by
/// 1/sqrt(fan-in)), so `abs` is relative to unit scale too.

#include <attn/core/numeric.hpp>  // declares __half and __nv_bfloat16

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

/// CUDA 16-bit types, for results rounded once from an fp32 accumulator (half: 11-bit
/// significand, unit roundoff 4.9e-4; bfloat16: 8-bit, 3.9e-3). The fused attention in these
/// types is judged like FlashAttention's: its error against an fp32 reference may be at most
/// `fused_factor` times that of a naive 16-bit computation (stages rounded to 16 bits), plus
/// `abs`.
template <>
struct tolerance<__half> {
  static constexpr double abs = 1e-3;
  static constexpr double rel = 2e-3;
  static constexpr double fused_factor = 2.0;
};

template <>
struct tolerance<__nv_bfloat16> {
  static constexpr double abs = 8e-3;
  static constexpr double rel = 1.6e-2;
  static constexpr double fused_factor = 2.0;
};

/// Log-sum-exp values are fp32 in every 16-bit type: only their score sums differ from the
/// fp32 reference's.
inline constexpr double lse_abs_16bit = 1e-3;

/// Gradients against central finite differences of the double reference (relative error).
inline constexpr double gradcheck_rel = 1e-6;

}  // namespace attn::test
