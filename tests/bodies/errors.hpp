#pragma once
/// \file
/// Bad input: every case throws attn::shape_error before anything is written, names the
/// argument, and leaves every output untouched. A body over a backend case C (float): the
/// suite files register it for every backend, attn::cuda included.

#include <cmath>
#include <functional>
#include <limits>

#include <attn/ops/merge.hpp>
#include <attn/ops/multi_head.hpp>

#include "../support/testing.hpp"

namespace attn::test {

inline constexpr float sentinel = 42.0f;

/// Well-formed arguments (B=2, H=3, Tq=7, Tk=9, D=8, Dv=5, d_model=12, E=6) in oversized
/// buffers, so a wrong extent can never read out of bounds; outputs start as `sentinel`.
struct bad_args {
  std::vector<float> in = std::vector<float>(8192, 0.5f);
  std::vector<float> out = std::vector<float>(8192, sentinel);
  std::vector<float> lse_buf = std::vector<float>(8192, sentinel);
  std::vector<float> bias = std::vector<float>(12, 0.1f);

  template <int R>
  tensor_view<const float, R> in_view(const dims<R>& d) const {
    return {in.data(), d};
  }
  template <int R>
  tensor_view<float, R> out_view(const dims<R>& d) {
    return {out.data(), d};
  }
  auto q() const { return in_view<4>({2, 3, 7, 8}); }
  auto k() const { return in_view<4>({2, 3, 9, 8}); }
  auto v() const { return in_view<4>({2, 3, 9, 5}); }
  auto p() const { return in_view<4>({2, 3, 7, 9}); }
  auto o() { return out_view<4>({2, 3, 7, 5}); }
  auto o_in() const { return in_view<4>({2, 3, 7, 5}); }
  auto lse_in(const dims<3>& d = {2, 3, 7}) const { return in_view<3>(d); }
  /// Gradient outputs in their own regions of `out` (q-, k-, v-shaped).
  auto dq(const dims<4>& d = {2, 3, 7, 8}) { return tensor_view<float, 4>{out.data(), d}; }
  auto dk(const dims<4>& d = {2, 3, 9, 8}) { return tensor_view<float, 4>{out.data() + 2048, d}; }
  auto dv(const dims<4>& d = {2, 3, 9, 5}) { return tensor_view<float, 4>{out.data() + 4096, d}; }
  auto s() { return out_view<4>({2, 3, 7, 9}); }
  tensor_view<float, 3> lse(const dims<3>& d = {2, 3, 7}) { return {lse_buf.data(), d}; }
  auto x() const { return in_view<3>({2, 7, 12}); }
  auto w() const { return in_view<2>({12, 6}); }
  auto y() { return out_view<3>({2, 7, 6}); }
  auto dy() const { return in_view<3>({2, 7, 6}); }
  auto wsq() const { return in_view<2>({12, 12}); }
  /// An input view over the output buffer, `offset` elements in: the overlap cases.
  template <int R>
  tensor_view<const float, R> in_out(const dims<R>& d, index_t offset = 0) const {
    return {out.data() + offset, d};
  }
  auto out3() { return out_view<3>({2, 7, 12}); }
  mha_weights<float> mha() const { return {wsq(), wsq(), wsq(), wsq(), {}, {}, {}, {}, 3}; }

