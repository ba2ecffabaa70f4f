#pragma once
/// \file
/// Seed stage 4: the stable row softmax.

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"

namespace attn {

/// In place, for every row: `s[.., i, j] = exp(s[.., i, j] - m) / sum_j exp(s[.., i, j] - m)`
/// with `m` the row maximum. Entries of -inf become exactly 0; a row of only -inf becomes all
/// zeros (never NaN).
///
/// \param s  [B, H, Tq, Tk] scores in, probabilities out.
/// \throws shape_error for a malformed view, before anything is written.
template <class Policy, class T, class Space>
void softmax_rows(const Policy& policy, tensor_view<T, 4, Space> s) {
  detail::check_space<Policy, Space>();
  const detail::checker c{"softmax_rows"};
  c.view("s", s, true);
  backend<Policy>::softmax_rows(policy, s);
}

}  // namespace attn
