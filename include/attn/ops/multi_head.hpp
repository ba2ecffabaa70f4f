#pragma once
/// \file
/// Seed stage 6: multi-head attention, the seed's whole path composed from the stages, with a
/// caller-owned workspace that keeps what a backward pass needs.

#include <string>
#include <type_traits>

#include "attn/core/check.hpp"
#include "attn/core/host_tensor.hpp"
#include "attn/core/options.hpp"
#include "attn/core/policy.hpp"
#include "attn/ops/attention.hpp"
#include "attn/ops/projection.hpp"

namespace attn {

/// Weights of one multi-head attention layer (as in GPT-2: `y = x W + b`, W row-major
/// [in, out]). With C = d_model, D = C / heads and Ckv = kv_heads * D: w_q and w_o are [C, C],
/// w_k and w_v [C, Ckv]. Biases are optional: leave a view empty for none (on the host a
/// `std::vector` converts).
template <class T, class Space = host_space>
struct mha_weights {
  /// The projections to Q, K and V: [C, C], [C, Ckv], [C, Ckv].
  ///@{
  tensor_view<const T, 2, Space> w_q, w_k, w_v;
  ///@}
  tensor_view<const T, 2, Space> w_o;  ///< [C, C] output projection
  /// Biases [C], [Ckv], [Ckv], [C], each optional (empty: none).
  ///@{
  tensor_view<const T, 1, Space> b_q{}, b_k{}, b_v{}, b_o{};
  ///@}
  index_t heads = 0;     ///< query heads; divides d_model
  index_t kv_heads = 0;  ///< key/value heads (grouped-query attention); 0: the same as heads

  /// The key/value heads in use: kv_heads, or heads when kv_heads is 0.
  index_t key_heads() const { return kv_heads == 0 ? heads : kv_heads; }
};

/// Where `multi_head_attention_backward` writes the layer's gradients (caller-owned views;
/// written, not accumulated). With C = d_model and Ckv = kv_heads * D: d_x [B, T, C];
/// d_w_q, d_w_o [C, C]; d_w_k, d_w_v [C, Ckv]; d_b_q, d_b_o [C]; d_b_k, d_b_v [Ckv]. Any member
/// left empty is not computed.
template <class T, class Space = host_space>
struct mha_gradients {
  tensor_view<T, 3, Space> d_x{};  ///< [B, T, C] gradient of the input
  /// Gradients of the weights: [C, C], [C, Ckv], [C, Ckv], [C, C].
  ///@{
  tensor_view<T, 2, Space> d_w_q{}, d_w_k{}, d_w_v{}, d_w_o{};
  ///@}
  /// Gradients of the biases: [C], [Ckv], [Ckv], [C].
  ///@{
  tensor_view<T, 1, Space> d_b_q{}, d_b_k{}, d_b_v{}, d_b_o{};
  ///@}
};

/// What a forward pass of `multi_head_attention` keeps for the backward pass, in the policy's
/// memory: the projections, the concatenated head outputs, the log-sum-exp and the forward's
/// shape and options (so a backward with other options is rejected). Reused across calls (it
/// grows when a call needs more, never shrinks); with a workspace that is large enough the
/// forward allocates nothing, and on attn::cuda it stays asynchronous.
template <class T, class Space = host_space>
class mha_workspace {
 public:
  mha_workspace() = default;

  /// The forward this workspace holds: B, T, C, H, Hkv (all 0 before the first forward), and
  /// its mask and scale.
  ///@{
  index_t batch() const { return B_; }
  index_t length() const { return T_; }
  index_t d_model() const { return C_; }
  index_t head_count() const { return H_; }
  index_t kv_head_count() const { return Hkv_; }
  const mask_spec& mask() const { return mask_; }
  double scale() const { return scale_; }
  ///@}

