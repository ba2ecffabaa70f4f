#pragma once
/// \file
/// Host-side argument checks shared by every public entry point. They run before any work,
/// so a failed check leaves every output untouched. Every message starts with the function's
/// name and names the argument (and both extents when two disagree).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

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

/// Where a view's elements lie, in bytes: its name, first byte, element size, and the extents
/// and byte strides of its axes longer than 1. Enough to decide overlap without reading memory.
struct footprint {
  const char* name = nullptr;
  std::intptr_t base = 0;
  std::intptr_t element = 0;
  int rank = 0;
  std::intptr_t extents[8] = {}, strides[8] = {};

  bool empty() const { return element == 0; }
  /// One past the last byte reached.
  std::intptr_t end() const {
    std::intptr_t last = base + element;
    for (int i = 0; i < rank; ++i) last += (extents[i] - 1) * strides[i];
    return last;
  }
};

/// The footprint of a checked view (an empty view has none).
template <class T, int R, class S>
footprint footprint_of(const char* name, const tensor_view<T, R, S>& v) {
  footprint f{name};
  if (v.empty()) return f;
  f.base = reinterpret_cast<std::intptr_t>(v.data());
  f.element = sizeof(T);
  for (int i = 0; i < R; ++i)
    if (v.extent(i) > 1) {
      f.extents[f.rank] = v.extent(i);
      f.strides[f.rank++] = v.stride(i) * std::intptr_t(sizeof(T));
    }
  return f;
}

/// Whether `sum_k n_k * stride_k == target` has a solution with every n_k in [lo_k, hi_k]
/// (and, with `nonzero`, some n_k != 0): the question of whether two index sets of strided
/// views meet. Axes sorted by falling stride; each level tries only the n that leave a target
/// the smaller axes can still reach, which for nested strides (each stride past the span of the
/// smaller ones, as in every dense or sliced layout) is at most two. Beyond a fixed number of
/// steps it answers yes: "may overlap" is the safe side.
class lattice {
 public:
  void axis(std::intptr_t stride, std::intptr_t lo, std::intptr_t hi) {
    if (stride == 0 || (lo == 0 && hi == 0)) return;  // reaches nothing new
    for (int i = 0; i < n_; ++i)
      if (axes_[i].stride == stride) {  // same stride: the ranges add
        axes_[i].lo += lo, axes_[i].hi += hi;
        return;
      }
    axes_[n_++] = {stride, lo, hi};
  }

  bool solvable(std::intptr_t target, bool nonzero) {
    std::sort(axes_, axes_ + n_, [](const auto& a, const auto& b) { return a.stride > b.stride; });
    rest_lo_[n_] = rest_hi_[n_] = 0;
    for (int i = n_ - 1; i >= 0; --i) {
      rest_lo_[i] = rest_lo_[i + 1] + wide(axes_[i].lo) * axes_[i].stride;
      rest_hi_[i] = rest_hi_[i + 1] + wide(axes_[i].hi) * axes_[i].stride;
    }
    budget_ = 1 << 16;
    return search(0, target, !nonzero);
  }

 private:
  using wide = __int128;
  struct range {
    std::intptr_t stride, lo, hi;
  };

