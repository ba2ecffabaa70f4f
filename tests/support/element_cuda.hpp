#pragma once
/// \file
/// element<T> for CUDA's 16-bit types (needs the CUDA headers: included by the CUDA suite).

#include <attn/backend/cuda/common.cuh>

#include "element.hpp"

namespace attn::test {

template <>
struct element<__half> {
  using ref = float;
  static double to_double(__half x) { return cuda_detail::to_float(x); }
  static __half from_double(double x) { return cuda_detail::from_float<__half>(float(x)); }
  static std::string name() { return "half"; }
};

template <>
struct element<__nv_bfloat16> {
  using ref = float;
  static double to_double(__nv_bfloat16 x) { return cuda_detail::to_float(x); }
  static __nv_bfloat16 from_double(double x) {
    return cuda_detail::from_float<__nv_bfloat16>(float(x));
  }
  static std::string name() { return "bfloat16"; }
};

}  // namespace attn::test