  /// [B, T, C + 2 Ckv]: Q | K | V per position, as written by the last forward.
  tensor_view<T, 3, Space> qkv() { return {qkv_.data(), {B_, T_, width()}}; }
  /// [B, T, C]: the heads' outputs concatenated (the input of W_O).
  tensor_view<T, 3, Space> heads() { return {ctx_.data(), {B_, T_, C_}}; }
  /// [B, H, T]: the log-sum-exp of every head's scores.
  tensor_view<accum_t<T>, 3, Space> lse() { return {lse_.data(), {B_, H_, T_}}; }

  /// The projections as attention operands: q [B, H, T, D], k and v [B, Hkv, T, D] (strided
  /// views into qkv()).
  ///@{
  tensor_view<T, 4, Space> q() { return head_view(0, H_); }
  tensor_view<T, 4, Space> k() { return head_view(C_, Hkv_); }
  tensor_view<T, 4, Space> v() { return head_view(C_ + Hkv_ * D_, Hkv_); }
  ///@}
  /// heads() seen as [B, H, T, D].
  tensor_view<T, 4, Space> o() { return {ctx_.data(), {B_, H_, T_, D_}, {T_ * C_, D_, C_, 1}}; }

  /// Makes room for B x T positions of a layer with d_model C, H heads and Hkv key heads, for
  /// a forward with `mask` and `scale`.
  void reserve(index_t B, index_t T_len, index_t C, index_t H, index_t Hkv, const mask_spec& mask,
               double scale) {
    B_ = B, T_ = T_len, C_ = C, H_ = H, Hkv_ = Hkv, D_ = H > 0 ? C / H : 0;
    mask_ = mask, scale_ = scale;
    grow(qkv_, B * T_ * width());
    grow(ctx_, B * T_ * C);
    grow(lse_, B * H * T_);
  }

  /// The backward's scratch: gradients of the projections [B, T, C + 2 Ckv] and of the
  /// concatenated heads [B, T, C] (grown on the first backward).
  ///@{
  tensor_view<T, 3, Space> d_qkv() {
    grow(d_qkv_, B_ * T_ * width());
    return {d_qkv_.data(), {B_, T_, width()}};
  }
  tensor_view<T, 3, Space> d_heads() {
    grow(d_ctx_, B_ * T_ * C_);
    return {d_ctx_.data(), {B_, T_, C_}};
  }
  ///@}

 private:
  template <class U>
  using buffer = typename owning_tensor<Space, U, 1>::type;

  index_t width() const { return C_ + 2 * Hkv_ * D_; }
  tensor_view<T, 4, Space> head_view(index_t offset, index_t heads) {
    return {qkv_.data() + offset, {B_, heads, T_, D_}, {T_ * width(), D_, width(), 1}};
  }
  template <class Buffer>
  static void grow(Buffer& b, index_t n) {
    if (b.size() < n) b = Buffer(dims<1>{n});
  }