  static wide floor_div(wide a, wide b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

  bool search(int k, wide target, bool found_nonzero) {
    if (--budget_ < 0) return true;
    if (k == n_) return target == 0 && found_nonzero;
    if (target < rest_lo_[k] || target > rest_hi_[k]) return false;
    const range& a = axes_[k];
    const wide first = std::max<wide>(a.lo, -floor_div(rest_hi_[k + 1] - target, a.stride));
    const wide last = std::min<wide>(a.hi, floor_div(target - rest_lo_[k + 1], a.stride));
    for (wide n = first; n <= last; ++n)
      if (search(k + 1, target - n * a.stride, found_nonzero || n != 0)) return true;
    return false;
  }

  range axes_[20] = {};
  wide rest_lo_[21] = {}, rest_hi_[21] = {};
  int n_ = 0;
  long budget_ = 0;
};

/// Whether two views may share a byte.
inline bool overlap(const footprint& a, const footprint& b) {
  if (a.empty() || b.empty() || a.end() <= b.base || b.end() <= a.base) return false;
  // a.base + i.a + u == b.base + j.b + w, u and w bytes within their elements.
  lattice l;
  for (int i = 0; i < a.rank; ++i) l.axis(a.strides[i], 0, a.extents[i] - 1);
  for (int i = 0; i < b.rank; ++i) l.axis(b.strides[i], -(b.extents[i] - 1), 0);
  l.axis(1, -(b.element - 1), a.element - 1);
  return l.solvable(b.base - a.base, false);
}

/// Whether two different indices of a view reach the same element.
inline bool self_overlap(const footprint& a) {
  lattice l;
  for (int i = 0; i < a.rank; ++i) {
    if (a.strides[i] == 0) return true;
    for (int j = 0; j < i; ++j)  // index +1 on one axis, -1 on the other
      if (a.strides[j] == a.strides[i]) return true;
    l.axis(a.strides[i], -(a.extents[i] - 1), a.extents[i] - 1);
  }
  return l.solvable(0, true);
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

  /// An output view: as `view`, and no element may be reached from two indices, whatever the
  /// strides (empty outputs are always fine).
  template <class T, int R, class S>
  void output(const char* name, const tensor_view<T, R, S>& v) const {
    view(name, v);
    if (v.empty()) return;
    for (int i = 0; i < R; ++i)
      if (v.stride(i) == 0 && v.extent(i) > 1)
        fail(std::string(name) + " is an output but has stride 0 on axis " + std::to_string(i) +
             " of extent " + std::to_string(v.extent(i)));
    if (self_overlap(footprint_of(name, v)))
      fail(std::string(name) + " is an output but its strides map two indices to one element");
  }

  /// Every output must share no memory with any input or with another output. `outputs` and
  /// `inputs` are footprints of checked views (empty ones are skipped); an output may be the
  /// very same view as an input only where the operation allows it in place (`in_place`).
  void disjoint(std::initializer_list<footprint> outputs, std::initializer_list<footprint> inputs,
                std::initializer_list<std::pair<const char*, const char*>> in_place = {}) const {
    const auto same_view = [](const footprint& a, const footprint& b) {
      if (a.base != b.base || a.element != b.element || a.rank != b.rank) return false;
      for (int i = 0; i < a.rank; ++i)
        if (a.extents[i] != b.extents[i] || a.strides[i] != b.strides[i]) return false;
      return true;
    };
    const auto allowed = [&](const footprint& o, const footprint& i) {
      for (const auto& [out, in] : in_place)
        if (std::string_view(out) == o.name && std::string_view(in) == i.name)
          return same_view(o, i);
      return false;
    };
    for (auto o = outputs.begin(); o != outputs.end(); ++o) {
      for (const footprint& i : inputs)
        if (!allowed(*o, i) && overlap(*o, i))
          fail(std::string(o->name) + " overlaps " + i.name +
               " in memory; an output must not share memory with an input" +
               (in_place.size() ? " (in place: only as the very same view where allowed)" : ""));
      for (auto p = outputs.begin(); p != o; ++p)
        if (overlap(*o, *p))
          fail(std::string(o->name) + " overlaps " + p->name +
               " in memory; two outputs must not share memory");
    }
  }

  /// `a_name` (extent `a`) must equal `b_name` (extent `b`), e.g. same("k.D", 32, "q.D", 64).
  /// (Names are views: a check that passes builds no string, so a decode step allocates
  /// nothing.)
  void same(std::string_view a_name, index_t a, std::string_view b_name, index_t b) const {
    if (a != b)
      fail(std::string(a_name) + " is " + std::to_string(a) + " but " + std::string(b_name) +
           " is " + std::to_string(b) + "; they must be equal");
  }

  void positive(std::string_view name, index_t a) const {
    if (a <= 0) fail(std::string(name) + " is " + std::to_string(a) + "; it must be >= 1");
  }

  /// An optional rank-1 view (a bias): empty, or exactly `n` elements.
  template <class T, class S>
  void optional_vector(const char* name, const tensor_view<T, 1, S>& b, std::string_view n_name,
                       index_t n) const {
    if (!given(b)) return;
    view(name, b);
    if (b.extent(0) != n)
      fail(std::string(name) + " has " + std::to_string(b.extent(0)) + " elements but " +
           std::string(n_name) + " is " + std::to_string(n) +
           "; pass an empty view or one of that size");
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
