#pragma once
/// \file
/// The accumulation type of an element type.

#include <type_traits>

namespace attn {

/// Type in which sums over `T` are accumulated and log-sum-exp values are stored: double for
/// double, float for everything narrower (float, half, bfloat16).
template <class T>
using accum_t = std::conditional_t<std::is_same_v<std::remove_cv_t<T>, double>, double, float>;

}  // namespace attn
