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
  attention_shape shape;                                 ///< the extents, from the checks
  mask_spec mask;                                        ///< causal and window
  double scale = 1;                                      ///< the multiplier of q k^T
  /// Whether kv_lengths' values were checked on the host (a device view cannot be read there:
  /// the backend then checks them before any work).
  bool lengths_checked = true;

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return attention_args<T, S>{f(q),          f(k),  f(v), f(o),  f(lse),
                                f(kv_lengths), shape, mask, scale, lengths_checked};
  }
};

/// Arguments of the fused attention's backward: from the forward's q, k, v, o, lse and the
/// output gradient d_o, dq, dk and dv (with grouped key heads, dk and dv summed over the query
/// heads of a group). Empty outputs are not computed.
template <class T, class Space = host_space>
struct attention_backward_args {
  /// The forward's inputs, as in attention_args.
  ///@{
  tensor_view<const T, 4, Space> q, k, v;
  ///@}
  /// [B, H, Tq, Dv]: the forward's output and its gradient.
  ///@{
  tensor_view<const T, 4, Space> o, d_o;
  ///@}
  tensor_view<const accum_t<T>, 3, Space> lse;  ///< [B, H, Tq], the forward's
  /// Like q, k and v, or empty (not computed).
  ///@{
  tensor_view<T, 4, Space> dq, dk, dv;
  ///@}
  tensor_view<const std::int32_t, 1, Space> kv_lengths;  ///< [B], or empty: Tk
  attention_shape shape;                                 ///< the extents, from the checks
  mask_spec mask;                                        ///< the forward's causal and window
  double scale = 1;                                      ///< the forward's multiplier

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return attention_backward_args<T, S>{f(q),  f(k),  f(v),          f(o),  f(d_o), f(lse), f(dq),
                                         f(dk), f(dv), f(kv_lengths), shape, mask,   scale};
  }
};

namespace detail {
/// Per-row key counts: [B] int32, each in [0, Tk]. Values are checked here for host views;
/// returns false for a device view, whose values the backend checks.
template <class Space>
bool check_lengths(const checker& c, const tensor_view<const std::int32_t, 1, Space>& lengths,
                   index_t B, index_t Tk) {
  if (!given(lengths)) return true;
  c.view("kv_lengths", lengths);
  c.same("kv_lengths (extent 0)", lengths.extent(0), "q.B (extent 0)", B);
  if constexpr (std::is_same_v<Space, host_space>) {
    for (index_t b = 0; b < B; ++b)
      if (lengths(b) < 0 || lengths(b) > Tk)
        c.fail("kv_lengths[" + std::to_string(b) + "] is " + std::to_string(lengths(b)) +
               "; it must be in [0, k.Tk (extent 2) = " + std::to_string(Tk) + "]");
    return true;
  } else {
    return false;
  }
}

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
  c.disjoint({footprint_of("o", o), footprint_of("lse", lse)},
             {footprint_of("q", q), footprint_of("k", k), footprint_of("v", v)});
  shape.value_dim = v.extent(3);
  return {q,
          k,
          v,
          o,
          lse,
          {},
          shape,
          mask_spec{opt.causal, opt.window},
          c.scale<T>(opt.scale, q.extent(3)),
          true};
}
/// An lse argument: anything that converts to the [B, H, Tq] accum_t<T> view (a tensor_view, or
/// `{}` for none), kept a template parameter so that `attention(p, q, k, v, o, {})` is not
/// ambiguous with the options.
template <class T, class Space>
using lse_view = tensor_view<accum_t<T>, 3, Space>;
template <class L, class T, class Space>
concept lse_output = std::convertible_to<L, lse_view<T, Space>>;

}  // namespace detail

/// Fused attention, also writing the per-row log-sum-exp of the scaled, masked scores
/// (`lse[b, h, i] = log sum_j exp(scale * q_i . k_j)`, -inf for a row that sees no key).
/// Works in key blocks with an online softmax: memory use is independent of Tk. A NaN or Inf
/// that reaches a row's visible scores or values makes that row NaN; masked keys and values
/// are never read into a row's result.
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param q    [B, H, Tq, D] queries.
/// \param k    [B, Hkv, Tk, D] keys; Hkv divides H (grouped-query attention).
/// \param v    [B, Hkv, Tk, Dv] values.
/// \param o    [B, H, Tq, Dv] output; a row that sees no key is all zeros.
/// \param lse  [B, H, Tq] log-sum-exp output (accum_t<T>).
/// \param opt  causal (bottom-right aligned when Tq != Tk), window and scale (default
///             1/sqrt(D)).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space, detail::lse_output<T, Space> Lse>
void attention(const Policy& policy, input_view<T, 4, Space> q, input_view<T, 4, Space> k,
               input_view<T, 4, Space> v, tensor_view<T, 4, Space> o, Lse&& lse,
               const attention_options& opt = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"attention"};
  detail::run(policy, detail::check_attention<T, Space>(
                          c, q, k, v, o, tensor_view<accum_t<T>, 3, Space>(lse), opt));
}

