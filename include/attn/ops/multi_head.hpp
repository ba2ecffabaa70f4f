#pragma once
/// \file
/// Seed stage 6: multi-head attention, the seed's whole path composed from the stages.

#include <span>
#include <type_traits>

#include "attn/core/check.hpp"
#include "attn/core/host_tensor.hpp"
#include "attn/core/options.hpp"
#include "attn/core/policy.hpp"
#include "attn/ops/attention.hpp"
#include "attn/ops/projection.hpp"

namespace attn {

/// Weights of one multi-head attention layer (as in GPT-2: `y = x W + b`, W row-major
/// [d_model, d_model]). Biases are optional: leave a span empty for none.
template <class T, class Space = host_space>
struct mha_weights {
  tensor_view<const T, 2, Space> w_q, w_k, w_v;   ///< [d_model, d_model] each.
  tensor_view<const T, 2, Space> w_o;             ///< [d_model, d_model] output projection.
  std::span<const T> b_q{}, b_k{}, b_v{}, b_o{};  ///< d_model elements each, or empty.
  index_t heads = 0;                              ///< Head count; divides d_model.
};

/// Multi-head attention: Q, K, V = x W_{q,k,v} + b, split into `heads` slices of
/// D = d_model / heads, `attention` per head, heads concatenated, then `out = concat W_o + b_o`.
/// Allocates two workspaces, [B, T, 3 d_model] and [B, T, d_model], in the policy's memory.
///
/// \param x    [B, T, d_model] input.
/// \param w    the layer's weights and head count.
/// \param out  [B, T, d_model] output; must not alias `x`.
/// \param opt  causal and scale (default 1/sqrt(D)).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void multi_head_attention(const Policy& policy, input_view<T, 3, Space> x,
                          const mha_weights<std::type_identity_t<T>, Space>& w,
                          tensor_view<T, 3, Space> out, const attention_options& opt = {}) {
  detail::check_space<Policy, Space>();
  const detail::checker c{"multi_head_attention"};
  c.view("x", x);
  c.view("out", out, true);
  c.positive("heads", w.heads);
  const index_t B = x.extent(0), T_ = x.extent(1), C = x.extent(2);
  if (C % w.heads != 0)
    c.fail("x.d_model (extent 2) is " + std::to_string(C) +
           ", not divisible by heads = " + std::to_string(w.heads));
  const std::pair<const char*, tensor_view<const T, 2, Space>> mats[] = {
      {"w_q", w.w_q}, {"w_k", w.w_k}, {"w_v", w.w_v}, {"w_o", w.w_o}};
  for (const auto& [name, m] : mats) {
    const std::string n = name;
    c.view(name, m);
    c.same((n + " rows (extent 0)").c_str(), m.extent(0), "x.d_model (extent 2)", C);
    c.same((n + " cols (extent 1)").c_str(), m.extent(1), "x.d_model (extent 2)", C);
  }
  c.bias("b_q", w.b_q, "d_model", C);
  c.bias("b_k", w.b_k, "d_model", C);
  c.bias("b_v", w.b_v, "d_model", C);
  c.bias("b_o", w.b_o, "d_model", C);
  c.same("out.B (extent 0)", out.extent(0), "x.B (extent 0)", B);
  c.same("out.T (extent 1)", out.extent(1), "x.T (extent 1)", T_);
  c.same("out.d_model (extent 2)", out.extent(2), "x.d_model (extent 2)", C);
  const double scale = c.scale(opt.scale, C / w.heads);

  const index_t H = w.heads, D = C / H;
  using buffer = typename owning_tensor<Space, T, 3>::type;
  buffer qkv(dims<3>{B, T_, 3 * C});  // (B, T, 3C): Q | K | V, each (H, D) per position
  buffer ctx(dims<3>{B, T_, C});      // (B, T, C): concatenated heads
  T* base = qkv.data();
  auto part = [&](index_t i) {
    return tensor_view<T, 3, Space>{base + i * C, {B, T_, C}, {T_ * 3 * C, 3 * C, 1}};
  };
  project_qkv(policy, x, w.w_q, w.w_k, w.w_v, part(0), part(1), part(2), w.b_q, w.b_k, w.b_v);

  // (B, T, H, D) seen as (B, H, T, D): heads split by strides, no copy.
  auto heads = [&](T* p, index_t row) {
    return tensor_view<T, 4, Space>{p, {B, H, T_, D}, {T_ * row, D, row, 1}};
  };
  attention(policy, tensor_view<const T, 4, Space>(heads(base, 3 * C)),
            tensor_view<const T, 4, Space>(heads(base + C, 3 * C)),
            tensor_view<const T, 4, Space>(heads(base + 2 * C, 3 * C)), heads(ctx.data(), C),
            attention_options{.causal = opt.causal, .scale = scale});
  project(policy, tensor_view<const T, 3, Space>(ctx.view()), w.w_o, out, w.b_o);
}

}  // namespace attn
