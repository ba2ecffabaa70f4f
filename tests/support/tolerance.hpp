#pragma once
/// \file
/// Every tolerance the tests use, in one place. A result `a` matches a reference `r` when
/// |a - r| <= abs + rel * |r|. Inputs are unit-scale (uniform in [-1, 1], weights scaled by
/// 1/sqrt(fan-in)), so `abs` is relative to unit scale too.

// CUDA's 16-bit types (cuda_fp16.h, cuda_bf16.h), declared here so CPU-only tests need no CUDA.
struct __half;
struct __nv_bfloat16;

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

}  // namespace attn::test