/// Fused attention: `o = softmax(mask(q k^T * scale)) v`, never materialising [Tq, Tk].
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
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

/// Fused attention over a padded batch whose rows have their own key counts: row b attends to
/// its first kv_lengths[b] keys only (its queries sit at positions kv_lengths[b] - Tq + i for
/// the causal mask and the window), so keys past a row's length are never read. Rows that see
/// no key give zeros and lse -inf.
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param q, k, v, o, lse, opt  as in attention.
/// \param kv_lengths  [B] int32 key counts, each in [0, Tk]; in the policy's memory (a device
///                    view is checked by attn::cuda, which reads it back first).
/// \throws shape_error when the extents disagree or a length is out of range, before anything
///         is written.
template <class Policy, class T, class Space, detail::lse_output<T, Space> Lse>
void attention(const Policy& policy, input_view<T, 4, Space> q, input_view<T, 4, Space> k,
               input_view<T, 4, Space> v, tensor_view<T, 4, Space> o, Lse&& lse,
               const attention_options& opt, input_view<std::int32_t, 1, Space> kv_lengths) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"attention"};
  attention_args<T, Space> a =
      detail::check_attention<T, Space>(c, q, k, v, o, tensor_view<accum_t<T>, 3, Space>(lse), opt);
  a.lengths_checked = detail::check_lengths(c, kv_lengths, q.extent(0), k.extent(2));
  using detail::footprint_of;
  c.disjoint({footprint_of("o", o), footprint_of("lse", a.lse)},
             {footprint_of("kv_lengths", kv_lengths)});
  a.kv_lengths = kv_lengths;
  detail::run(policy, a);
}

/// Fused attention with per-row key counts, without lse (see the overload with lse).
template <class Policy, class T, class Space>
void attention(const Policy& policy, input_view<T, 4, Space> q, input_view<T, 4, Space> k,
               input_view<T, 4, Space> v, tensor_view<T, 4, Space> o, const attention_options& opt,
               input_view<std::int32_t, 1, Space> kv_lengths) {
  attention(policy, q, k, v, o, tensor_view<accum_t<T>, 3, Space>{}, opt, kv_lengths);
}

