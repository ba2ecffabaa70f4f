#pragma once
/// \file
/// Bad input: every case throws attn::shape_error before anything is written, names the
/// argument, and leaves every output untouched. A body over a backend case C (float): the
/// suite files register it for every backend, attn::cuda included.

#include <functional>
#include <limits>

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
}

}  // namespace attn::test
