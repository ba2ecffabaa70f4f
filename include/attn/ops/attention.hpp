#pragma once
/// \file
/// Seed stages 2-5 fused: `O = softmax(mask(Q K^T * scale)) V` without a T x T matrix.

#include <concepts>
#include <cstdint>
#include <string>
#include <utility>

#include "attn/core/check.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/options.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/problem.hpp"
#include "attn/ops/scores.hpp"

namespace attn {

/// Arguments of the fused attention. Query head h of batch row b reads key/value head
/// shape.kv_head(h); the keys it sees follow attn/core/visibility.hpp with that row's key
/// count (kv_lengths[b] when given, else Tk).
template <class T, class Space = host_space>
struct attention_args {
  tensor_view<const T, 4, Space> q;                      ///< [B, H, Tq, D]
  tensor_view<const T, 4, Space> k;                      ///< [B, Hkv, Tk, D]
  tensor_view<const T, 4, Space> v;                      ///< [B, Hkv, Tk, Dv]
  tensor_view<T, 4, Space> o;                            ///< [B, H, Tq, Dv]
  tensor_view<accum_t<T>, 3, Space> lse;                 ///< [B, H, Tq], or empty: not written
  tensor_view<const std::int32_t, 1, Space> kv_lengths;  ///< [B] keys per row, or empty: Tk
  attention_shape shape;
  mask_spec mask;
  double scale = 1;

  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return attention_args<T, S>{f(q), f(k), f(v), f(o), f(lse), f(kv_lengths), shape, mask, scale};
  }
};

/// Arguments of the fused attention's backward: from the forward's q, k, v, o, lse and the
/// output gradient d_o, dq, dk and dv (with grouped key heads, dk and dv summed over the query
/// heads of a group). Empty outputs are not computed.
template <class T, class Space = host_space>
struct attention_backward_args {
  tensor_view<const T, 4, Space> q, k, v;                ///< as in attention_args
  tensor_view<const T, 4, Space> o, d_o;                 ///< [B, H, Tq, Dv]
  tensor_view<const accum_t<T>, 3, Space> lse;           ///< [B, H, Tq]
  tensor_view<T, 4, Space> dq, dk, dv;                   ///< like q, k, v
  tensor_view<const std::int32_t, 1, Space> kv_lengths;  ///< [B], or empty: Tk
  attention_shape shape;
  mask_spec mask;
  double scale = 1;

  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return attention_backward_args<T, S>{f(q),  f(k),  f(v),          f(o),  f(d_o), f(lse), f(dq),
                                         f(dk), f(dv), f(kv_lengths), shape, mask,   scale};
  }
};

namespace detail {
/// The checks of every fused attention call, returning its arguments.
template <class T, class Space>
attention_args<T, Space> check_attention(const checker& c, const tensor_view<const T, 4, Space>& q,
                                         const tensor_view<const T, 4, Space>& k,
                                         const tensor_view<const T, 4, Space>& v,
                                         const tensor_view<T, 4, Space>& o,
                                         const tensor_view<accum_t<T>, 3, Space>& lse,
                                         const attention_options& opt) {
  attention_shape shape = check_qk(c, q, k);
  c.view("v", v);
  c.output("o", o);
  c.same("v.B (extent 0)", v.extent(0), "q.B (extent 0)", q.extent(0));
  c.same("v.H (extent 1)", v.extent(1), "k.H (extent 1)", k.extent(1));
  c.same("v.Tk (extent 2)", v.extent(2), "k.Tk (extent 2)", k.extent(2));
  c.same("o.B (extent 0)", o.extent(0), "q.B (extent 0)", q.extent(0));
  c.same("o.H (extent 1)", o.extent(1), "q.H (extent 1)", q.extent(1));
  c.same("o.Tq (extent 2)", o.extent(2), "q.Tq (extent 2)", q.extent(2));
  c.same("o.Dv (extent 3)", o.extent(3), "v.Dv (extent 3)", v.extent(3));
  if (given(lse)) {
    c.output("lse", lse);
    c.same("lse.B (extent 0)", lse.extent(0), "q.B (extent 0)", q.extent(0));
    c.same("lse.H (extent 1)", lse.extent(1), "q.H (extent 1)", q.extent(1));
    c.same("lse.Tq (extent 2)", lse.extent(2), "q.Tq (extent 2)", q.extent(2));
  }
  if (opt.window < 0)
    c.fail("window is " + std::to_string(opt.window) + "; it must be >= 0 (0: none)");
  shape.value_dim = v.extent(3);
  return {q,
          k,
          v,
          o,
          lse,
          {},
          shape,
          mask_spec{opt.causal, opt.window},
          c.scale<T>(opt.scale, q.extent(3))};
}
}  // namespace detail

/// Fused attention, also writing the per-row log-sum-exp of the scaled, masked scores
/// (`lse[b, h, i] = log sum_j exp(scale * q_i . k_j)`, -inf for a row that sees no key).
/// Works in key blocks with an online softmax: memory use is independent of Tk. A NaN or Inf
/// that reaches a row's visible scores or values makes that row NaN; masked keys and values
/// are never read into a row's result.
///
/// \param q    [B, H, Tq, D] queries.
/// \param k    [B, Hkv, Tk, D] keys; Hkv divides H (grouped-query attention).
/// \param v    [B, Hkv, Tk, Dv] values.
/// \param o    [B, H, Tq, Dv] output; a row that sees no key is all zeros.
/// \param lse  [B, H, Tq] log-sum-exp output (accum_t<T>).
/// \param opt  causal (bottom-right aligned when Tq != Tk), window and scale (default
///             1/sqrt(D)).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space, class Lse>
requires std::convertible_to < Lse, tensor_view < accum_t<T>,
3, Space >> void attention(const Policy& policy, input_view<T, 4, Space> q,
                           input_view<T, 4, Space> k, input_view<T, 4, Space> v,
                           tensor_view<T, 4, Space> o, Lse&& lse,
                           const attention_options& opt = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"attention"};
  backend<Policy>::run(policy, detail::check_attention<T, Space>(
                                   c, q, k, v, o, tensor_view<accum_t<T>, 3, Space>(lse), opt));
}

