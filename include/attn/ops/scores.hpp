#pragma once
/// \file
/// Seed stage 2: scaled scores `S = Q K^T * scale`.

#include <optional>
#include <type_traits>

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"

namespace attn {

namespace detail {
/// Checks shared by every function that takes q [B,H,Tq,D] and k [B,H,Tk,D].
template <class Q, class K>
void check_qk(const checker& c, const Q& q, const K& k) {
  c.view("q", q);
  c.view("k", k);
  c.positive("q.D (extent 3)", q.extent(3));
  c.same("k.B (extent 0)", k.extent(0), "q.B (extent 0)", q.extent(0));
  c.same("k.H (extent 1)", k.extent(1), "q.H (extent 1)", q.extent(1));
  c.same("k.D (extent 3)", k.extent(3), "q.D (extent 3)", q.extent(3));
}
}  // namespace detail

/// `s[b, h, i, j] = scale * dot(q[b, h, i, :], k[b, h, j, :])`.
///
/// \param q      [B, H, Tq, D] queries.
/// \param k      [B, H, Tk, D] keys.
/// \param s      [B, H, Tq, Tk] output scores.
/// \param scale  multiplier, default 1/sqrt(D); must be finite.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void scaled_scores(const Policy& policy, input_view<T, 4, Space> q, input_view<T, 4, Space> k,
                   tensor_view<T, 4, Space> s, std::optional<double> scale = std::nullopt) {
  detail::check_space<Policy, Space>();
  const detail::checker c{"scaled_scores"};
  detail::check_qk(c, q, k);
  c.view("s", s, true);
  c.same("s.B (extent 0)", s.extent(0), "q.B (extent 0)", q.extent(0));
  c.same("s.H (extent 1)", s.extent(1), "q.H (extent 1)", q.extent(1));
  c.same("s.Tq (extent 2)", s.extent(2), "q.Tq (extent 2)", q.extent(2));
  c.same("s.Tk (extent 3)", s.extent(3), "k.Tk (extent 2)", k.extent(2));
  const double sc = c.scale(scale, q.extent(3));
  backend<Policy>::scaled_scores(policy, q, k, s, sc);
}

}  // namespace attn