  bool untouched() const {
    for (float f : out)
      if (f != sentinel) return false;
    for (float f : lse_buf)
      if (f != sentinel) return false;
    return true;
  }
};

struct bad_case {
  const char* name;
  const char* expect_in_message;  // the argument the message must name
  std::function<void(bad_args&)> call;
};

#define ATTN_BAD(name, arg, ...) \
  bad_case {                     \
    name, arg, [](bad_args& a) { \
      const Policy pol{};        \
      (void)a;                   \
      __VA_ARGS__;               \
    }                            \
  }

/// The bad calls, made with Policy.
template <class Policy>
std::vector<bad_case> bad_cases() {
  using F4 = tensor_view<const float, 4>;
  return {
    // attention_backward
    ATTN_BAD("bwd_k_dim", "k.D",
             attention_backward(pol, a.q(), a.in_view<4>({2, 3, 9, 4}), a.v(), a.o_in(), a.lse_in(),
                                a.o_in(), a.dq(), a.dk(), a.dv())),
        ATTN_BAD("bwd_v_rows", "v.Tk",
                 attention_backward(pol, a.q(), a.k(), a.in_view<4>({2, 3, 8, 5}), a.o_in(),
                                    a.lse_in(), a.o_in(), a.dq(), a.dk(), a.dv())),
        ATTN_BAD("bwd_o_dim", "o.Dv",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.in_view<4>({2, 3, 7, 4}),
                                    a.lse_in(), a.o_in(), a.dq(), a.dk(), a.dv())),
        ATTN_BAD("bwd_d_o_rows", "d_o.Tq",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.lse_in(),
                                    a.in_view<4>({2, 3, 6, 5}), a.dq(), a.dk(), a.dv())),
        ATTN_BAD("bwd_lse_rows", "lse.Tq",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.lse_in({2, 3, 6}),
                                    a.o_in(), a.dq(), a.dk(), a.dv())),
        ATTN_BAD("bwd_null_lse", "lse",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(),
                                    tensor_view<const float, 3>{nullptr, {2, 3, 7}}, a.o_in(),
                                    a.dq(), a.dk(), a.dv())),
        ATTN_BAD("bwd_dq_shape", "dq",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.lse_in(), a.o_in(),
                                    a.dq({2, 3, 7, 7}), a.dk(), a.dv())),
        ATTN_BAD("bwd_dk_shape", "dk",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.lse_in(), a.o_in(),
                                    a.dq(), a.dk({2, 3, 8, 8}), a.dv())),
        ATTN_BAD("bwd_dv_shape", "dv",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.lse_in(), a.o_in(),
                                    a.dq(), a.dk(), a.dv({2, 3, 9, 6}))),
        ATTN_BAD(
            "bwd_dq_zero_stride", "dq is an output",
            attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.lse_in(), a.o_in(),
                               tensor_view<float, 4>{a.out.data(), {2, 3, 7, 8}, {168, 56, 0, 1}},
                               a.dk(), a.dv())),
        ATTN_BAD("bwd_nan_scale", "scale",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.lse_in(), a.o_in(),
                                    a.dq(), a.dk(), a.dv(), {.scale = std::nan("")})),
        ATTN_BAD("bwd_heads_not_dividing", "k.H",
                 attention_backward(pol, a.q(), a.in_view<4>({2, 2, 9, 8}),
                                    a.in_view<4>({2, 2, 9, 5}), a.o_in(), a.lse_in(), a.o_in(),
                                    a.dq(), a.dk({2, 2, 9, 8}), a.dv({2, 2, 9, 5}))),
        ATTN_BAD("bwd_negative_window", "window",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.lse_in(), a.o_in(),
                                    a.dq(), a.dk(), a.dv(), {.window = -2})),
        // multi_head_attention_backward: a forward into a workspace of its own first
        ATTN_BAD("mha_bwd_fresh_workspace", "ws holds", mha_workspace<float> ws;
                 multi_head_attention_backward(pol, a.x(), a.mha(), ws, a.x(),
                                               mha_gradients<float>{a.out3()})),
        ATTN_BAD("mha_bwd_other_options", "opt differs", mha_workspace<float> ws;
                 std::vector<float> y(2 * 7 * 12); multi_head_attention(
                     pol, a.x(), a.mha(), tensor_view<float, 3>{y.data(), {2, 7, 12}},
                     {.causal = true}, ws);
                 multi_head_attention_backward(pol, a.x(), a.mha(), ws, a.x(),
                                               mha_gradients<float>{a.out3()}, {.causal = false})),
        ATTN_BAD("mha_bwd_d_out_shape", "d_out", mha_workspace<float> ws; std::vector<float> y(168);
                 multi_head_attention(pol, a.x(), a.mha(),
                                      tensor_view<float, 3>{y.data(), {2, 7, 12}}, {}, ws);
                 multi_head_attention_backward(pol, a.x(), a.mha(), ws, a.in_view<3>({2, 6, 12}),
                                               mha_gradients<float>{a.out3()})),
        ATTN_BAD("mha_bwd_d_w_q_shape", "g.d_w_q", mha_workspace<float> ws;
                 std::vector<float> y(168); multi_head_attention(
                     pol, a.x(), a.mha(), tensor_view<float, 3>{y.data(), {2, 7, 12}}, {}, ws);
                 mha_gradients<float> g; g.d_w_q = tensor_view<float, 2>{a.out.data(), {12, 11}};
                 multi_head_attention_backward(pol, a.x(), a.mha(), ws, a.x(), g)),
        ATTN_BAD("mha_bwd_d_b_v_size", "g.d_b_v", mha_workspace<float> ws;
                 std::vector<float> y(168); multi_head_attention(
                     pol, a.x(), a.mha(), tensor_view<float, 3>{y.data(), {2, 7, 12}}, {}, ws);
                 mha_gradients<float> g; g.d_b_v = tensor_view<float, 1>{a.out.data(), {11}};
                 multi_head_attention_backward(pol, a.x(), a.mha(), ws, a.x(), g)),
        // project_backward
        ATTN_BAD("proj_bwd_w_rows", "w.C",
                 project_backward(pol, a.x(), a.in_view<2>({11, 6}), a.dy(), a.out3())),
        ATTN_BAD("proj_bwd_dy_cols", "dy.E",
                 project_backward(pol, a.x(), a.w(), a.in_view<3>({2, 7, 5}), a.out3())),
        ATTN_BAD("proj_bwd_dx_shape", "dx",
                 project_backward(pol, a.x(), a.w(), a.dy(), a.out_view<3>({2, 7, 11}))),
        ATTN_BAD("proj_bwd_dw_shape", "dw",
                 project_backward(pol, a.x(), a.w(), a.dy(), {},
                                  tensor_view<float, 2>{a.out.data(), {12, 5}})),
        ATTN_BAD("proj_bwd_db_size", "db",
                 project_backward(pol, a.x(), a.w(), a.dy(), {}, {},
                                  tensor_view<float, 1>{a.out.data(), {5}})),
        // the stage backwards
        ATTN_BAD(
            "scores_bwd_ds_cols", "ds.Tk",
            scaled_scores_backward(pol, a.q(), a.k(), a.in_view<4>({2, 3, 7, 8}), a.dq(), a.dk())),
        ATTN_BAD("scores_bwd_dk_shape", "dk",
                 scaled_scores_backward(pol, a.q(), a.k(), a.p(), a.dq(), a.dk({2, 3, 9, 7}))),
        ATTN_BAD("softmax_bwd_dp_shape", "dp",
                 softmax_rows_backward(pol, a.p(), a.in_view<4>({2, 3, 7, 8}), a.s())),
        ATTN_BAD("softmax_bwd_ds_shape", "ds",
                 softmax_rows_backward(pol, a.p(), a.p(), a.out_view<4>({2, 3, 6, 9}))),
        ATTN_BAD(
            "values_bwd_d_o_dim", "d_o.Dv",
            weighted_values_backward(pol, a.p(), a.v(), a.in_view<4>({2, 3, 7, 4}), a.s(), a.dv())),
        ATTN_BAD("values_bwd_dp_shape", "dp",
                 weighted_values_backward(pol, a.p(), a.v(), a.o_in(), a.out_view<4>({2, 3, 7, 8}),
                                          a.dv())),
        ATTN_BAD("mask_bwd_null", "ds",
                 causal_mask_backward(pol, tensor_view<float, 4>{nullptr, {1, 1, 2, 2}})),

        // scaled_scores
        ATTN_BAD("scores_k_batch", "k.B",
                 scaled_scores(pol, a.q(), a.in_view<4>({1, 3, 9, 8}), a.s())),
        ATTN_BAD("scores_k_heads", "k.H",
                 scaled_scores(pol, a.q(), a.in_view<4>({2, 2, 9, 8}), a.s())),
        ATTN_BAD("scores_k_dim", "k.D",
                 scaled_scores(pol, a.q(), a.in_view<4>({2, 3, 9, 7}), a.s())),
        ATTN_BAD("scores_s_batch", "s.B",
                 scaled_scores(pol, a.q(), a.k(), a.out_view<4>({1, 3, 7, 9}))),
        ATTN_BAD("scores_s_heads", "s.H",
                 scaled_scores(pol, a.q(), a.k(), a.out_view<4>({2, 1, 7, 9}))),
        ATTN_BAD("scores_s_rows", "s.Tq",
                 scaled_scores(pol, a.q(), a.k(), a.out_view<4>({2, 3, 8, 9}))),
        ATTN_BAD("scores_s_cols", "s.Tk",
                 scaled_scores(pol, a.q(), a.k(), a.out_view<4>({2, 3, 7, 7}))),
        ATTN_BAD("scores_null_q", "q", scaled_scores(pol, F4{nullptr, {2, 3, 7, 8}}, a.k(), a.s())),
        ATTN_BAD("scores_null_s", "s",
                 scaled_scores(pol, a.q(), a.k(), tensor_view<float, 4>{nullptr, {2, 3, 7, 9}})),
        ATTN_BAD("scores_nan_scale", "scale",
                 scaled_scores(pol, a.q(), a.k(), a.s(), std::nan(""))),
        ATTN_BAD("scores_inf_scale", "scale", scaled_scores(pol, a.q(), a.k(), a.s(), INFINITY)),
        ATTN_BAD("scores_zero_dim", "q.D",
                 scaled_scores(pol, a.in_view<4>({2, 3, 7, 0}), a.in_view<4>({2, 3, 9, 0}), a.s())),
        ATTN_BAD("scores_negative_extent", "q extent",
                 scaled_scores(pol, a.in_view<4>({2, 3, -7, 8}), a.k(), a.s())),
        ATTN_BAD("scores_negative_stride", "k stride",
                 scaled_scores(pol, a.q(), F4{a.in.data() + 4000, {2, 3, 9, 8}, {216, 72, -8, 1}},
                               a.s())),
        ATTN_BAD("scores_zero_output_stride", "s is an output",
                 scaled_scores(pol, a.q(), a.k(),
                               tensor_view<float, 4>{a.out.data(), {2, 3, 7, 9}, {189, 63, 0, 1}})),
        // causal_mask, softmax_rows
        ATTN_BAD("mask_null", "s", causal_mask(pol, tensor_view<float, 4>{nullptr, {1, 1, 2, 2}})),
        ATTN_BAD("softmax_null", "s",
                 softmax_rows(pol, tensor_view<float, 4>{nullptr, {1, 1, 2, 2}})),
        ATTN_BAD("softmax_negative_extent", "s extent",
                 softmax_rows(pol, a.out_view<4>({1, 1, 2, -2}))),
        // weighted_values
        ATTN_BAD("values_rows", "v.Tk",
                 weighted_values(pol, a.p(), a.in_view<4>({2, 3, 8, 5}), a.o())),
        ATTN_BAD("values_batch", "v.B",
                 weighted_values(pol, a.p(), a.in_view<4>({3, 3, 9, 5}), a.o())),
        ATTN_BAD("values_o_dim", "o.Dv",
                 weighted_values(pol, a.p(), a.v(), a.out_view<4>({2, 3, 7, 4}))),
        ATTN_BAD("values_o_rows", "o.Tq",
                 weighted_values(pol, a.p(), a.v(), a.out_view<4>({2, 3, 6, 5}))),
        ATTN_BAD("values_o_heads", "o.H",
                 weighted_values(pol, a.p(), a.v(), a.out_view<4>({2, 2, 7, 5}))),
        // attention
        ATTN_BAD("attention_k_dim", "k.D",
                 attention(pol, a.q(), a.in_view<4>({2, 3, 9, 4}), a.v(), a.o())),
        ATTN_BAD("attention_v_rows", "v.Tk",
                 attention(pol, a.q(), a.k(), a.in_view<4>({2, 3, 8, 5}), a.o())),
        ATTN_BAD("attention_v_heads", "v.H",
                 attention(pol, a.q(), a.k(), a.in_view<4>({2, 1, 9, 5}), a.o())),
        ATTN_BAD("attention_o_dim", "o.Dv",
                 attention(pol, a.q(), a.k(), a.v(), a.out_view<4>({2, 3, 7, 8}))),
        ATTN_BAD("attention_o_rows", "o.Tq",
                 attention(pol, a.q(), a.k(), a.v(), a.out_view<4>({2, 3, 9, 5}))),
        ATTN_BAD("attention_o_batch", "o.B",
                 attention(pol, a.q(), a.k(), a.v(), a.out_view<4>({1, 3, 7, 5}))),
        ATTN_BAD("attention_lse_rows", "lse.Tq",
                 attention(pol, a.q(), a.k(), a.v(), a.o(), a.lse({2, 3, 9}))),
        ATTN_BAD("attention_lse_heads", "lse.H",
                 attention(pol, a.q(), a.k(), a.v(), a.o(), a.lse({2, 1, 7}))),
        ATTN_BAD(
            "attention_null_lse", "lse",
            attention(pol, a.q(), a.k(), a.v(), a.o(), tensor_view<float, 3>{nullptr, {2, 3, 7}})),
        ATTN_BAD("attention_null_v", "v",
                 attention(pol, a.q(), a.k(), F4{nullptr, {2, 3, 9, 5}}, a.o())),
        ATTN_BAD("attention_nan_scale", "scale",
                 attention(pol, a.q(), a.k(), a.v(), a.o(), {.scale = std::nan("")})),
        // project, project_qkv
        ATTN_BAD("project_w_rows", "w.C", project(pol, a.x(), a.in_view<2>({11, 6}), a.y())),
        ATTN_BAD("project_y_cols", "y.E", project(pol, a.x(), a.w(), a.out_view<3>({2, 7, 5}))),
        ATTN_BAD("project_y_rows", "y.T", project(pol, a.x(), a.w(), a.out_view<3>({2, 6, 6}))),
        ATTN_BAD("project_y_batch", "y.B", project(pol, a.x(), a.w(), a.out_view<3>({3, 7, 6}))),
        ATTN_BAD(
            "project_bias_size", "bias",
            project(pol, a.x(), a.w(), a.y(), tensor_view<const float, 1>(a.bias.data(), {5}))),
        ATTN_BAD("project_null_x", "x",
                 project(pol, tensor_view<const float, 3>{nullptr, {2, 7, 12}}, a.w(), a.y())),
        ATTN_BAD("qkv_w_k_cols", "w_k.E",
                 project_qkv(pol, a.x(), a.w(), a.in_view<2>({12, 5}), a.w(), a.y(), a.y(), a.y())),
        ATTN_BAD("qkv_w_v_rows", "w_v.C",
                 project_qkv(pol, a.x(), a.w(), a.w(), a.in_view<2>({13, 6}), a.y(), a.y(), a.y())),
        ATTN_BAD(
            "qkv_k_shape", "k.T",
            project_qkv(pol, a.x(), a.w(), a.w(), a.w(), a.y(), a.out_view<3>({2, 8, 6}), a.y())),
        ATTN_BAD("qkv_b_v_size", "b_v",
                 project_qkv(pol, a.x(), a.w(), a.w(), a.w(), a.y(), a.y(), a.y(), {}, {},
                             tensor_view<const float, 1>(a.bias.data(), {12}))),
        // multi_head_attention
        ATTN_BAD("mha_zero_heads", "heads", auto m = a.mha(); m.heads = 0;
                 multi_head_attention(pol, a.x(), m, a.out3())),
        ATTN_BAD("mha_heads_not_dividing", "divisible", auto m = a.mha(); m.heads = 5;
                 multi_head_attention(pol, a.x(), m, a.out3())),
        ATTN_BAD("mha_w_o_shape", "w_o", auto m = a.mha(); m.w_o = a.in_view<2>({12, 11});
                 multi_head_attention(pol, a.x(), m, a.out3())),
        ATTN_BAD("mha_w_q_rows", "w_q", auto m = a.mha(); m.w_q = a.in_view<2>({10, 12});
                 multi_head_attention(pol, a.x(), m, a.out3())),
        ATTN_BAD("mha_null_w_k", "w_k", auto m = a.mha(); m.w_k = {nullptr, {12, 12}};
                 multi_head_attention(pol, a.x(), m, a.out3())),
        ATTN_BAD("mha_b_o_size", "b_o", auto m = a.mha();
                 m.b_o = tensor_view<const float, 1>(a.bias.data(), {6});
                 multi_head_attention(pol, a.x(), m, a.out3())),
        ATTN_BAD("mha_out_shape", "out.d_model",
                 multi_head_attention(pol, a.x(), a.mha(), a.out_view<3>({2, 7, 6}))),
        ATTN_BAD("mha_out_rows", "out.T",
                 multi_head_attention(pol, a.x(), a.mha(), a.out_view<3>({2, 8, 12}))),
        // Overlap: an output sharing memory with an input or another output, or reaching one
        // element from two indices.
        ATTN_BAD("overlap_attention_o_v", "o overlaps v",
                 attention(pol, a.q(), a.k(), a.in_out<4>({2, 3, 9, 5}), a.o())),
        ATTN_BAD("overlap_attention_o_k", "o overlaps k",
                 attention(pol, a.q(), a.in_out<4>({2, 3, 9, 8}, 200), a.v(), a.o())),
        ATTN_BAD("overlap_attention_o_q_tail", "o overlaps q",
                 attention(pol, a.in_out<4>({2, 3, 7, 8}, 209), a.k(), a.v(), a.o())),
        ATTN_BAD("overlap_attention_lse_in_o", "lse overlaps o",
                 attention(pol, a.q(), a.k(), a.v(), a.o(),
                           tensor_view<float, 3>{a.out.data() + 17, {2, 3, 7}})),
        ATTN_BAD("overlap_attention_o_strides", "map two indices",
                 attention(pol, a.q(), a.k(), a.v(),
                           tensor_view<float, 4>{a.out.data(), {2, 3, 7, 5}, {105, 35, 3, 1}})),
        ATTN_BAD("overlap_attention_o_heads_rows", "map two indices",
                 attention(pol, a.q(), a.k(), a.v(),
                           tensor_view<float, 4>{a.out.data(), {2, 3, 7, 5}, {200, 5, 10, 1}})),
        ATTN_BAD(
            "overlap_softmax_equal_strides", "map two indices",
            softmax_rows(pol, tensor_view<float, 4>{a.out.data(), {2, 3, 7, 9}, {4, 4, 4, 4}})),
        ATTN_BAD("overlap_attention_lse_strides", "map two indices",
                 attention(pol, a.q(), a.k(), a.v(), a.o(),
                           tensor_view<float, 3>{a.lse_buf.data(), {2, 3, 7}, {6, 2, 1}})),
        ATTN_BAD("overlap_scores_s_q", "s overlaps q",
                 scaled_scores(pol, a.in_out<4>({2, 3, 7, 8}, 300), a.k(), a.s())),
        ATTN_BAD("overlap_scores_s_k", "s overlaps k",
                 scaled_scores(pol, a.q(), a.in_out<4>({2, 3, 9, 8}), a.s())),
        ATTN_BAD("overlap_scores_s_strides", "map two indices",
                 scaled_scores(pol, a.q(), a.k(),
                               tensor_view<float, 4>{a.out.data(), {2, 3, 7, 9}, {189, 63, 8, 1}})),
        ATTN_BAD("overlap_weighted_o_p", "o overlaps p",
                 weighted_values(pol, a.in_out<4>({2, 3, 7, 9}, 100), a.v(), a.o())),
        ATTN_BAD("overlap_weighted_o_v", "o overlaps v",
                 weighted_values(pol, a.p(), a.in_out<4>({2, 3, 9, 5}, 1), a.o())),
        ATTN_BAD("overlap_project_y_x", "y overlaps x",
                 project(pol, a.in_out<3>({2, 7, 12}), a.w(), a.y())),
        ATTN_BAD("overlap_project_y_w", "y overlaps w",
                 project(pol, a.x(), a.in_out<2>({12, 6}, 83), a.y())),
        ATTN_BAD("overlap_project_y_bias", "y overlaps bias",
                 project(pol, a.x(), a.w(), a.y(), a.in_out<1>({6}, 40))),
        ATTN_BAD(
            "overlap_project_y_strides", "map two indices",
            project(pol, a.x(), a.w(), tensor_view<float, 3>{a.out.data(), {2, 7, 6}, {42, 5, 1}})),
        ATTN_BAD("overlap_qkv_one_buffer", "k overlaps q",
                 project_qkv(pol, a.x(), a.w(), a.w(), a.w(), a.y(), a.y(), a.y())),
        ATTN_BAD("overlap_qkv_v_shifted", "v overlaps k",
                 project_qkv(pol, a.x(), a.w(), a.w(), a.w(), a.y(),
                             tensor_view<float, 3>{a.out.data() + 100, {2, 7, 6}},
                             tensor_view<float, 3>{a.out.data() + 150, {2, 7, 6}})),
        ATTN_BAD("overlap_qkv_q_x", "q overlaps x",
                 project_qkv(pol, a.in_out<3>({2, 7, 12}, 10), a.w(), a.w(), a.w(), a.y(),
                             tensor_view<float, 3>{a.out.data() + 1000, {2, 7, 6}},
                             tensor_view<float, 3>{a.out.data() + 2000, {2, 7, 6}})),
        ATTN_BAD("overlap_softmax_bwd_ds_p", "ds overlaps p",
                 softmax_rows_backward(pol, a.in_out<4>({2, 3, 7, 9}), a.p(), a.s())),
        ATTN_BAD("overlap_softmax_bwd_ds_dp_shifted", "ds overlaps dp",
                 softmax_rows_backward(pol, a.p(), a.in_out<4>({2, 3, 7, 9}, 1), a.s())),
        ATTN_BAD("overlap_weighted_bwd_dp_d_o", "dp overlaps d_o",
                 weighted_values_backward(pol, a.p(), a.v(), a.in_out<4>({2, 3, 7, 5}, 50), a.s(),
                                          a.dv())),
        ATTN_BAD("overlap_weighted_bwd_dv_v", "dv overlaps v",
                 weighted_values_backward(pol, a.p(), a.in_out<4>({2, 3, 9, 5}, 4100), a.o_in(),
                                          a.s(), a.dv())),
        ATTN_BAD("overlap_weighted_bwd_dv_dp", "dv overlaps dp",
                 weighted_values_backward(pol, a.p(), a.v(), a.o_in(), a.s(),
                                          tensor_view<float, 4>{a.out.data() + 300, {2, 3, 9, 5}})),
        ATTN_BAD(
            "overlap_scores_bwd_dq_ds", "dq overlaps ds",
            scaled_scores_backward(pol, a.q(), a.k(), a.in_out<4>({2, 3, 7, 9}), a.dq(), a.dk())),
        ATTN_BAD("overlap_scores_bwd_dk_dq", "dk overlaps dq",
                 scaled_scores_backward(pol, a.q(), a.k(), a.p(), a.dq(),
                                        tensor_view<float, 4>{a.out.data() + 330, {2, 3, 9, 8}})),
        ATTN_BAD(
            "overlap_bwd_dq_dk", "dk overlaps dq",
            attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.lse_in(), a.o_in(), a.dq(),
                               tensor_view<float, 4>{a.out.data() + 8, {2, 3, 9, 8}}, a.dv())),
        ATTN_BAD("overlap_bwd_dv_o", "dv overlaps o",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.in_out<4>({2, 3, 7, 5}, 4200),
                                    a.lse_in(), a.o_in(), a.dq(), a.dk(), a.dv())),
        ATTN_BAD(
            "overlap_bwd_dk_lse", "dk overlaps lse",
            attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.in_out<3>({2, 3, 7}, 2100),
                               a.o_in(), a.dq(), a.dk(), a.dv())),
        ATTN_BAD("overlap_bwd_dq_d_o", "dq overlaps d_o",
                 attention_backward(pol, a.q(), a.k(), a.v(), a.o_in(), a.lse_in(),
                                    a.in_out<4>({2, 3, 7, 5}, 333), a.dq(), a.dk(), a.dv())),
        ATTN_BAD("overlap_project_bwd_dx_dy", "dx overlaps dy",
                 project_backward(pol, a.x(), a.w(), a.in_out<3>({2, 7, 6}, 7), a.out3())),
        ATTN_BAD("overlap_project_bwd_dw_x", "dw overlaps x",
                 project_backward(pol, a.in_out<3>({2, 7, 12}, 5000), a.w(), a.dy(), {},
                                  tensor_view<float, 2>{a.out.data() + 5100, {12, 6}})),
        ATTN_BAD("overlap_project_bwd_db_dw", "db overlaps dw",
                 project_backward(pol, a.x(), a.w(), a.dy(), {},
                                  tensor_view<float, 2>{a.out.data(), {12, 6}},
                                  tensor_view<float, 1>{a.out.data() + 71, {6}})),
        ATTN_BAD("overlap_merge_o_o_b_shifted", "o overlaps o_b",
                 merge_attention(pol, a.o_in(), a.lse_in(), a.in_out<4>({2, 3, 7, 5}, 5),
                                 a.lse_in(), a.o())),
        ATTN_BAD(
            "overlap_merge_lse_o_a", "lse overlaps o_a",
            merge_attention(pol, a.in_out<4>({2, 3, 7, 5}, 3000), a.lse_in(), a.o_in(), a.lse_in(),
                            a.o(), tensor_view<float, 3>{a.out.data() + 3100, {2, 3, 7}})),
        ATTN_BAD("overlap_mha_out_x", "out overlaps x",
                 multi_head_attention(pol, a.in_out<3>({2, 7, 12}, 100), a.mha(), a.out3())),
        ATTN_BAD("overlap_mha_out_w_o", "out overlaps w_o", auto m = a.mha();
                 m.w_o = a.in_out<2>({12, 12}, 60); multi_head_attention(pol, a.x(), m, a.out3())),
  };
}
#undef ATTN_BAD

