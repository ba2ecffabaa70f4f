#pragma once
/// \file
/// The one visibility rule: which keys query i of a sequence sees. Every backend and kernel
/// derives its loop bounds, tile skipping and masking from it, per row or per tile.
///
/// A sequence has q_len queries and kv_len keys (its own length when lengths are given). The
/// queries are aligned bottom-right: query i sits at position p = i + kv_len - q_len. It sees
/// the keys j in [begin(i), end(i)):
///   begin(i) = max(0, p - window + 1)          with a window, else 0
///   end(i)   = min(kv_len, p + 1)              causal
///            = min(kv_len, p + window)         not causal, with a window (a symmetric band)
///            = kv_len                          otherwise
/// (an empty range when end <= begin). Both bounds are nondecreasing in i, so the keys any of
/// rows [i0, i1) sees are [begin(i0), end(i1 - 1)) and the keys all of them see are
/// [begin(i1 - 1), end(i0)).
///
/// A row that sees no key ends with zeros and a log-sum-exp of -inf (finish_softmax).

#include <cmath>

#include "attn/core/config.hpp"
#include "attn/core/problem.hpp"

namespace attn {

/// Keys [begin, end) of one row or tile.
struct key_range {
  index_t begin = 0;  ///< First key.
  index_t end = 0;    ///< One past the last key.
  /// No key.
  ATTN_HOST_DEVICE constexpr bool empty() const { return end <= begin; }
  /// Number of keys.
  ATTN_HOST_DEVICE constexpr index_t size() const { return end > begin ? end - begin : 0; }
};

/// The visibility rule for one sequence (see the file comment).
struct visibility {
  index_t q_len = 0;    ///< Queries of the sequence.
  index_t kv_len = 0;   ///< Keys of the sequence.
  index_t window = 0;   ///< Sliding window width; 0: none.
  bool causal = false;  ///< Causal (bottom-right aligned).

  /// The rule of mask `m` for a sequence of `q_len_` queries and `kv_len_` keys.
  ATTN_HOST_DEVICE constexpr visibility(const mask_spec& m, index_t q_len_, index_t kv_len_)
      : q_len(q_len_), kv_len(kv_len_), window(m.window), causal(m.causal) {}

  /// Whether any key is ever hidden (otherwise every row sees [0, kv_len)).
  ATTN_HOST_DEVICE constexpr bool masks() const { return causal || window > 0; }

  /// Position of query i among the keys.
  ATTN_HOST_DEVICE constexpr index_t position(index_t i) const { return i + kv_len - q_len; }

  /// First key query i sees.
  ATTN_HOST_DEVICE constexpr index_t begin(index_t i) const {
    const index_t b = window > 0 ? position(i) - window + 1 : 0;
    return b > 0 ? b : 0;
  }
  /// One past the last key query i sees (begin(i) when it sees none).
  ATTN_HOST_DEVICE constexpr index_t end(index_t i) const {
    index_t e = kv_len;
    if (causal)
      e = position(i) + 1 < e ? position(i) + 1 : e;
    else if (window > 0)
      e = position(i) + window < e ? position(i) + window : e;
    const index_t b = begin(i);
    return e > b ? e : b;
  }

  /// The keys query i sees.
  ATTN_HOST_DEVICE constexpr key_range row(index_t i) const { return {begin(i), end(i)}; }
  /// Whether query i sees key j.
  ATTN_HOST_DEVICE constexpr bool visible(index_t i, index_t j) const {
    return begin(i) <= j && j < end(i);
  }
  /// The keys any of the rows [i0, i1) sees (the tiles to visit).
  ATTN_HOST_DEVICE constexpr key_range rows(index_t i0, index_t i1) const {
    return i1 > i0 ? key_range{begin(i0), end(i1 - 1)} : key_range{};
  }
  /// The keys every one of the rows [i0, i1) sees (no masking needed there).
  ATTN_HOST_DEVICE constexpr key_range common(index_t i0, index_t i1) const {
    return i1 > i0 ? key_range{begin(i1 - 1), end(i0)} : key_range{};
  }
  /// The rows [begin, end) (a range of rows, not keys) that may see some of `keys`: the rows
  /// before see only keys before them (end(i) <= keys.begin), the rows after only keys past
  /// them (begin(i) >= keys.end); both bounds being nondecreasing, two binary searches find it.
  ATTN_HOST_DEVICE constexpr key_range rows_seeing(key_range keys) const {
    if (keys.empty()) return {};
    const index_t first = first_row(0, keys.begin, true);
    return {first, first_row(first, keys.end, false)};
  }

