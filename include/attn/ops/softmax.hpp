#pragma once
/// \file
/// Seed stage 4: the stable row softmax.

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"

namespace attn {

/// Arguments of `softmax_rows`: s [B, H, Tq, Tk] in place.
template <class T, class Space = host_space>
struct softmax_args {
  tensor_view<T, 4, Space> s;

  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return softmax_args<T, S>{f(s)};
  }
};

/// In place, for every row: `s[.., i, j] = exp(s[.., i, j] - m) / sum_j exp(s[.., i, j] - m)`
/// with `m` the row maximum. Entries of -inf (masked) become exactly 0, and a row of only
/// -inf becomes all zeros (never NaN). A NaN in a row makes that row NaN.
///
/// \param s  [B, H, Tq, Tk] scores in, probabilities out.
/// \throws shape_error for a malformed view, before anything is written.
template <class Policy, class T, class Space>
void softmax_rows(const Policy& policy, tensor_view<T, 4, Space> s) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"softmax_rows"};
  c.output("s", s);
  backend<Policy>::run(policy, softmax_args<T, Space>{s});
}

}  // namespace attn
