#pragma once
/// \file
/// Host twins of the CUDA device-only math the kernels use. They compute the exact or
/// correctly rounded value; the GPU's fast intrinsics (__expf, __fdividef, rsqrtf) differ in
/// the last bits, so compare results with tolerances.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <bit>
#include <cmath>

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }

template <class T>
T __ldg(const T* address) {
  return *address;
}

// For __half, a * b + c is exact in double: one rounding, as on the GPU. For bf16 it is exact
// unless the exponents differ by more than about 45, which can round twice.
inline __half __hfma(__half a, __half b, __half c) {
  return __double2half(double(__half2float(a)) * __half2float(b) + __half2float(c));
}
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
  return __double2bfloat16(double(__bfloat162float(a)) * __bfloat162float(b) + __bfloat162float(c));
}
inline __half hexp2(__half x) { return __float2half(std::exp2(__half2float(x))); }
inline __half hexp(__half x) { return __float2half(std::exp(__half2float(x))); }
inline __half hsqrt(__half x) { return __float2half(std::sqrt(__half2float(x))); }
inline __half hrcp(__half x) { return __float2half(1.0f / __half2float(x)); }