  index_t B_ = 0, T_ = 0, C_ = 0, H_ = 0, Hkv_ = 0, D_ = 0;
  mask_spec mask_{};
  double scale_ = 0;
  buffer<T> qkv_, ctx_, d_qkv_, d_ctx_;
  buffer<accum_t<T>> lse_;
};

namespace detail {
/// The checks of multi_head_attention (and its backward), returning Hkv.
template <class T, class Space>
index_t check_mha(const checker& c, const tensor_view<const T, 3, Space>& x,
                  const mha_weights<T, Space>& w) {
  c.view("x", x);
  c.positive("heads", w.heads);
  const index_t C = x.extent(2), H = w.heads, Hkv = w.key_heads();
  if (Hkv <= 0 || H % Hkv != 0)
    c.fail("kv_heads is " + std::to_string(w.kv_heads) +
           "; it must divide heads = " + std::to_string(H) + " (0: the same as heads)");
  if (C % H != 0)
    c.fail("x.d_model (extent 2) is " + std::to_string(C) +
           ", not divisible by heads = " + std::to_string(H));
  const index_t Ckv = Hkv * (C / H);
  const struct {
    const char* name;
    const tensor_view<const T, 2, Space>& m;
    index_t cols;
    const char* cols_name;
  } mats[] = {{"w_q", w.w_q, C, "x.d_model (extent 2)"},
              {"w_k", w.w_k, Ckv, "kv_heads * D"},
              {"w_v", w.w_v, Ckv, "kv_heads * D"},
              {"w_o", w.w_o, C, "x.d_model (extent 2)"}};
  for (const auto& m : mats) {
    const std::string n = m.name;
    c.view(m.name, m.m);
    c.same(n + " rows (extent 0)", m.m.extent(0), "x.d_model (extent 2)", C);
    c.same(n + " cols (extent 1)", m.m.extent(1), m.cols_name, m.cols);
  }
  c.optional_vector("b_q", w.b_q, "d_model", C);
  c.optional_vector("b_k", w.b_k, "kv_heads * D", Ckv);
  c.optional_vector("b_v", w.b_v, "kv_heads * D", Ckv);
  c.optional_vector("b_o", w.b_o, "d_model", C);
  return Hkv;
}
}  // namespace detail

/// Multi-head attention: Q = x W_q + b_q, K = x W_k + b_k, V = x W_v + b_v, split into heads of
/// D = d_model / heads (K and V into kv_heads), `attention` per head, the heads concatenated,
/// then `out = concat W_o + b_o`. The forward's projections, head outputs and log-sum-exp stay
/// in `ws` for multi_head_attention_backward.
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param x    [B, T, d_model] input.
/// \param w    the layer's weights and head counts.
/// \param out  [B, T, d_model] output; must not overlap `x` or the weights.
/// \param opt  causal, window and scale (default 1/sqrt(D)).
/// \param ws   the workspace (grown if needed).
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void multi_head_attention(const Policy& policy, input_view<T, 3, Space> x,
                          const mha_weights<std::type_identity_t<T>, Space>& w,
                          tensor_view<T, 3, Space> out, const attention_options& opt,
                          mha_workspace<std::type_identity_t<T>, Space>& ws) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"multi_head_attention"};
  const index_t Hkv = detail::check_mha(c, x, w);
  const index_t B = x.extent(0), T_ = x.extent(1), C = x.extent(2), H = w.heads, D = C / H;
  c.output("out", out);
  c.same("out.B (extent 0)", out.extent(0), "x.B (extent 0)", B);
  c.same("out.T (extent 1)", out.extent(1), "x.T (extent 1)", T_);
  c.same("out.d_model (extent 2)", out.extent(2), "x.d_model (extent 2)", C);
  if (opt.window < 0)
    c.fail("window is " + std::to_string(opt.window) + "; it must be >= 0 (0: none)");
  const double scale = c.scale<T>(opt.scale, D);
  using detail::footprint_of;
  c.disjoint({footprint_of("out", out)},
             {footprint_of("x", x), footprint_of("w_q", w.w_q), footprint_of("w_k", w.w_k),
              footprint_of("w_v", w.w_v), footprint_of("w_o", w.w_o), footprint_of("b_q", w.b_q),
              footprint_of("b_k", w.b_k), footprint_of("b_v", w.b_v), footprint_of("b_o", w.b_o)});
  if (out.empty()) return;

  ws.reserve(B, T_, C, H, Hkv, mask_spec{opt.causal, opt.window}, scale);
  const tensor_view<T, 3, Space> qkv = ws.qkv();
  const index_t W = qkv.extent(2);
  const auto part = [&](index_t offset, index_t width) {
    return tensor_view<T, 3, Space>{qkv.data() + offset, {B, T_, width}, {T_ * W, W, 1}};
  };
  detail::run(policy, projection_args<T, Space>{
                          x,
                          3,
                          {w.w_q, w.w_k, w.w_v},
                          {w.b_q, w.b_k, w.b_v},
                          {part(0, C), part(C, Hkv * D), part(C + Hkv * D, Hkv * D)}});
  const attention_shape shape{B, H, Hkv, T_, T_, D, D};
  detail::run(policy, attention_args<T, Space>{ws.q(),
                                               ws.k(),
                                               ws.v(),
                                               ws.o(),
                                               ws.lse(),
                                               {},
                                               shape,
                                               mask_spec{opt.causal, opt.window},
                                               scale});
  detail::run(policy, projection_args<T, Space>{ws.heads(), 1, {w.w_o}, {w.b_o}, {out}});
}

