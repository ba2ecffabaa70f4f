#pragma once
/// \file
/// Seed stage 1: the Q/K/V projection `Y = X W (+ b)`.

#include <string>

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"

namespace attn {

/// Arguments of `project` and `project_qkv`: up to three projections of one input,
/// `y[n] = x w[n] + bias[n]`. Each output has its own width E_n.
template <class T, class Space = host_space>
struct projection_args {
  tensor_view<const T, 3, Space> x;        ///< [B, T, C]
  int count = 1;                           ///< outputs: 1 (project) or 3 (project_qkv)
  tensor_view<const T, 2, Space> w[3];     ///< [C, E_n]
  tensor_view<const T, 1, Space> bias[3];  ///< [E_n], or empty for none
  tensor_view<T, 3, Space> y[3];           ///< [B, T, E_n]

  /// The same arguments with every view passed through f (a staging policy's hook).
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return projection_args<T, S>{f(x),
                                 count,
                                 {f(w[0]), f(w[1]), f(w[2])},
                                 {f(bias[0]), f(bias[1]), f(bias[2])},
                                 {f(y[0]), f(y[1]), f(y[2])}};
  }
};

namespace detail {
/// Checks output n of a projection of x and fills it into `a`.
template <class T, class Space>
void check_projection(const checker& c, const tensor_view<const T, 3, Space>& x,
                      const std::string& w_name, const tensor_view<const T, 2, Space>& w,
                      const std::string& b_name, const tensor_view<const T, 1, Space>& bias,
                      const std::string& y_name, const tensor_view<T, 3, Space>& y) {
  c.view(w_name.c_str(), w);
  c.output(y_name.c_str(), y);
  c.same(w_name + ".C (extent 0)", w.extent(0), "x.C (extent 2)", x.extent(2));
  c.same(y_name + ".B (extent 0)", y.extent(0), "x.B (extent 0)", x.extent(0));
  c.same(y_name + ".T (extent 1)", y.extent(1), "x.T (extent 1)", x.extent(1));
  c.same(y_name + ".E (extent 2)", y.extent(2), w_name + ".E (extent 1)", w.extent(1));
  c.optional_vector(b_name.c_str(), bias, w_name + ".E", w.extent(1));
}
}  // namespace detail

/// `y[b, t, :] = x[b, t, :] W + bias` for every batch entry and position.
///
/// \param x     [B, T, C] input.
/// \param w     [C, E] weight (row-major: y = x w, as in GPT-2's Conv1D).
/// \param y     [B, T, E] output; may be strided, must not alias `x` or `w`.
/// \param bias  [E], or empty for none (a `std::vector` or `std::span` converts on the host).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void project(const Policy& policy, input_view<T, 3, Space> x, input_view<T, 2, Space> w,
             tensor_view<T, 3, Space> y, input_view<T, 1, Space> bias = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"project"};
  c.view("x", x);
  detail::check_projection(c, x, "w", w, "bias", bias, "y", y);
  backend<Policy>::run(policy, projection_args<T, Space>{x, 1, {w}, {bias}, {y}});
}

/// Q, K and V from one pass over x: `q = x w_q + b_q`, `k = x w_k + b_k`, `v = x w_v + b_v`.
/// The three weights are separate [C, E] matrices (each the column block of GPT-2's fused
/// `c_attn` weight [C, 3E]: Q in columns [0, E), K in [E, 2E), V in [2E, 3E)).
/// Pass `q`, `k`, `v` as strided views to split heads for free: a [B, T, H*D] buffer seen as
/// [B, H, T, D] is `{ptr, {B, H, T, D}, {T*H*D, D, H*D, 1}}`.
///
/// \param x              [B, T, C] input.
/// \param w_q, w_k, w_v  [C, E] weights.
/// \param q, k, v        [B, T, E] outputs.
/// \param b_q, b_k, b_v  [E] each, or empty.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void project_qkv(const Policy& policy, input_view<T, 3, Space> x, input_view<T, 2, Space> w_q,
                 input_view<T, 2, Space> w_k, input_view<T, 2, Space> w_v,
                 tensor_view<T, 3, Space> q, tensor_view<T, 3, Space> k, tensor_view<T, 3, Space> v,
                 input_view<T, 1, Space> b_q = {}, input_view<T, 1, Space> b_k = {},
                 input_view<T, 1, Space> b_v = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"project_qkv"};
  c.view("x", x);
  detail::check_projection(c, x, "w_q", w_q, "b_q", b_q, "q", q);
  detail::check_projection(c, x, "w_k", w_k, "b_k", b_k, "k", k);
  detail::check_projection(c, x, "w_v", w_v, "b_v", b_v, "v", v);
  c.same("w_k.E (extent 1)", w_k.extent(1), "w_q.E (extent 1)", w_q.extent(1));
  c.same("w_v.E (extent 1)", w_v.extent(1), "w_q.E (extent 1)", w_q.extent(1));
  backend<Policy>::run(
      policy, projection_args<T, Space>{x, 3, {w_q, w_k, w_v}, {b_q, b_k, b_v}, {q, k, v}});
}

}  // namespace attn
