#pragma once
/// \file
/// The backward of every stage, of the fused attention and of the multi-head layer on a
/// backend against the reference backward (itself checked against finite differences in
/// tests/gradcheck_test.cpp): bodies over a backend case C (see stages.hpp). Gradients are
/// sums over many terms, so they are compared against the largest reference gradient of each
/// tensor: |got - want| <= tolerance<T>::abs * max|want| + tolerance<T>::rel * |want|.

#include <attn/ops/multi_head.hpp>

#include "../support/testing.hpp"
#include "multi_head.hpp"
#include "stages.hpp"

namespace attn::test {

/// Every element of a gradient within tolerance<T>, scaled by the largest reference gradient.
template <class T, int R, class U>
::testing::AssertionResult close_gradient(const host_tensor<T, R>& got,
                                          const host_tensor<U, R>& want, double factor = 1.0) {
  double largest = 0;
  for (index_t i = 0; i < want.size(); ++i)
    largest = std::max(largest, std::abs(to_double(want.data()[i])));
  return close(got, want, factor * std::max(largest, 1.0));
}

template <class C>
void scores_backward_matches_reference(const shape& s, bool) {
  using T = typename C::value;
  using R = typename C::ref;
  const qkv<C> in(s);
  const host_tensor<T, 4> ds = random<T, 4>({s.B, s.H, s.Tq, s.Tk}, 21);
  host_tensor<T, 4> dq(in.q.extents()), dk(in.k.extents());
  host_tensor<R, 4> rdq(in.q.extents()), rdk(in.k.extents());
  scaled_scores_backward(C::policy(), in.q.view(), in.k.view(), ds.view(), dq.view(), dk.view());
  scaled_scores_backward(reference, in.rq.view(), in.rk.view(), convert<R>(ds).view(), rdq.view(),
                         rdk.view());
  EXPECT_TRUE(close_gradient(dq, rdq)) << "dq";
  EXPECT_TRUE(close_gradient(dk, rdk)) << "dk";
}

template <class C>
void softmax_backward_matches_reference(const shape& s, bool causal) {
  using T = typename C::value;
  using R = typename C::ref;
  host_tensor<R, 4> p = random<R, 4>({s.B, s.H, s.Tq, s.Tk}, 22, 3.0);
  if (causal) causal_mask(reference, p.view());
  softmax_rows(reference, p.view());
  const host_tensor<T, 4> pt = convert<T>(p);
  host_tensor<T, 4> dp = random<T, 4>({s.B, s.H, s.Tq, s.Tk}, 23);
  host_tensor<R, 4> rds({s.B, s.H, s.Tq, s.Tk});
  softmax_rows_backward(reference, convert<R>(pt).view(), convert<R>(dp).view(), rds.view());
  if (causal) causal_mask_backward(reference, rds.view());
  softmax_rows_backward(C::policy(), pt.view(), dp.view(), dp.view());  // in place
  if (causal) causal_mask_backward(C::policy(), dp.view());
  EXPECT_TRUE(close_gradient(dp, rds));
}

template <class C>
void weighted_values_backward_matches_reference(const shape& s, bool) {
  using T = typename C::value;
  using R = typename C::ref;
  const qkv<C> in(s);
  const host_tensor<T, 4> p = random<T, 4>({s.B, s.H, s.Tq, s.Tk}, 24, 1.0 / double(s.Tk));
  const host_tensor<T, 4> d_o = random<T, 4>({s.B, s.H, s.Tq, s.Dv}, 25);
  host_tensor<T, 4> dp(p.extents()), dv(in.v.extents());
  host_tensor<R, 4> rdp(p.extents()), rdv(in.v.extents());
  weighted_values_backward(C::policy(), p.view(), in.v.view(), d_o.view(), dp.view(), dv.view());
  weighted_values_backward(reference, convert<R>(p).view(), in.rv.view(), convert<R>(d_o).view(),
                           rdp.view(), rdv.view());
  EXPECT_TRUE(close_gradient(dp, rdp)) << "dp";
  EXPECT_TRUE(close_gradient(dv, rdv)) << "dv";
}

template <class C>
void project_backward_matches_reference(const projection_shape& d) {
  using T = typename C::value;
  using R = typename C::ref;
  const host_tensor<T, 3> x = random<T, 3>({d.B, d.T, d.C}, 26);
  const host_tensor<T, 2> w = random<T, 2>({d.C, d.E}, 27, 1.0 / std::sqrt(double(d.C)));
  const host_tensor<T, 3> dy = random<T, 3>({d.B, d.T, d.E}, 28);
  host_tensor<T, 3> dx(x.extents());
  host_tensor<T, 2> dw(w.extents());
  host_tensor<T, 1> db(dims<1>{d.E});
  host_tensor<R, 3> rdx(x.extents());
  host_tensor<R, 2> rdw(w.extents());
  host_tensor<R, 1> rdb(dims<1>{d.E});
  project_backward(C::policy(), x.view(), w.view(), dy.view(), dx.view(), dw.view(), db.view());
  project_backward(reference, convert<R>(x).view(), convert<R>(w).view(), convert<R>(dy).view(),
                   rdx.view(), rdw.view(), rdb.view());
  EXPECT_TRUE(close_gradient(dx, rdx)) << "dx";
  EXPECT_TRUE(close_gradient(dw, rdw)) << "dw";
  EXPECT_TRUE(close_gradient(db, rdb)) << "db";
  // Skipped gradients stay untouched.
  host_tensor<T, 3> dx2(x.extents());
  project_backward(C::policy(), x.view(), w.view(), dy.view(), dx2.view());
  EXPECT_TRUE(close_gradient(dx2, rdx)) << "dx alone";
}

/// The fused backward of one case against the reference backward, both from the reference
/// forward's o and lse. 16-bit types: FlashAttention's criterion against a naive 16-bit
/// composition is for the forward; gradients are held to 4x their stage tolerance.
template <class C>
void check_attention_backward(const shape& s, const attention_options& opt) {
  using T = typename C::value;
  using R = typename C::ref;
  const qkv<C> in(s);
  host_tensor<R, 4> ro({s.B, s.H, s.Tq, s.Dv});
  host_tensor<accum_t<R>, 3> rlse({s.B, s.H, s.Tq});
  attention(reference, in.rq.view(), in.rk.view(), in.rv.view(), ro.view(), rlse.view(), opt);
  const host_tensor<T, 4> o = convert<T>(ro);
  const host_tensor<accum_t<T>, 3> lse = convert<accum_t<T>>(rlse);
  const host_tensor<T, 4> d_o = random<T, 4>({s.B, s.H, s.Tq, s.Dv}, 29);
  host_tensor<T, 4> dq(in.q.extents()), dk(in.k.extents()), dv(in.v.extents());
  host_tensor<R, 4> rdq(in.q.extents()), rdk(in.k.extents()), rdv(in.v.extents());
  attention_backward(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
                     d_o.view(), dq.view(), dk.view(), dv.view(), opt);
  attention_backward(reference, in.rq.view(), in.rk.view(), in.rv.view(), convert<R>(o).view(),
                     convert<accum_t<R>>(lse).view(), convert<R>(d_o).view(), rdq.view(),
                     rdk.view(), rdv.view(), opt);
  const double factor = std::is_same_v<T, R> ? 1.0 : 4.0;
  EXPECT_TRUE(close_gradient(dq, rdq, factor)) << "dq";
  EXPECT_TRUE(close_gradient(dk, rdk, factor)) << "dk";
  EXPECT_TRUE(close_gradient(dv, rdv, factor)) << "dv";
}

template <class C>
void attention_backward_matches_reference(const shape& s, bool causal) {
  check_attention_backward<C>(s, {.causal = causal});
}

template <class C>
void attention_backward_window_and_scale(const shape& s, bool causal) {
  check_attention_backward<C>(s, {.causal = causal, .window = 5});
  check_attention_backward<C>(s, {.causal = causal, .scale = 0.3});
}

/// The stage backwards composed (scores -> mask -> softmax -> weighted values, backwards)
/// give the fused backward.
template <class C>
void composed_stage_backwards_equal_the_fused_backward(const shape& s, bool causal) {
  using T = typename C::value;
  const qkv<C> in(s);
  const auto pol = C::policy();
  host_tensor<T, 4> p({s.B, s.H, s.Tq, s.Tk}), o({s.B, s.H, s.Tq, s.Dv});
  host_tensor<accum_t<T>, 3> lse({s.B, s.H, s.Tq});
  scaled_scores(pol, in.q.view(), in.k.view(), p.view());
  if (causal) causal_mask(pol, p.view());
  softmax_rows(pol, p.view());
  attention(pol, in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(), {.causal = causal});
  const host_tensor<T, 4> d_o = random<T, 4>({s.B, s.H, s.Tq, s.Dv}, 30);
  host_tensor<T, 4> dp(p.extents()), dv(in.v.extents()), dq(in.q.extents()), dk(in.k.extents());
  weighted_values_backward(pol, p.view(), in.v.view(), d_o.view(), dp.view(), dv.view());
  softmax_rows_backward(pol, p.view(), dp.view(), dp.view());
  if (causal) causal_mask_backward(pol, dp.view());
  scaled_scores_backward(pol, in.q.view(), in.k.view(), dp.view(), dq.view(), dk.view());
  host_tensor<T, 4> fq(in.q.extents()), fk(in.k.extents()), fv(in.v.extents());
  attention_backward(pol, in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(), d_o.view(),
                     fq.view(), fk.view(), fv.view(), {.causal = causal});
  const double factor = std::is_same_v<T, typename C::ref> ? 2.0 : 8.0;
  EXPECT_TRUE(close_gradient(fq, dq, factor)) << "dq";
  EXPECT_TRUE(close_gradient(fk, dk, factor)) << "dk";
  EXPECT_TRUE(close_gradient(fv, dv, factor)) << "dv";
}

/// Rows that see no key get zero gradients, scores up to 1e4 give no NaN, and a NaN or Inf that
/// no gradient depends on reaches none (a tile shared with rows that do not see it multiplies
/// it by nothing, not by 0).
template <class C>
void backward_edge_cases() {
  using T = typename C::value;
  {
    const shape s{2, 2, 70, 5, 8, 8};  // causal: the first 65 queries see no key
    const qkv<C> in(s);
    host_tensor<T, 4> o({s.B, s.H, s.Tq, s.Dv}), dq(in.q.extents()), dk(in.k.extents()),
        dv(in.v.extents());
    host_tensor<accum_t<T>, 3> lse({s.B, s.H, s.Tq});
    attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
              {.causal = true});
    const host_tensor<T, 4> d_o = random<T, 4>(o.extents(), 31);
    attention_backward(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
                       d_o.view(), dq.view(), dk.view(), dv.view(), {.causal = true});
    EXPECT_TRUE(all_finite(dq) && all_finite(dk) && all_finite(dv));
    for (index_t b = 0; b < s.B; ++b)
      for (index_t h = 0; h < s.H; ++h)
        for (index_t i = 0; i < 65; ++i)
          for (index_t d = 0; d < s.D; ++d) ASSERT_EQ(to_double(dq(b, h, i, d)), 0.0) << i;
  }
  {
    const shape s{1, 2, 65, 65, 64, 64};
    const qkv<C> in(s, 1, 300.0);  // scores of magnitude up to ~1e4
    for (bool causal : {false, true}) {
      host_tensor<T, 4> o({s.B, s.H, s.Tq, s.Dv}), dq(in.q.extents()), dk(in.k.extents()),
          dv(in.v.extents());
      host_tensor<accum_t<T>, 3> lse({s.B, s.H, s.Tq});
      attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
                {.causal = causal});
      const host_tensor<T, 4> d_o = random<T, 4>(o.extents(), 32);
      attention_backward(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
                         d_o.view(), dq.view(), dk.view(), dv.view(), {.causal = causal});
      EXPECT_TRUE(all_finite(dq) && all_finite(dk) && all_finite(dv)) << causal;
    }
  }
  {
    // Causal, 75 queries over 10 keys: queries 0..64 see no key, 65..74 keys 0..i-65, so the
    // tile of rows 64.. mixes a row that sees nothing with rows that see part of the keys.
    using R = typename C::ref;
    const shape s{1, 2, 75, 10, 16, 16};
    const T nan = from_double<T>(NAN), inf = from_double<T>(INFINITY);
    const attention_options opt{.causal = true};
    qkv<C> in(s);
    host_tensor<T, 4> d_o = random<T, 4>({s.B, s.H, s.Tq, s.Dv}, 36);
    host_tensor<R, 4> rdq(in.q.extents()), rdk(in.k.extents()), rdv(in.v.extents());
    const auto backward = [&](host_tensor<T, 4>& dq, host_tensor<T, 4>& dk, host_tensor<T, 4>& dv) {
      host_tensor<T, 4> o({s.B, s.H, s.Tq, s.Dv});
      host_tensor<accum_t<T>, 3> lse({s.B, s.H, s.Tq});
      attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(), opt);
      attention_backward(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
                         d_o.view(), dq.view(), dk.view(), dv.view(), opt);
    };
    {  // the clean problem through the reference
      host_tensor<R, 4> ro({s.B, s.H, s.Tq, s.Dv});
      host_tensor<accum_t<R>, 3> rlse({s.B, s.H, s.Tq});
      attention(reference, in.rq.view(), in.rk.view(), in.rv.view(), ro.view(), rlse.view(), opt);
      attention_backward(reference, in.rq.view(), in.rk.view(), in.rv.view(), ro.view(),
                         rlse.view(), convert<R>(d_o).view(), rdq.view(), rdk.view(), rdv.view(),
                         opt);
    }
    for (index_t h = 0; h < s.H; ++h)
      for (index_t i : {3, 64}) {  // q and d_o of rows that see no key
        in.q(0, h, i, 1) = nan;
        d_o(0, h, i, 2) = h ? inf : -inf;
      }
    host_tensor<T, 4> dq(in.q.extents()), dk(in.k.extents()), dv(in.v.extents());
    backward(dq, dk, dv);
    EXPECT_TRUE(all_finite(dq) && all_finite(dk) && all_finite(dv));
    const double factor = std::is_same_v<T, R> ? 1.0 : 4.0;
    EXPECT_TRUE(close_gradient(dq, rdq, factor)) << "dq";
    EXPECT_TRUE(close_gradient(dk, rdk, factor)) << "dk";
    EXPECT_TRUE(close_gradient(dv, rdv, factor)) << "dv";
    // A NaN key that only query 74 sees: dq of the rows before it stays finite; row 74 is NaN.
    in.k(0, 1, 9, 0) = nan;
    backward(dq, dk, dv);
    for (index_t i = 0; i < 74; ++i)
      for (index_t d = 0; d < s.D; ++d) ASSERT_TRUE(std::isfinite(to_double(dq(0, 1, i, d)))) << i;
    EXPECT_TRUE(std::isnan(to_double(dq(0, 1, 74, 0))));
  }
}

