#pragma once
/// \file
/// Seed stage 3: the causal mask.

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"

namespace attn {

/// In place: `s[b, h, i, j] = -inf` wherever `j > i + (Tk - Tq)` (bottom-right aligned, so
/// with Tq == Tk it is the seed's `j > i`); other entries are left as they are.
///
/// \param s  [B, H, Tq, Tk] scores.
/// \throws shape_error for a malformed view, before anything is written.
template <class Policy, class T, class Space>
void causal_mask(const Policy& policy, tensor_view<T, 4, Space> s) {
  detail::check_space<Policy, Space>();
  const detail::checker c{"causal_mask"};
  c.view("s", s, true);
  backend<Policy>::causal_mask(policy, s);
}

}  // namespace attn
