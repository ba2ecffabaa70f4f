#pragma once
/// \file
/// Seed stage 5: the probability-weighted sum of values, `O = P V`.

#include <type_traits>

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"

namespace attn {

/// `o[b, h, i, :] = sum_j p[b, h, i, j] * v[b, h, j, :]`.
///
/// \param p  [B, H, Tq, Tk] probabilities (any weights).
/// \param v  [B, H, Tk, Dv] values.
/// \param o  [B, H, Tq, Dv] output.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void weighted_values(const Policy& policy, input_view<T, 4, Space> p, input_view<T, 4, Space> v,
                     tensor_view<T, 4, Space> o) {
  detail::check_space<Policy, Space>();
  const detail::checker c{"weighted_values"};
  c.view("p", p);
  c.view("v", v);
  c.view("o", o, true);
  c.same("v.B (extent 0)", v.extent(0), "p.B (extent 0)", p.extent(0));
  c.same("v.H (extent 1)", v.extent(1), "p.H (extent 1)", p.extent(1));
  c.same("v.Tk (extent 2)", v.extent(2), "p.Tk (extent 3)", p.extent(3));
  c.same("o.B (extent 0)", o.extent(0), "p.B (extent 0)", p.extent(0));
  c.same("o.H (extent 1)", o.extent(1), "p.H (extent 1)", p.extent(1));
  c.same("o.Tq (extent 2)", o.extent(2), "p.Tq (extent 2)", p.extent(2));
  c.same("o.Dv (extent 3)", o.extent(3), "v.Dv (extent 3)", v.extent(3));
  backend<Policy>::weighted_values(policy, p, v, o);
}

}  // namespace attn