template <class C>
void throws_shape_error_before_writing_anything(const bad_case& c) {
  bad_args a;
  try {
    c.call(a);
    ADD_FAILURE() << "no exception";
  } catch (const shape_error& e) {
    EXPECT_NE(std::string(e.what()).find(c.expect_in_message), std::string::npos)
        << "message: " << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("attn::", 0), 0u) << "message: " << e.what();
  }
  EXPECT_TRUE(a.untouched());
}

template <class C>
void empty_problems_are_valid_and_do_nothing() {
  const auto pol = C::policy();
  tensor_view<const float, 4> q{nullptr, {0, 3, 7, 8}}, k{nullptr, {0, 3, 9, 8}},
      v{nullptr, {0, 3, 9, 5}};
  tensor_view<float, 4> o{nullptr, {0, 3, 7, 5}};
  EXPECT_NO_THROW(attention(pol, q, k, v, o));
  EXPECT_NO_THROW(attention(pol, q, k, v, o, {.causal = true}));
  // A zero extent anywhere, not only outermost: valid, and the well-defined empty result.
  host_tensor<float, 4> q1({2, 3, 7, 8}), k1({2, 3, 9, 8});
  host_tensor<float, 4> v0({2, 3, 9, 0}), o0({2, 3, 7, 0});
  host_tensor<float, 3> lse({2, 3, 7}), lse_ref({2, 3, 7});
  for (index_t i = 0; i < q1.size(); ++i) q1.data()[i] = std::cos(0.1f * float(i));
  for (index_t i = 0; i < k1.size(); ++i) k1.data()[i] = std::sin(0.2f * float(i));
  EXPECT_NO_THROW(attention(pol, q1.view(), k1.view(), v0.view(), o0.view(), lse.view()));
  host_tensor<float, 4> v1({2, 3, 9, 1}), o1({2, 3, 7, 1});
  attention(pol, q1.view(), k1.view(), v1.view(), o1.view(), lse_ref.view());
  for (index_t i = 0; i < lse.size(); ++i)  // Dv = 0 still writes every row's lse
    EXPECT_NEAR(lse.data()[i], lse_ref.data()[i], 1e-5f * (1 + std::abs(lse_ref.data()[i])));
  host_tensor<float, 4> q_h0({2, 0, 7, 8}), k_h0({2, 0, 9, 8}), v_h0({2, 0, 9, 5}),
      o_h0({2, 0, 7, 5});
  EXPECT_NO_THROW(attention(pol, q_h0.view(), k_h0.view(), v_h0.view(), o_h0.view()));
  host_tensor<float, 4> k_t0({2, 3, 0, 8}), v_t0({2, 3, 0, 5}), o_t0({2, 3, 7, 5}),
      s_t0({2, 3, 7, 0});
  for (index_t i = 0; i < o_t0.size(); ++i) o_t0.data()[i] = 42;
  attention(pol, q1.view(), k_t0.view(), v_t0.view(), o_t0.view(), lse.view(), {.causal = true});
  for (index_t i = 0; i < o_t0.size(); ++i) EXPECT_EQ(o_t0.data()[i], 0.0f);     // no key: zeros
  for (index_t i = 0; i < lse.size(); ++i) EXPECT_EQ(lse.data()[i], -INFINITY);  // and -inf
  EXPECT_NO_THROW(scaled_scores(pol, q1.view(), k_t0.view(), s_t0.view()));
  EXPECT_NO_THROW(softmax_rows(pol, s_t0.view()));
  host_tensor<float, 3> x_t0({2, 0, 12}), out_t0({2, 0, 12});
  host_tensor<float, 2> wsq({12, 12});
  const mha_weights<float> m{wsq.view(), wsq.view(), wsq.view(), wsq.view(), {}, {}, {}, {}, 3};
  EXPECT_NO_THROW(multi_head_attention(pol, x_t0.view(), m, out_t0.view()));
  // attention_backward without keys: dq = 0 (found by tests/fuzz).
  host_tensor<float, 4> dq_t0({2, 3, 7, 8}), d_o_t0({2, 3, 7, 5}), dk_t0({2, 3, 0, 8}),
      dv_t0({2, 3, 0, 5});
  for (index_t i = 0; i < dq_t0.size(); ++i) dq_t0.data()[i] = 42;
  attention_backward(pol, q1.view(), k_t0.view(), v_t0.view(), o_t0.view(), lse.view(),
                     d_o_t0.view(), dq_t0.view(), dk_t0.view(), dv_t0.view());
  for (index_t i = 0; i < dq_t0.size(); ++i) EXPECT_EQ(dq_t0.data()[i], 0.0f);
  // merge_attention with Dv = 0 still merges the lse (found by tests/fuzz).
  host_tensor<float, 4> m0({2, 3, 7, 0});
  host_tensor<float, 3> la({2, 3, 7}), lb({2, 3, 7}), lm({2, 3, 7});
  for (index_t i = 0; i < la.size(); ++i) la.data()[i] = 0.5f, lb.data()[i] = -1.0f;
  merge_attention(pol, m0.view(), la.view(), m0.view(), lb.view(), m0.view(), lm.view());
  for (index_t i = 0; i < lm.size(); ++i)
    EXPECT_NEAR(lm.data()[i], 0.5 + std::log1p(std::exp(-1.5)), 1e-6);
}