/// The layer's backward against the reference layer's backward.
template <class C>
void multi_head_backward_matches_reference(const mha_shape& m) {
  using T = typename C::value;
  using R = typename C::ref;
  const layer<C> l(m.C, m.H, m.Hkv, m.biases, 33);
  const host_tensor<T, 3> x = random<T, 3>({m.B, m.T, m.C}, 34);
  const host_tensor<T, 3> d_out = random<T, 3>({m.B, m.T, m.C}, 35);
  const attention_options opt{.causal = m.causal};
  struct grads {
    host_tensor<T, 3> dx;
    std::vector<host_tensor<T, 2>> dw;
    std::vector<host_tensor<T, 1>> db;
  };
  const auto run = [&](auto pol, const auto& xv, const auto& w, const auto& dout, auto& g,
                       const auto& lw) {
    using U = typename std::remove_cvref_t<decltype(xv)>::value_type;
    host_tensor<U, 3> out(xv.extents());
    mha_workspace<U> ws;
    multi_head_attention(pol, tensor_view<const U, 3>(xv), w, out.view(), opt, ws);
    g.dx = host_tensor<U, 3>(xv.extents());
    for (int n = 0; n < 4; ++n) {
      g.dw.emplace_back(lw[n].extents());
      g.db.emplace_back(dims<1>{m.biases ? lw[n].extent(1) : 0});
    }
    const mha_gradients<U> mg{g.dx.view(),    g.dw[0].view(), g.dw[1].view(),
                              g.dw[2].view(), g.dw[3].view(), g.db[0].view(),
                              g.db[1].view(), g.db[2].view(), g.db[3].view()};
    multi_head_attention_backward(pol, tensor_view<const U, 3>(xv), w, ws,
                                  tensor_view<const U, 3>(dout), mg, opt);
  };
  struct rgrads {
    host_tensor<R, 3> dx;
    std::vector<host_tensor<R, 2>> dw;
    std::vector<host_tensor<R, 1>> db;
  };
  grads g;
  rgrads rg;
  run(C::policy(), x.view(), l.weights(), d_out.view(), g, l.w);
  const host_tensor<R, 3> rx = convert<R>(x), rd = convert<R>(d_out);
  run(reference, rx.view(), l.ref_weights(), rd.view(), rg, l.rw);
  const double factor = std::is_same_v<T, R> ? 1.0 : 8.0;
  EXPECT_TRUE(close_gradient(g.dx, rg.dx, factor)) << "d_x";
  for (int n = 0; n < 4; ++n) {
    EXPECT_TRUE(close_gradient(g.dw[n], rg.dw[n], factor)) << "d_w " << n;
    EXPECT_TRUE(close_gradient(g.db[n], rg.db[n], factor)) << "d_b " << n;
  }
}