/// Fused attention: `o = softmax(mask(q k^T * scale)) v`, never materialising [Tq, Tk].
///
/// \param q    [B, H, Tq, D] queries.
/// \param k    [B, Hkv, Tk, D] keys; Hkv divides H (grouped-query attention).
/// \param v    [B, Hkv, Tk, Dv] values.
/// \param o    [B, H, Tq, Dv] output; a row that sees no key is all zeros.
/// \param opt  causal (bottom-right aligned when Tq != Tk), window and scale (default
///             1/sqrt(D)).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void attention(const Policy& policy, input_view<T, 4, Space> q, input_view<T, 4, Space> k,
               input_view<T, 4, Space> v, tensor_view<T, 4, Space> o,
               const attention_options& opt = {}) {
  attention(policy, q, k, v, o, tensor_view<accum_t<T>, 3, Space>{}, opt);
}

/// The gradients of the fused attention, FlashAttention-2's way: P is recomputed from q, k
/// and the forward's lse (never stored as [Tq, Tk]); with D = rowsum(d_o * o),
/// `dv = P^T d_o`, `dP = d_o v^T`, `dS = P * (dP - D)`, `dq = scale * dS k`,
/// `dk = scale * dS^T q`. Deterministic: the same bits for every thread count and run.
/// Gradients are written, not accumulated; dq, dk or dv may be an empty view (not computed).
/// Rows that see no key contribute nothing (and get dq = 0).
///
/// \param q, k, v  the forward's inputs: [B, H, Tq, D], [B, Hkv, Tk, D], [B, Hkv, Tk, Dv].
/// \param o        [B, H, Tq, Dv] the forward's output.
/// \param lse      [B, H, Tq] the forward's log-sum-exp (accum_t<T>).
/// \param d_o      [B, H, Tq, Dv] gradient of the output.
/// \param dq       [B, H, Tq, D] gradient of q, or empty.
/// \param dk       [B, Hkv, Tk, D] gradient of k, or empty.
/// \param dv       [B, Hkv, Tk, Dv] gradient of v, or empty.
/// \param opt      the forward's options (causal, window, scale).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class G, class Space, class T = std::remove_const_t<G>>
void attention_backward(const Policy& policy, input_view<T, 4, Space> q, input_view<T, 4, Space> k,
                        input_view<T, 4, Space> v, input_view<T, 4, Space> o,
                        input_view<accum_t<T>, 3, Space> lse, tensor_view<G, 4, Space> d_o,
                        output_view<T, 4, Space> dq, output_view<T, 4, Space> dk,
                        output_view<T, 4, Space> dv, const attention_options& opt = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"attention_backward"};
  attention_shape shape = detail::check_qk(c, q, k);
  c.view("v", v);
  c.same("v.B (extent 0)", v.extent(0), "q.B (extent 0)", q.extent(0));
  c.same("v.H (extent 1)", v.extent(1), "k.H (extent 1)", k.extent(1));
  c.same("v.Tk (extent 2)", v.extent(2), "k.Tk (extent 2)", k.extent(2));
  c.view("lse", lse);
  c.same("lse.B (extent 0)", lse.extent(0), "q.B (extent 0)", q.extent(0));
  c.same("lse.H (extent 1)", lse.extent(1), "q.H (extent 1)", q.extent(1));
  c.same("lse.Tq (extent 2)", lse.extent(2), "q.Tq (extent 2)", q.extent(2));
  for (const auto& [name, t] : {std::pair{"o", tensor_view<const T, 4, Space>(o)},
                                std::pair{"d_o", tensor_view<const T, 4, Space>(d_o)}}) {
    const std::string n = name;
    c.view(name, t);
    c.same(n + ".B (extent 0)", t.extent(0), "q.B (extent 0)", q.extent(0));
    c.same(n + ".H (extent 1)", t.extent(1), "q.H (extent 1)", q.extent(1));
    c.same(n + ".Tq (extent 2)", t.extent(2), "q.Tq (extent 2)", q.extent(2));
    c.same(n + ".Dv (extent 3)", t.extent(3), "v.Dv (extent 3)", v.extent(3));
  }
  detail::check_like(c, "dq", dq, "q", q);
  detail::check_like(c, "dk", dk, "k", k);
  detail::check_like(c, "dv", dv, "v", v);
  if (opt.window < 0)
    c.fail("window is " + std::to_string(opt.window) + "; it must be >= 0 (0: none)");
  shape.value_dim = v.extent(3);
  backend<Policy>::run(policy,
                       attention_backward_args<T, Space>{q,
                                                         k,
                                                         v,
                                                         o,
                                                         d_o,
                                                         lse,
                                                         dq,
                                                         dk,
                                                         dv,
                                                         {},
                                                         shape,
                                                         mask_spec{opt.causal, opt.window},
                                                         c.scale<T>(opt.scale, q.extent(3))});
}

}  // namespace attn