/// What the overlap rules allow: inputs sharing memory, outputs interleaved in one buffer
/// without sharing an element, and the documented in-place uses, each equal to the same call
/// on separate buffers.
template <class C>
void disjoint_and_in_place_uses_are_accepted() {
  const auto pol = C::policy();
  const auto fill = [](auto& t, float phase) {
    for (index_t i = 0; i < t.size(); ++i) t.data()[i] = std::sin(0.37f * float(i) + phase);
  };
  const auto same = [](const float* a, const float* b, index_t n) {
    for (index_t i = 0; i < n; ++i)
      if (a[i] != b[i]) return false;
    return true;
  };
  // project_qkv into the column blocks of one [B, T, 3E] buffer.
  host_tensor<float, 3> x({2, 7, 12});
  host_tensor<float, 2> w({12, 6});
  fill(x, 0), fill(w, 1);
  host_tensor<float, 3> fused({2, 7, 18}), y({2, 7, 6});
  const auto block = [&](index_t n) {
    return tensor_view<float, 3>{fused.data() + 6 * n, {2, 7, 6}, {7 * 18, 18, 1}};
  };
  project_qkv(pol, x.view(), w.view(), w.view(), w.view(), block(0), block(1), block(2));
  project(pol, x.view(), w.view(), y.view());
  for (index_t b = 0; b < 2; ++b)
    for (index_t t = 0; t < 7; ++t)
      for (index_t e = 0; e < 6; ++e)
        for (index_t n = 0; n < 3; ++n) EXPECT_EQ(block(n)(b, t, e), y(b, t, e));
  // attention with q, k and v one buffer, o and lse interleaved in one [B, H, Tq, Dv + 1]; then
  // a decode step (4 queries against 1100 keys: two chunks of the CPU's decode kernel) so.
  const auto interleaved = [&](const host_tensor<float, 4>& q, const host_tensor<float, 4>& kv) {
    const index_t Tq = q.extent(2);
    host_tensor<float, 4> both({2, 3, Tq, 9}), o({2, 3, Tq, 8});
    host_tensor<float, 3> lse({2, 3, Tq});
    const tensor_view<float, 4> o_part{both.data(), {2, 3, Tq, 8}, both.view().strides()};
    const tensor_view<float, 3> lse_part{both.data() + 8, {2, 3, Tq}, {3 * Tq * 9, Tq * 9, 9}};
    attention(pol, q.view(), kv.view(), kv.view(), o_part, lse_part, {.causal = true});
    attention(pol, q.view(), kv.view(), kv.view(), o.view(), lse.view(), {.causal = true});
    for (index_t b = 0; b < 2; ++b)
      for (index_t h = 0; h < 3; ++h)
        for (index_t i = 0; i < Tq; ++i) {
          EXPECT_EQ(lse_part(b, h, i), lse(b, h, i));
          for (index_t d = 0; d < 8; ++d) EXPECT_EQ(o_part(b, h, i, d), o(b, h, i, d));
        }
  };
  host_tensor<float, 4> qkv({2, 3, 9, 8}), q_step({2, 3, 4, 8}), cache({2, 3, 1100, 8});
  fill(qkv, 2), fill(q_step, 9), fill(cache, 10);
  interleaved(qkv, qkv);
  interleaved(q_step, cache);
  // softmax_rows_backward with ds the same view as dp.
  host_tensor<float, 4> p({2, 3, 7, 9}), dp({2, 3, 7, 9}), ds({2, 3, 7, 9});
  fill(p, 3), fill(dp, 4);
  softmax_rows(pol, p.view());
  softmax_rows_backward(pol, p.view(), dp.view(), ds.view());
  softmax_rows_backward(pol, p.view(), dp.view(), dp.view());
  EXPECT_TRUE(same(dp.data(), ds.data(), ds.size()));
  // merge_attention into o_a and lse_a.
  host_tensor<float, 4> oa({2, 3, 9, 8}), ob({2, 3, 9, 8}), om({2, 3, 9, 8});
  host_tensor<float, 3> la({2, 3, 9}), lb({2, 3, 9}), lm({2, 3, 9});
  fill(oa, 5), fill(ob, 6), fill(la, 7), fill(lb, 8);
  merge_attention(pol, oa.view(), la.view(), ob.view(), lb.view(), om.view(), lm.view());
  merge_attention(pol, oa.view(), la.view(), ob.view(), lb.view(), oa.view(), la.view());
  EXPECT_TRUE(same(oa.data(), om.data(), om.size()));
  EXPECT_TRUE(same(la.data(), lm.data(), lm.size()));
}

template <class... C>
void register_error_tests(case_list<C...> cases) {
  (
      [&] {
        for (const bad_case& b : bad_cases<typename C::policy_type>())
          register_test(case_list<C>{}, "Errors", b.name, [b](auto c) {
            return [b] { throws_shape_error_before_writing_anything<decltype(c)>(b); };
          });
      }(),
      ...);
  ATTN_REGISTER_TEST(cases, "Errors", "EmptyProblemsDoNothing",
                     empty_problems_are_valid_and_do_nothing);
  ATTN_REGISTER_TEST(cases, "Errors", "DisjointAndInPlaceUsesAccepted",
                     disjoint_and_in_place_uses_are_accepted);
}

}  // namespace attn::test