template <class Cases>
void register_backward_tests(Cases cases, const std::vector<shape>& shapes,
                             const std::vector<shape>& few, const std::vector<mha_shape>& layers) {
  ATTN_REGISTER_SHAPE_TEST(cases, "Backward", "ScaledScores", scores_backward_matches_reference,
                           few, ({false}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Backward", "Softmax", softmax_backward_matches_reference, few,
                           ({false, true}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Backward", "WeightedValues",
                           weighted_values_backward_matches_reference, few, ({false}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Backward", "Attention", attention_backward_matches_reference,
                           shapes, ({false, true}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Backward", "AttentionWindowScale",
                           attention_backward_window_and_scale, few, ({false, true}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Backward", "ComposedStagesEqualFused",
                           composed_stage_backwards_equal_the_fused_backward, few, ({false, true}));
  for (const projection_shape& d :
       {projection_shape{1, 1, 1, 1}, projection_shape{2, 7, 64, 8},
        projection_shape{3, 65, 80, 63}, projection_shape{1, 300, 96, 130}})
    register_test(cases, "Backward", "Project/" + d.str(), [=](auto c) {
      return [=] { project_backward_matches_reference<decltype(c)>(d); };
    });
  ATTN_REGISTER_TEST(cases, "Backward", "EdgeCases", backward_edge_cases);
  for (const mha_shape& m : layers)
    register_test(cases, "Backward", "MultiHead/" + m.str(), [=](auto c) {
      return [=] { multi_head_backward_matches_reference<decltype(c)>(m); };
    });
}

}  // namespace attn::test
