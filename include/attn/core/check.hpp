#pragma once
/// \file
/// Host-side argument checks shared by every public entry point. They run before any work,
/// so a failed check leaves every output untouched. Every message starts with the function's
/// name and names the argument (and both extents when two disagree).

#include <cmath>
#include <optional>
#include <string>

#include "attn/core/error.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/tensor_view.hpp"

namespace attn::detail {

/// a * b, or nullopt when it overflows index_t (both non-negative).
inline std::optional<index_t> checked_mul(index_t a, index_t b) {
  index_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// Whether an optional view (lse, a bias, a gradient) was given: a default-constructed view
/// (null, all extents 0) is "not given".
template <class T, int R, class S>
bool given(const tensor_view<T, R, S>& v) {
  if (v.data() != nullptr) return true;
  for (int i = 0; i < R; ++i)
    if (v.extent(i) != 0) return true;
  return false;
}

/// Collects the checks of one call.
struct checker {
  const char* fn;

  [[noreturn]] void fail(const std::string& what) const {
    throw shape_error(std::string("attn::") + fn + ": " + what);
  }

  /// Extents and strides non-negative, element count and largest offset within index_t, data
  /// non-null unless empty.
  template <class T, int R, class S>
  void view(const char* name, const tensor_view<T, R, S>& v) const {
    index_t elements = 1, last = 0;
    bool overflow = false;
    for (int i = 0; i < R; ++i)
      if (v.extent(i) < 0)
        fail(std::string(name) + " extent " + std::to_string(i) + " is negative (" +
             std::to_string(v.extent(i)) + ")");
    for (int i = 0; i < R; ++i) {
      if (v.stride(i) < 0)
        fail(std::string(name) + " stride " + std::to_string(i) + " is negative (" +
             std::to_string(v.stride(i)) + ")");
    }
    for (int i = 0; i < R; ++i) {
      const auto n = checked_mul(elements, v.extent(i));
      overflow = overflow || !n;
      elements = n.value_or(0);
    }
    if (!overflow && elements > 0)
      for (int i = 0; i < R; ++i) {
        const auto step = checked_mul(v.extent(i) - 1, v.stride(i));
        overflow = overflow || !step || __builtin_add_overflow(last, *step, &last);
      }
    if (overflow)
      fail(std::string(name) + " is too large: its element count or largest offset overflows " +
           "a 64-bit index");
    if (v.data() == nullptr && elements != 0)
      fail(std::string(name) + " has null data but " + std::to_string(elements) + " elements");
  }

  /// An output view: as `view`, and no element may be reached twice (no zero stride on an
  /// axis longer than 1; empty outputs are always fine).
  template <class T, int R, class S>
  void output(const char* name, const tensor_view<T, R, S>& v) const {
    view(name, v);
    if (v.empty()) return;
    for (int i = 0; i < R; ++i)
      if (v.stride(i) == 0 && v.extent(i) > 1)
        fail(std::string(name) + " is an output but has stride 0 on axis " + std::to_string(i) +
             " of extent " + std::to_string(v.extent(i)));
  }

  /// `a_name` (extent `a`) must equal `b_name` (extent `b`), e.g. same("k.D", 32, "q.D", 64).
  void same(const std::string& a_name, index_t a, const std::string& b_name, index_t b) const {
    if (a != b)
      fail(a_name + " is " + std::to_string(a) + " but " + b_name + " is " + std::to_string(b) +
           "; they must be equal");
  }

  void positive(const std::string& name, index_t a) const {
    if (a <= 0) fail(name + " is " + std::to_string(a) + "; it must be >= 1");
  }

  /// An optional rank-1 view (a bias): empty, or exactly `n` elements.
  template <class T, class S>
  void optional_vector(const char* name, const tensor_view<T, 1, S>& b, const std::string& n_name,
                       index_t n) const {
    if (!given(b)) return;
    view(name, b);
    if (b.extent(0) != n)
      fail(std::string(name) + " has " + std::to_string(b.extent(0)) + " elements but " + n_name +
           " is " + std::to_string(n) + "; pass an empty view or one of that size");
  }

  /// The score multiplier: `scale` if given, else 1/sqrt(d); finite in the element type T.
  template <class T>
  double scale(const std::optional<double>& scale, index_t d) const {
    const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d));
    if (!(std::abs(s) <= element_max<std::remove_cv_t<T>>))
      fail("scale is " + std::to_string(s) + "; it must be finite in the element type");
    return s;
  }
};

}  // namespace attn::detail
