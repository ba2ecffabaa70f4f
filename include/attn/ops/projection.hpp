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

  /// These arguments with each view replaced by f(view), a view of f's target_space.
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

/// Arguments of `project_backward`: for `count` projections y[n] = x w[n] + bias[n] of one x,
/// dx = sum_n dy[n] w[n]^T, dw[n] = sum_{b,t} x^T dy[n], db[n] = sum_{b,t} dy[n]. Empty
/// outputs are not computed.
template <class T, class Space = host_space>
struct projection_backward_args {
  tensor_view<const T, 3, Space> x;      ///< [B, T, C]
  int count = 1;                         ///< projections of x: 1 or 3
  tensor_view<const T, 2, Space> w[3];   ///< [C, E_n]
  tensor_view<const T, 3, Space> dy[3];  ///< [B, T, E_n]
  tensor_view<T, 3, Space> dx;           ///< [B, T, C], or empty
  tensor_view<T, 2, Space> dw[3];        ///< [C, E_n], or empty
  tensor_view<T, 1, Space> db[3];        ///< [E_n], or empty

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return projection_backward_args<T, S>{f(x),
                                          count,
                                          {f(w[0]), f(w[1]), f(w[2])},
                                          {f(dy[0]), f(dy[1]), f(dy[2])},
                                          f(dx),
                                          {f(dw[0]), f(dw[1]), f(dw[2])},
                                          {f(db[0]), f(db[1]), f(db[2])}};
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

/// Checks projection n's part of a backward: w, dy and the optional dw, db.
template <class T, class Space>
void check_projection_backward(const checker& c, const tensor_view<const T, 3, Space>& x,
                               const std::string& w_name, const tensor_view<const T, 2, Space>& w,
                               const std::string& dy_name, const tensor_view<const T, 3, Space>& dy,
                               const std::string& dw_name, const tensor_view<T, 2, Space>& dw,
                               const std::string& db_name, const tensor_view<T, 1, Space>& db) {
  c.view(w_name.c_str(), w);
  c.view(dy_name.c_str(), dy);
  c.same(w_name + ".C (extent 0)", w.extent(0), "x.C (extent 2)", x.extent(2));
  c.same(dy_name + ".B (extent 0)", dy.extent(0), "x.B (extent 0)", x.extent(0));
  c.same(dy_name + ".T (extent 1)", dy.extent(1), "x.T (extent 1)", x.extent(1));
  c.same(dy_name + ".E (extent 2)", dy.extent(2), w_name + ".E (extent 1)", w.extent(1));
  if (given(dw)) {
    c.output(dw_name.c_str(), dw);
    c.same(dw_name + ".C (extent 0)", dw.extent(0), w_name + ".C (extent 0)", w.extent(0));
    c.same(dw_name + ".E (extent 1)", dw.extent(1), w_name + ".E (extent 1)", w.extent(1));
  }
  if (given(db)) {
    c.output(db_name.c_str(), db);
    c.same(db_name + ".E (extent 0)", db.extent(0), w_name + ".E (extent 1)", w.extent(1));
  }
}

template <class T, class Space>
void check_dx(const checker& c, const tensor_view<const T, 3, Space>& x,
              const tensor_view<T, 3, Space>& dx) {
  if (!given(dx)) return;
  c.output("dx", dx);
  c.same("dx.B (extent 0)", dx.extent(0), "x.B (extent 0)", x.extent(0));
  c.same("dx.T (extent 1)", dx.extent(1), "x.T (extent 1)", x.extent(1));
  c.same("dx.C (extent 2)", dx.extent(2), "x.C (extent 2)", x.extent(2));
}
}  // namespace detail

/// `y[b, t, :] = x[b, t, :] W + bias` for every batch entry and position.
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param x     [B, T, C] input.
/// \param w     [C, E] weight (row-major: y = x w, as in GPT-2's Conv1D).
/// \param y     [B, T, E] output; may be strided, must not overlap `x`, `w` or `bias`.
/// \param bias  [E], or empty for none (a `std::vector` or `std::span` converts on the host).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void project(const Policy& policy, input_view<T, 3, Space> x, input_view<T, 2, Space> w,
             tensor_view<T, 3, Space> y, input_view<T, 1, Space> bias = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"project"};
  c.view("x", x);
  detail::check_projection(c, x, "w", w, "bias", bias, "y", y);
  using detail::footprint_of;
  c.disjoint({footprint_of("y", y)},
             {footprint_of("x", x), footprint_of("w", w), footprint_of("bias", bias)});
  detail::run(policy, projection_args<T, Space>{x, 1, {w}, {bias}, {y}});
}

/// Q, K and V from one pass over x: `q = x w_q + b_q`, `k = x w_k + b_k`, `v = x w_v + b_v`.
/// The three weights are separate [C, E] matrices (each the column block of GPT-2's fused
/// `c_attn` weight [C, 3E]: Q in columns [0, E), K in [E, 2E), V in [2E, 3E)).
/// Pass `q`, `k`, `v` as strided views to split heads for free: a [B, T, H*D] buffer seen as
/// [B, H, T, D] is `{ptr, {B, H, T, D}, {T*H*D, D, H*D, 1}}`.
///
/// \param policy         the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param x              [B, T, C] input.
/// \param w_q, w_k, w_v  [C, E] weights.
/// \param q, k, v        [B, T, E] outputs; disjoint from each other and from the inputs.
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
  using detail::footprint_of;
  c.disjoint({footprint_of("q", q), footprint_of("k", k), footprint_of("v", v)},
             {footprint_of("x", x), footprint_of("w_q", w_q), footprint_of("w_k", w_k),
              footprint_of("w_v", w_v), footprint_of("b_q", b_q), footprint_of("b_k", b_k),
              footprint_of("b_v", b_v)});
  detail::run(policy, projection_args<T, Space>{x, 3, {w_q, w_k, w_v}, {b_q, b_k, b_v}, {q, k, v}});
}

/// The gradients of `project` (y = x w + bias) from dy = dLoss/dy: `dx = dy w^T`,
/// `dw = sum_{b,t} x[b,t]^T dy[b,t]`, `db = sum_{b,t} dy[b,t]`. Gradients are written, not
/// accumulated; any of dx, dw, db may be an empty view (not computed).
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param x   [B, T, C] the forward's input.
/// \param w   [C, E] the forward's weight.
/// \param dy  [B, T, E] gradient of the output.
/// \param dx  [B, T, C] gradient of x, or empty.
/// \param dw  [C, E] gradient of w, or empty.
/// \param db  [E] gradient of the bias, or empty.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class G, class Space, class T = std::remove_const_t<G>>
void project_backward(const Policy& policy, input_view<T, 3, Space> x, input_view<T, 2, Space> w,
                      tensor_view<G, 3, Space> dy, output_view<T, 3, Space> dx,
                      output_view<T, 2, Space> dw = {}, output_view<T, 1, Space> db = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"project_backward"};
  c.view("x", x);
  detail::check_projection_backward(c, x, "w", w, "dy", tensor_view<const T, 3, Space>(dy), "dw",
                                    dw, "db", db);
  detail::check_dx(c, x, dx);
  using detail::footprint_of;
  c.disjoint({footprint_of("dx", dx), footprint_of("dw", dw), footprint_of("db", db)},
             {footprint_of("x", x), footprint_of("w", w), footprint_of("dy", dy)});
  detail::run(policy, projection_backward_args<T, Space>{x, 1, {w}, {dy}, dx, {dw}, {db}});
}

}  // namespace attn
