#pragma once
/// \file
/// Host-side argument checks shared by every public entry point. They run before any work,
/// so a failed check leaves every output untouched.

#include <cmath>
#include <optional>
#include <span>
#include <string>

#include "attn/core/error.hpp"
#include "attn/core/tensor_view.hpp"

namespace attn::detail {

/// Collects the checks of one call; every message starts with the function's name.
struct checker {
  const char* fn;

  [[noreturn]] void fail(const std::string& what) const {
    throw shape_error(std::string("attn::") + fn + ": " + what);
  }

  /// Extents non-negative, strides non-negative, data non-null unless empty; an output must
  /// not repeat an element (no zero stride on an axis longer than 1).
  template <class T, int R, class S>
  void view(const char* name, const tensor_view<T, R, S>& v, bool output = false) const {
    for (int i = 0; i < R; ++i)
      if (v.extent(i) < 0)
        fail(std::string(name) + " extent " + std::to_string(i) + " is negative (" +
             std::to_string(v.extent(i)) + ")");
    for (int i = 0; i < R; ++i) {
      if (v.stride(i) < 0)
        fail(std::string(name) + " stride " + std::to_string(i) + " is negative (" +
             std::to_string(v.stride(i)) + ")");
      if (output && v.stride(i) == 0 && v.extent(i) > 1)
        fail(std::string(name) + " is an output but has stride 0 on axis " + std::to_string(i) +
             " of extent " + std::to_string(v.extent(i)));
    }
    if (v.data() == nullptr && v.size() != 0)
      fail(std::string(name) + " has null data but " + std::to_string(v.size()) + " elements");
  }

  /// `a_name` (extent `a`) must equal `b_name` (extent `b`), e.g. same("k.D", 32, "q.D", 64).
  void same(const char* a_name, index_t a, const char* b_name, index_t b) const {
    if (a != b)
      fail(std::string(a_name) + " is " + std::to_string(a) + " but " + b_name + " is " +
           std::to_string(b) + "; they must be equal");
  }

  void positive(const char* name, index_t a) const {
    if (a <= 0) fail(std::string(name) + " is " + std::to_string(a) + "; it must be >= 1");
  }

  /// An optional bias must be empty or hold exactly `n` elements.
  template <class T>
  void bias(const char* name, std::span<const T> b, const char* n_name, index_t n) const {
    if (!b.empty() && static_cast<index_t>(b.size()) != n)
      fail(std::string(name) + " has " + std::to_string(b.size()) + " elements but " + n_name +
           " is " + std::to_string(n) + "; pass an empty bias or one of that size");
    if (!b.empty() && b.data() == nullptr) fail(std::string(name) + " has null data");
  }

  /// The score multiplier: `scale` if given (finite), else 1/sqrt(d).
  double scale(const std::optional<double>& scale, index_t d) const {
    if (!scale) return 1.0 / std::sqrt(static_cast<double>(d));
    if (!std::isfinite(*scale)) fail("scale is " + std::to_string(*scale) + "; it must be finite");
    return *scale;
  }
};

}  // namespace attn::detail
