#pragma once
/// \file
/// Seed stage 5: the probability-weighted sum of values, `O = P V`.

#include <string>

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/problem.hpp"
#include "attn/ops/scores.hpp"

namespace attn {

/// Arguments of `weighted_values`: o [B, H, Tq, Dv] = p [B, H, Tq, Tk] v [B, Hkv, Tk, Dv].
template <class T, class Space = host_space>
struct weighted_values_args {
  /// [B, H, Tq, Tk] weights and [B, Hkv, Tk, Dv] values.
  ///@{
  tensor_view<const T, 4, Space> p, v;
  ///@}
  tensor_view<T, 4, Space> o;  ///< [B, H, Tq, Dv] output
  attention_shape shape;       ///< the extents, from the checks

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return weighted_values_args<T, S>{f(p), f(v), f(o), shape};
  }
};

/// Arguments of `weighted_values_backward`: dp = d_o v^T, dv = sum over the query heads of
/// each value head of p^T d_o. Empty outputs are not computed.
template <class T, class Space = host_space>
struct weighted_values_backward_args {
  /// [B, H, Tq, Tk], [B, Hkv, Tk, Dv], [B, H, Tq, Dv]: the forward's inputs, the output's
  /// gradient.
  ///@{
  tensor_view<const T, 4, Space> p, v, d_o;
  ///@}
  /// Like p and like v, or empty (not computed).
  ///@{
  tensor_view<T, 4, Space> dp, dv;
  ///@}
  attention_shape shape;  ///< the extents, from the checks

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return weighted_values_backward_args<T, S>{f(p), f(v), f(d_o), f(dp), f(dv), shape};
  }
};

namespace detail {
template <class P, class V>
attention_shape check_pv(const checker& c, const P& p, const V& v) {
  c.view("p", p);
  c.view("v", v);
  c.same("v.B (extent 0)", v.extent(0), "p.B (extent 0)", p.extent(0));
  if (v.extent(1) == 0 ? p.extent(1) != 0 : p.extent(1) % v.extent(1) != 0)
    c.fail("v.H (extent 1) is " + std::to_string(v.extent(1)) + " but p.H (extent 1) is " +
           std::to_string(p.extent(1)) + "; the value heads must divide the query heads");
  c.same("v.Tk (extent 2)", v.extent(2), "p.Tk (extent 3)", p.extent(3));
  return {p.extent(0), p.extent(1), v.extent(1), p.extent(2), v.extent(2), 0, v.extent(3)};
}

/// Checks that `name` is [B, H, Tq, Dv] for p [B, H, Tq, Tk] and v [B, Hkv, Tk, Dv].
template <class O, class P, class V>
void check_output_extents(const checker& c, const std::string& name, const O& o, const P& p,
                          const V& v) {
  c.same(name + ".B (extent 0)", o.extent(0), "p.B (extent 0)", p.extent(0));
  c.same(name + ".H (extent 1)", o.extent(1), "p.H (extent 1)", p.extent(1));
  c.same(name + ".Tq (extent 2)", o.extent(2), "p.Tq (extent 2)", p.extent(2));
  c.same(name + ".Dv (extent 3)", o.extent(3), "v.Dv (extent 3)", v.extent(3));
}
}  // namespace detail

/// `o[b, h, i, :] = sum_j p[b, h, i, j] * v[b, h / (H / Hkv), j, :]`.
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param p  [B, H, Tq, Tk] probabilities (any weights).
/// \param v  [B, Hkv, Tk, Dv] values; Hkv divides H (grouped-query attention).
/// \param o  [B, H, Tq, Dv] output; must not overlap p or v.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void weighted_values(const Policy& policy, input_view<T, 4, Space> p, input_view<T, 4, Space> v,
                     tensor_view<T, 4, Space> o) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"weighted_values"};
  const attention_shape shape = detail::check_pv(c, p, v);
  c.output("o", o);
  detail::check_output_extents(c, "o", o, p, v);
  using detail::footprint_of;
  c.disjoint({footprint_of("o", o)}, {footprint_of("p", p), footprint_of("v", v)});
  detail::run(policy, weighted_values_args<T, Space>{p, v, o, shape});
}

/// The gradients of `weighted_values` from d_o = dLoss/do: `dp = d_o v^T` and `dv = p^T d_o`
/// (with grouped value heads, summed over the query heads of a group). Written, not
/// accumulated; dp or dv may be an empty view (not computed).
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param p    [B, H, Tq, Tk] the forward's weights.
/// \param v    [B, Hkv, Tk, Dv] the forward's values.
/// \param d_o  [B, H, Tq, Dv] gradient of the output.
/// \param dp   [B, H, Tq, Tk] gradient of p, or empty.
/// \param dv   [B, Hkv, Tk, Dv] gradient of v, or empty.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class G, class Space, class T = std::remove_const_t<G>>
void weighted_values_backward(const Policy& policy, input_view<T, 4, Space> p,
                              input_view<T, 4, Space> v, tensor_view<G, 4, Space> d_o,
                              output_view<T, 4, Space> dp, output_view<T, 4, Space> dv) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"weighted_values_backward"};
  const attention_shape shape = detail::check_pv(c, p, v);
  c.view("d_o", d_o);
  detail::check_output_extents(c, "d_o", d_o, p, v);
  detail::check_like(c, "dp", dp, "p", p);
  detail::check_like(c, "dv", dv, "v", v);
  using detail::footprint_of;
  c.disjoint({footprint_of("dp", dp), footprint_of("dv", dv)},
             {footprint_of("p", p), footprint_of("v", v), footprint_of("d_o", d_o)});
  detail::run(policy, weighted_values_backward_args<T, Space>{p, v, d_o, dp, dv, shape});
}

}  // namespace attn
