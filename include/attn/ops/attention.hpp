#pragma once
/// \file
/// Seed stages 2-5 fused: `O = softmax(mask(Q K^T * scale)) V` without a T x T matrix.

#include <type_traits>

#include "attn/core/check.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/options.hpp"
#include "attn/core/policy.hpp"
#include "attn/ops/scores.hpp"

namespace attn {

/// Fused attention, also writing the per-row log-sum-exp of the scaled, masked scores
/// (`lse[b, h, i] = log sum_j exp(scale * q_i . k_j)`, -inf for a row that sees no key).
/// Works in key blocks with an online softmax: memory use is independent of Tk.
///
/// \param q    [B, H, Tq, D] queries.
/// \param k    [B, H, Tk, D] keys.
/// \param v    [B, H, Tk, Dv] values.
/// \param o    [B, H, Tq, Dv] output; a row that sees no key is all zeros.
/// \param lse  [B, H, Tq] log-sum-exp output.
/// \param opt  causal (bottom-right aligned when Tq != Tk) and scale (default 1/sqrt(D)).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void attention(const Policy& policy, input_view<T, 4, Space> q, input_view<T, 4, Space> k,
               input_view<T, 4, Space> v, tensor_view<T, 4, Space> o,
               tensor_view<accum_t<T>, 3, Space> lse, const attention_options& opt = {}) {
  detail::check_space<Policy, Space>();
  const detail::checker c{"attention"};
  detail::check_qk(c, q, k);
  c.view("v", v);
  c.view("o", o, true);
  c.same("v.B (extent 0)", v.extent(0), "q.B (extent 0)", q.extent(0));
  c.same("v.H (extent 1)", v.extent(1), "q.H (extent 1)", q.extent(1));
  c.same("v.Tk (extent 2)", v.extent(2), "k.Tk (extent 2)", k.extent(2));
  c.same("o.B (extent 0)", o.extent(0), "q.B (extent 0)", q.extent(0));
  c.same("o.H (extent 1)", o.extent(1), "q.H (extent 1)", q.extent(1));
  c.same("o.Tq (extent 2)", o.extent(2), "q.Tq (extent 2)", q.extent(2));
  c.same("o.Dv (extent 3)", o.extent(3), "v.Dv (extent 3)", v.extent(3));
  if (lse.data() != nullptr || lse.size() != 0) {
    c.view("lse", lse, true);
    c.same("lse.B (extent 0)", lse.extent(0), "q.B (extent 0)", q.extent(0));
    c.same("lse.H (extent 1)", lse.extent(1), "q.H (extent 1)", q.extent(1));
    c.same("lse.Tq (extent 2)", lse.extent(2), "q.Tq (extent 2)", q.extent(2));
  }
  const double scale = c.scale(opt.scale, q.extent(3));
  backend<Policy>::attention(policy, q, k, v, o, lse, opt.causal, scale);
}

/// Fused attention: `o = softmax(mask(q k^T * scale)) v`, never materialising [Tq, Tk].
///
/// \param q    [B, H, Tq, D] queries.
/// \param k    [B, H, Tk, D] keys.
/// \param v    [B, H, Tk, Dv] values.
/// \param o    [B, H, Tq, Dv] output; a row that sees no key is all zeros.
/// \param opt  causal (bottom-right aligned when Tq != Tk) and scale (default 1/sqrt(D)).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void attention(const Policy& policy, input_view<T, 4, Space> q, input_view<T, 4, Space> k,
               input_view<T, 4, Space> v, tensor_view<T, 4, Space> o,
               const attention_options& opt = {}) {
  attention(policy, q, k, v, o, tensor_view<accum_t<T>, 3, Space>{}, opt);
}

}  // namespace attn
