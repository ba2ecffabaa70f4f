#pragma once
/// \file
/// Element types under test: conversion to and from double, the type the reference computes
/// in (float for the 16-bit types), and a name. The 16-bit specialisations are in
/// element_cuda.hpp (they need the CUDA headers); this header needs neither Eigen nor CUDA.

#include <string>
#include <type_traits>

namespace attn::test {

template <class T>
struct element {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  using ref = T;  ///< the reference backend computes in this type from the same values
  static double to_double(T x) { return double(x); }
  static T from_double(double x) { return T(x); }
  static std::string name() { return std::is_same_v<T, float> ? "float" : "double"; }
};

template <class T>
using ref_t = typename element<T>::ref;

template <class T>
double to_double(T x) {
  return element<T>::to_double(x);
}
template <class T>
T from_double(double x) {
  return element<T>::from_double(x);
}

}  // namespace attn::test
