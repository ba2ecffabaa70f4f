#pragma once
/// \file
/// Seed stage 1: the Q/K/V projection `Y = X W (+ b)`.

#include <span>
#include <type_traits>
#include <utility>

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"

namespace attn {

/// `y[b, t, :] = x[b, t, :] W + bias` for every batch entry and position.
///
/// \param x     [B, T, C] input.
/// \param w     [C, E] weight (row-major: y = x w, as in GPT-2's Conv1D).
/// \param y     [B, T, E] output; may be strided, must not alias `x` or `w`.
/// \param bias  E elements, or empty for none.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void project(const Policy& policy, input_view<T, 3, Space> x, input_view<T, 2, Space> w,
             tensor_view<T, 3, Space> y, std::span<const std::type_identity_t<T>> bias = {}) {
  detail::check_space<Policy, Space>();
  const detail::checker c{"project"};
  c.view("x", x);
  c.view("w", w);
  c.view("y", y, true);
  c.same("w.C (extent 0)", w.extent(0), "x.C (extent 2)", x.extent(2));
  c.same("y.B (extent 0)", y.extent(0), "x.B (extent 0)", x.extent(0));
  c.same("y.T (extent 1)", y.extent(1), "x.T (extent 1)", x.extent(1));
  c.same("y.E (extent 2)", y.extent(2), "w.E (extent 1)", w.extent(1));
  c.bias("bias", bias, "w.E", w.extent(1));
  backend<Policy>::project(policy, x, w, bias, y);
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
/// \param b_q, b_k, b_v  E elements each, or empty.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void project_qkv(const Policy& policy, input_view<T, 3, Space> x, input_view<T, 2, Space> w_q,
                 input_view<T, 2, Space> w_k, input_view<T, 2, Space> w_v,
                 tensor_view<T, 3, Space> q, tensor_view<T, 3, Space> k, tensor_view<T, 3, Space> v,
                 std::span<const std::type_identity_t<T>> b_q = {},
                 std::span<const std::type_identity_t<T>> b_k = {},
                 std::span<const std::type_identity_t<T>> b_v = {}) {
  detail::check_space<Policy, Space>();
  const detail::checker c{"project_qkv"};
  c.view("x", x);
  c.view("w_q", w_q);
  c.view("w_k", w_k);
  c.view("w_v", w_v);
  c.view("q", q, true);
  c.view("k", k, true);
  c.view("v", v, true);
  c.same("w_q.C (extent 0)", w_q.extent(0), "x.C (extent 2)", x.extent(2));
  c.same("w_k.C (extent 0)", w_k.extent(0), "x.C (extent 2)", x.extent(2));
  c.same("w_v.C (extent 0)", w_v.extent(0), "x.C (extent 2)", x.extent(2));
  c.same("w_k.E (extent 1)", w_k.extent(1), "w_q.E (extent 1)", w_q.extent(1));
  c.same("w_v.E (extent 1)", w_v.extent(1), "w_q.E (extent 1)", w_q.extent(1));
  for (const auto& [name, out] : {std::pair{"q", q}, std::pair{"k", k}, std::pair{"v", v}}) {
    const std::string n = name;
    c.same((n + ".B (extent 0)").c_str(), out.extent(0), "x.B (extent 0)", x.extent(0));
    c.same((n + ".T (extent 1)").c_str(), out.extent(1), "x.T (extent 1)", x.extent(1));
    c.same((n + ".E (extent 2)").c_str(), out.extent(2), "w_q.E (extent 1)", w_q.extent(1));
  }
  c.bias("b_q", b_q, "w_q.E", w_q.extent(1));
  c.bias("b_k", b_k, "w_q.E", w_q.extent(1));
  c.bias("b_v", b_v, "w_q.E", w_q.extent(1));
  backend<Policy>::project_qkv(policy, x, w_q, w_k, w_v, b_q, b_k, b_v, q, k, v);
}

}  // namespace attn