/// Fused attention over packed variable-length sequences (prefill without padding): sequence
/// b holds queries [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and keys [cu_seqlens_k[b],
/// cu_seqlens_k[b + 1]) of the packed buffers, and attends within itself (the causal mask
/// aligned bottom-right per sequence). The offsets are host memory for every policy (they size
/// the work); each sequence is one attention call on strided views of the buffers.
///
/// \param policy        the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param q             [Nq, H, D] queries of all sequences, back to back.
/// \param k             [Nk, Hkv, D] keys.
/// \param v             [Nk, Hkv, Dv] values.
/// \param o             [Nq, H, Dv] output.
/// \param cu_seqlens_q  [B + 1] nondecreasing query offsets, 0 first and Nq last.
/// \param cu_seqlens_k  [B + 1] key offsets likewise (Nk last).
/// \param opt           causal, window, scale.
/// \throws shape_error when the extents or offsets disagree, before anything is written.
template <class Policy, class T, class Space>
void attention_varlen(const Policy& policy, input_view<T, 3, Space> q, input_view<T, 3, Space> k,
                      input_view<T, 3, Space> v, tensor_view<T, 3, Space> o,
                      tensor_view<const std::int32_t, 1> cu_seqlens_q,
                      tensor_view<const std::int32_t, 1> cu_seqlens_k,
                      const attention_options& opt = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"attention_varlen"};
  c.view("q", q);
  c.view("k", k);
  c.view("v", v);
  c.output("o", o);
  c.positive("q.D (extent 2)", q.extent(2));
  c.same("k.D (extent 2)", k.extent(2), "q.D (extent 2)", q.extent(2));
  if (k.extent(1) == 0 ? q.extent(1) != 0 : q.extent(1) % k.extent(1) != 0)
    c.fail("k.H (extent 1) is " + std::to_string(k.extent(1)) + " but q.H (extent 1) is " +
           std::to_string(q.extent(1)) + "; the key heads must divide the query heads");
  c.same("v.N (extent 0)", v.extent(0), "k.N (extent 0)", k.extent(0));
  c.same("v.H (extent 1)", v.extent(1), "k.H (extent 1)", k.extent(1));
  c.same("o.N (extent 0)", o.extent(0), "q.N (extent 0)", q.extent(0));
  c.same("o.H (extent 1)", o.extent(1), "q.H (extent 1)", q.extent(1));
  c.same("o.Dv (extent 2)", o.extent(2), "v.Dv (extent 2)", v.extent(2));
  c.view("cu_seqlens_q", cu_seqlens_q);
  c.view("cu_seqlens_k", cu_seqlens_k);
  c.positive("cu_seqlens_q (extent 0)", cu_seqlens_q.extent(0));
  c.same("cu_seqlens_k (extent 0)", cu_seqlens_k.extent(0), "cu_seqlens_q (extent 0)",
         cu_seqlens_q.extent(0));
  const index_t B = cu_seqlens_q.extent(0) - 1;
  const auto offsets = [&](const char* name, const tensor_view<const std::int32_t, 1>& cu,
                           index_t n) {
    if (cu(0) != 0)
      c.fail(std::string(name) + "[0] is " + std::to_string(cu(0)) + "; it must be 0");
    for (index_t b = 0; b < B; ++b)
      if (cu(b + 1) < cu(b))
        c.fail(std::string(name) + " decreases at " + std::to_string(b + 1) + " (" +
               std::to_string(cu(b)) + " then " + std::to_string(cu(b + 1)) + ")");
    c.same(std::string(name) + "[B]", cu(B), "the packed extent", n);
  };
  offsets("cu_seqlens_q", cu_seqlens_q, q.extent(0));
  offsets("cu_seqlens_k", cu_seqlens_k, k.extent(0));
  if (opt.window < 0)
    c.fail("window is " + std::to_string(opt.window) + "; it must be >= 0 (0: none)");
  const double scale = c.scale<T>(opt.scale, q.extent(2));
  using detail::footprint_of;
  c.disjoint(
      {footprint_of("o", o)},
      {footprint_of("q", q), footprint_of("k", k), footprint_of("v", v),
       footprint_of("cu_seqlens_q", cu_seqlens_q), footprint_of("cu_seqlens_k", cu_seqlens_k)});
  // [N, H, D] rows [begin, end) seen as [1, H, end - begin, D].
  const auto part = [](auto t, index_t begin, index_t end) {
    using V = std::remove_pointer_t<decltype(t.data())>;
    return tensor_view<V, 4, Space>{
        t.data() + (t.empty() ? 0 : begin * t.stride(0)),
        {1, t.extent(1), end - begin, t.extent(2)},
        {(end - begin) * t.stride(0), t.stride(1), t.stride(0), t.stride(2)}};
  };
  for (index_t b = 0; b < B; ++b) {
    const index_t q0 = cu_seqlens_q(b), q1 = cu_seqlens_q(b + 1);
    const index_t k0 = cu_seqlens_k(b), k1 = cu_seqlens_k(b + 1);
    if (q1 == q0) continue;
    const attention_shape shape{1,       q.extent(1), k.extent(1), q1 - q0,
                                k1 - k0, q.extent(2), v.extent(2)};
    detail::run(policy, attention_args<T, Space>{part(q, q0, q1),
                                                 part(k, k0, k1),
                                                 part(v, k0, k1),
                                                 part(o, q0, q1),
                                                 {},
                                                 {},
                                                 shape,
                                                 mask_spec{opt.causal, opt.window},
                                                 scale,
                                                 true});
  }
}

/// The gradients of the fused attention, FlashAttention-2's way: P is recomputed from q, k
/// and the forward's lse (never stored as [Tq, Tk]); with D = rowsum(d_o * o),
/// `dv = P^T d_o`, `dP = d_o v^T`, `dS = P * (dP - D)`, `dq = scale * dS k`,
/// `dk = scale * dS^T q`. Deterministic: the same bits for every thread count and run.
/// Gradients are written, not accumulated; dq, dk or dv may be an empty view (not computed).
/// Rows that see no key contribute nothing (and get dq = 0).
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
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
  using detail::footprint_of;
  c.disjoint({footprint_of("dq", dq), footprint_of("dk", dk), footprint_of("dv", dv)},
             {footprint_of("q", q), footprint_of("k", k), footprint_of("v", v),
              footprint_of("o", o), footprint_of("lse", lse), footprint_of("d_o", d_o)});
  shape.value_dim = v.extent(3);
  detail::run(policy, attention_backward_args<T, Space>{q,
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