 private:
  /// The first row i >= from (q_len if none) with end(i) > key (`by_end`), else with
  /// begin(i) >= key: a binary search, both bounds being nondecreasing in i.
  ATTN_HOST_DEVICE constexpr index_t first_row(index_t from, index_t key, bool by_end) const {
    index_t lo = from, hi = q_len;
    while (lo < hi) {
      const index_t mid = lo + (hi - lo) / 2;
      if (by_end ? end(mid) > key : begin(mid) >= key)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  }
};

/// How a row's online softmax ends. With `max` the largest score seen (-inf when every
/// visible score was -inf) and `sum` the sum of exp(score - max) over the visible keys:
///   a row that sees no key:  scale 0 (zeros) and lse -inf;
///   otherwise:               scale 1 / sum and lse = max + log(sum), by IEEE arithmetic, so
///                            a NaN score gives NaN, and all -inf scores give 0 / 0 = NaN
///                            with lse -inf.
/// Kernels keep the running maximum as `max` and exponentiate against `max_used(max)`.
template <class A>
struct softmax_end {
  A scale;  ///< Factor of the accumulated output row: 1 / sum, or 0.
  A lse;    ///< The row's log-sum-exp, natural units.
};

/// The larger of two partial maxima or log-sum-exps, NaN when either is NaN: std::max and
/// fmaxf drop a NaN in one argument order or both, and a part whose lse is NaN would then pass
/// for one that saw no key (-inf). Merges take their maximum with it.
template <class A>
ATTN_HOST_DEVICE constexpr A max_nan(A a, A b) {
  return a != a ? a : (b != b || a < b ? b : a);
}

/// The maximum to subtract: -inf (nothing finite seen yet) becomes 0, so exp gives 0, not NaN.
template <class A>
ATTN_HOST_DEVICE constexpr A max_used(A max) {
  return max == -static_cast<A>(INFINITY) ? A(0) : max;
}

/// softmax_end's scale alone, for a caller that wants no lse (the log is a library call that
/// the compiler cannot drop).
template <class A>
ATTN_HOST_DEVICE constexpr A softmax_scale(bool sees_a_key, A sum) {
  return sees_a_key ? A(1) / sum : A(0);
}

/// The scale of one chunk's part of a row that a merge will weigh by exp(lse - max) (split-KV
/// decoding): softmax_end's, except where the chunk's visible scores were all -inf (sum 0):
/// 0, not 1 / 0, so that its values' sum (zeros, or NaN for a NaN or Inf value) enters the
/// merge at weight 0 as 0 x v, as it does in one pass over all the keys, where 0 / 0 would
/// make the merged row NaN whatever the other chunks hold.
template <class A>
ATTN_HOST_DEVICE constexpr A part_scale(const softmax_end<A>& end, A sum) {
  return sum == A(0) ? A(0) : end.scale;
}

/// The end of a row whose scores are in natural units (see softmax_end).
template <class A>
ATTN_HOST_DEVICE inline softmax_end<A> finish_softmax(bool sees_a_key, A max, A sum) {
  if (!sees_a_key) return {A(0), -static_cast<A>(INFINITY)};
  if constexpr (sizeof(A) == sizeof(float))
    return {softmax_scale(true, sum), max_used(max) + ::logf(sum)};
  else
    return {softmax_scale(true, sum), max_used(max) + ::log(sum)};
}

/// The same for scores in log2 units (kernels that exponentiate with exp2): lse in natural
/// units.
ATTN_HOST_DEVICE inline softmax_end<float> finish_softmax_log2(bool sees_a_key, float max2,
                                                               float sum) {
  if (!sees_a_key) return {0.0f, -INFINITY};
  return {softmax_scale(true, sum), (max_used(max2) + ::log2f(sum)) * 0.693147180559945309f};
}

}  // namespace attn
