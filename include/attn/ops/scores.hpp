#pragma once
/// \file
/// Seed stage 2: scaled scores `S = Q K^T * scale`.

#include <optional>
#include <string>

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/problem.hpp"

namespace attn {

/// Arguments of `scaled_scores`: s [B, H, Tq, Tk] = scale * q [B, H, Tq, D] k [B, Hkv, Tk, D]^T.
template <class T, class Space = host_space>
struct scores_args {
  /// [B, H, Tq, D] queries and [B, Hkv, Tk, D] keys.
  ///@{
  tensor_view<const T, 4, Space> q, k;
  ///@}
  tensor_view<T, 4, Space> s;  ///< [B, H, Tq, Tk] output
  attention_shape shape;       ///< the extents, from the checks
  double scale = 1;            ///< the multiplier of q k^T

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return scores_args<T, S>{f(q), f(k), f(s), shape, scale};
  }
};

/// Arguments of `scaled_scores_backward`: dq = scale * ds k, dk = scale * sum over the query
/// heads of each key head of ds^T q. Empty outputs are not computed.
template <class T, class Space = host_space>
struct scores_backward_args {
  /// [B, H, Tq, D], [B, Hkv, Tk, D], [B, H, Tq, Tk]: the forward's inputs, the scores' gradient.
  ///@{
  tensor_view<const T, 4, Space> q, k, ds;
  ///@}
  /// Like q and like k, or empty (not computed).
  ///@{
  tensor_view<T, 4, Space> dq, dk;
  ///@}
  attention_shape shape;  ///< the extents, from the checks
  double scale = 1;       ///< the forward's multiplier

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return scores_backward_args<T, S>{f(q), f(k), f(ds), f(dq), f(dk), shape, scale};
  }
};

namespace detail {
/// An optional gradient view: empty, or the extents of `like` (named `like_name`).
template <class T, class U, int R, class S>
void check_like(const checker& c, const char* name, const tensor_view<T, R, S>& g,
                const char* like_name, const tensor_view<U, R, S>& like) {
  if (!given(g)) return;
  c.output(name, g);
  for (int i = 0; i < R; ++i)
    c.same(std::string(name) + " extent " + std::to_string(i), g.extent(i),
           std::string(like_name) + " extent " + std::to_string(i), like.extent(i));
}

/// Checks shared by every function that takes q [B, H, Tq, D] and k [B, Hkv, Tk, D] (Hkv
/// divides H), and the shape they give (value_dim still 0).
template <class Q, class K>
attention_shape check_qk(const checker& c, const Q& q, const K& k) {
  c.view("q", q);
  c.view("k", k);
  c.positive("q.D (extent 3)", q.extent(3));
  c.same("k.B (extent 0)", k.extent(0), "q.B (extent 0)", q.extent(0));
  c.same("k.D (extent 3)", k.extent(3), "q.D (extent 3)", q.extent(3));
  if (k.extent(1) == 0 ? q.extent(1) != 0 : q.extent(1) % k.extent(1) != 0)
    c.fail("k.H (extent 1) is " + std::to_string(k.extent(1)) + " but q.H (extent 1) is " +
           std::to_string(q.extent(1)) + "; the key heads must divide the query heads");
  return {q.extent(0), q.extent(1), k.extent(1), q.extent(2), k.extent(2), q.extent(3), 0};
}

/// Checks that `name` is [B, H, Tq, Tk] for q [B, H, Tq, D] and k [B, Hkv, Tk, D].
template <class S, class Q, class K>
void check_scores_extents(const checker& c, const std::string& name, const S& s, const Q& q,
                          const K& k) {
  c.same(name + ".B (extent 0)", s.extent(0), "q.B (extent 0)", q.extent(0));
  c.same(name + ".H (extent 1)", s.extent(1), "q.H (extent 1)", q.extent(1));
  c.same(name + ".Tq (extent 2)", s.extent(2), "q.Tq (extent 2)", q.extent(2));
  c.same(name + ".Tk (extent 3)", s.extent(3), "k.Tk (extent 2)", k.extent(2));
}
}  // namespace detail

/// `s[b, h, i, j] = scale * dot(q[b, h, i, :], k[b, h / (H / Hkv), j, :])`.
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param q      [B, H, Tq, D] queries.
/// \param k      [B, Hkv, Tk, D] keys; Hkv divides H (grouped-query attention).
/// \param s      [B, H, Tq, Tk] output scores; must not overlap q or k.
/// \param scale  multiplier, default 1/sqrt(D); must be finite in the element type.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void scaled_scores(const Policy& policy, input_view<T, 4, Space> q, input_view<T, 4, Space> k,
                   tensor_view<T, 4, Space> s, std::optional<double> scale = std::nullopt) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"scaled_scores"};
  const attention_shape shape = detail::check_qk(c, q, k);
  c.output("s", s);
  detail::check_scores_extents(c, "s", s, q, k);
  const double sc = c.scale<T>(scale, q.extent(3));
  using detail::footprint_of;
  c.disjoint({footprint_of("s", s)}, {footprint_of("q", q), footprint_of("k", k)});
  detail::run(policy, scores_args<T, Space>{q, k, s, shape, sc});
}

/// The gradients of `scaled_scores` from ds = dLoss/ds: `dq = scale * ds k` and
/// `dk = scale * ds^T q` (with grouped key heads, summed over the query heads of a group).
/// Gradients are written, not accumulated; dq or dk may be an empty view (not computed).
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param q      [B, H, Tq, D] the forward's queries.
/// \param k      [B, Hkv, Tk, D] the forward's keys.
/// \param ds     [B, H, Tq, Tk] gradient of the scores.
/// \param dq     [B, H, Tq, D] gradient of q, or empty.
/// \param dk     [B, Hkv, Tk, D] gradient of k, or empty.
/// \param scale  the forward's multiplier, default 1/sqrt(D).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class G, class Space, class T = std::remove_const_t<G>>
void scaled_scores_backward(const Policy& policy, input_view<T, 4, Space> q,
                            input_view<T, 4, Space> k, tensor_view<G, 4, Space> ds,
                            output_view<T, 4, Space> dq, output_view<T, 4, Space> dk,
                            std::optional<double> scale = std::nullopt) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"scaled_scores_backward"};
  const attention_shape shape = detail::check_qk(c, q, k);
  c.view("ds", ds);
  detail::check_scores_extents(c, "ds", ds, q, k);
  detail::check_like(c, "dq", dq, "q", q);
  detail::check_like(c, "dk", dk, "k", k);
  const double sc = c.scale<T>(scale, q.extent(3));
  using detail::footprint_of;
  c.disjoint({footprint_of("dq", dq), footprint_of("dk", dk)},
             {footprint_of("q", q), footprint_of("k", k), footprint_of("ds", ds)});
  detail::run(policy, scores_backward_args<T, Space>{q, k, ds, dq, dk, shape, sc});
}

}  // namespace attn