/// Multi-head attention with a workspace allocated for this call only (see the overload with
/// `ws`); on attn::cuda its release makes the call synchronous.
template <class Policy, class T, class Space>
void multi_head_attention(const Policy& policy, input_view<T, 3, Space> x,
                          const mha_weights<std::type_identity_t<T>, Space>& w,
                          tensor_view<T, 3, Space> out, const attention_options& opt = {}) {
  mha_workspace<T, Space> ws;
  multi_head_attention(policy, x, w, out, opt, ws);
}

/// The gradients of `multi_head_attention` from d_out = dLoss/dout, using what the forward
/// left in `ws`: x and the weights must be the forward's, and `opt` its options (a workspace
/// from another forward is rejected). Composed from project_backward and attention_backward;
/// deterministic. Gradients are written, not accumulated; members of `g` left empty are not
/// computed.
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param x      [B, T, d_model] the forward's input.
/// \param w      the forward's weights.
/// \param ws     the forward's workspace (its backward scratch grows here).
/// \param d_out  [B, T, d_model] gradient of the output.
/// \param g      where the gradients go (see mha_gradients).
/// \param opt    the forward's options.
/// \throws shape_error when the extents disagree or `ws` holds another forward, before
///         anything is written.
template <class Policy, class T, class Space>
void multi_head_attention_backward(const Policy& policy, input_view<T, 3, Space> x,
                                   const mha_weights<std::type_identity_t<T>, Space>& w,
                                   mha_workspace<T, Space>& ws, input_view<T, 3, Space> d_out,
                                   const mha_gradients<std::type_identity_t<T>, Space>& g,
                                   const attention_options& opt = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"multi_head_attention_backward"};
  const index_t Hkv = detail::check_mha(c, x, w);
  const index_t B = x.extent(0), T_ = x.extent(1), C = x.extent(2), H = w.heads, D = C / H;
  const index_t Ckv = Hkv * D;
  c.view("d_out", d_out);
  c.same("d_out.B (extent 0)", d_out.extent(0), "x.B (extent 0)", B);
  c.same("d_out.T (extent 1)", d_out.extent(1), "x.T (extent 1)", T_);
  c.same("d_out.d_model (extent 2)", d_out.extent(2), "x.d_model (extent 2)", C);
  const double scale = c.scale<T>(opt.scale, D);
  if (ws.batch() != B || ws.length() != T_ || ws.d_model() != C || ws.head_count() != H ||
      ws.kv_head_count() != Hkv)
    c.fail("ws holds a forward of B " + std::to_string(ws.batch()) + ", T " +
           std::to_string(ws.length()) + ", d_model " + std::to_string(ws.d_model()) + ", heads " +
           std::to_string(ws.head_count()) + "/" + std::to_string(ws.kv_head_count()) +
           " but x and w are B " + std::to_string(B) + ", T " + std::to_string(T_) + ", d_model " +
           std::to_string(C) + ", heads " + std::to_string(H) + "/" + std::to_string(Hkv) +
           "; pass the workspace of this layer's forward");
  if (ws.mask().causal != opt.causal || ws.mask().window != opt.window || ws.scale() != scale)
    c.fail("opt differs from the options of the forward that filled ws (causal, window, scale)");
  detail::check_dx(c, x, g.d_x);
  const struct {
    const char* name;
    const tensor_view<T, 2, Space>& dw;
    index_t cols;
  } dws[] = {{"g.d_w_q", g.d_w_q, C},
             {"g.d_w_k", g.d_w_k, Ckv},
             {"g.d_w_v", g.d_w_v, Ckv},
             {"g.d_w_o", g.d_w_o, C}};
  for (const auto& d : dws)
    if (detail::given(d.dw)) {
      c.output(d.name, d.dw);
      c.same(std::string(d.name) + " rows (extent 0)", d.dw.extent(0), "x.d_model (extent 2)", C);
      c.same(std::string(d.name) + " cols (extent 1)", d.dw.extent(1), "its weight's cols", d.cols);
    }
  const struct {
    const char* name;
    const tensor_view<T, 1, Space>& db;
    index_t n;
  } dbs[] = {{"g.d_b_q", g.d_b_q, C},
             {"g.d_b_k", g.d_b_k, Ckv},
             {"g.d_b_v", g.d_b_v, Ckv},
             {"g.d_b_o", g.d_b_o, C}};
  for (const auto& d : dbs)
    if (detail::given(d.db)) {
      c.output(d.name, d.db);
      c.same(std::string(d.name) + " (extent 0)", d.db.extent(0), "its bias's size", d.n);
    }
  using detail::footprint_of;
  c.disjoint({footprint_of("g.d_x", g.d_x), footprint_of("g.d_w_q", g.d_w_q),
              footprint_of("g.d_w_k", g.d_w_k), footprint_of("g.d_w_v", g.d_w_v),
              footprint_of("g.d_w_o", g.d_w_o), footprint_of("g.d_b_q", g.d_b_q),
              footprint_of("g.d_b_k", g.d_b_k), footprint_of("g.d_b_v", g.d_b_v),
              footprint_of("g.d_b_o", g.d_b_o)},
             {footprint_of("x", x), footprint_of("d_out", d_out), footprint_of("w_q", w.w_q),
              footprint_of("w_k", w.w_k), footprint_of("w_v", w.w_v), footprint_of("w_o", w.w_o),
              footprint_of("b_q", w.b_q), footprint_of("b_k", w.b_k), footprint_of("b_v", w.b_v),
              footprint_of("b_o", w.b_o)});
  if (x.empty()) return;

  // out = heads W_o + b_o: the gradient of the heads, W_o and b_o.
  const tensor_view<T, 3, Space> d_heads = ws.d_heads();
  detail::run(policy, projection_backward_args<T, Space>{
                          ws.heads(), 1, {w.w_o}, {d_out}, d_heads, {g.d_w_o}, {g.d_b_o}});
  // The attention of every head.
  const tensor_view<T, 3, Space> d_qkv = ws.d_qkv();
  const index_t W = d_qkv.extent(2);
  const auto heads = [&](index_t offset, index_t n) {
    return tensor_view<T, 4, Space>{d_qkv.data() + offset, {B, n, T_, D}, {T_ * W, D, W, 1}};
  };
  const attention_shape shape{B, H, Hkv, T_, T_, D, D};
  detail::run(policy,
              attention_backward_args<T, Space>{
                  ws.q(),
                  ws.k(),
                  ws.v(),
                  ws.o(),
                  tensor_view<const T, 4, Space>{d_heads.data(), {B, H, T_, D}, {T_ * C, D, C, 1}},
                  ws.lse(),
                  heads(0, H),
                  heads(C, Hkv),
                  heads(C + Ckv, Hkv),
                  {},
                  shape,
                  mask_spec{opt.causal, opt.window},
                  scale});
  // Q, K, V = x W + b: the gradient of x (summed over the three), the weights and biases.
  const auto part = [&](index_t offset, index_t width) {
    return tensor_view<const T, 3, Space>{d_qkv.data() + offset, {B, T_, width}, {T_ * W, W, 1}};
  };
  detail::run(policy,
              projection_backward_args<T, Space>{x,
                                                 3,
                                                 {w.w_q, w.w_k, w.w_v},
                                                 {part(0, C), part(C, Ckv), part(C + Ckv, Ckv)},
                                                 g.d_x,
                                                 {g.d_w_q, g.d_w_k, g.d_w_v},
                                                 {g.d_b_q, g.d_b_k, g.d_b_v}});
}

}  // namespace attn
