#pragma once
/// \file
/// Element types: the accumulation type of each, and the largest finite value of each.

#include <limits>
#include <type_traits>

// CUDA's 16-bit types, declared so that host code can name them without the CUDA headers.
struct __half;
struct __nv_bfloat16;

namespace attn {

/// Type in which sums over `T` are accumulated and log-sum-exp values are stored: double for
/// double, float for everything narrower (float, half, bfloat16).
template <class T>
using accum_t = std::conditional_t<std::is_same_v<std::remove_cv_t<T>, double>, double, float>;

namespace detail {
/// The largest finite value of an element type (a scale beyond it is rejected).
template <class T>
inline constexpr double element_max = std::numeric_limits<T>::max();
template <>
inline constexpr double element_max<__half> = 65504.0;
template <>
inline constexpr double element_max<__nv_bfloat16> = 3.3895313892515355e38;
}  // namespace detail

}  // namespace attn
