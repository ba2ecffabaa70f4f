#pragma once
/// \file
/// Every seed stage and the fused attention against attn::reference, over odd shapes, both
/// mask settings, windows, grouped key heads and strided views: bodies over a backend case C,
/// registered for each backend by the suite files (tests/cpu_suite.cpp, tests/cuda/suite.cu).
///
/// 16-bit inputs are generated in double and rounded to T, so the fp32 reference sees the same
/// values. Stages round once from an fp32 accumulator and are held to tolerance<T>; the fused
/// attention in 16 bits is held to FlashAttention's standard: its error against the fp32
/// reference is at most tolerance<T>::fused_factor times that of a naive 16-bit path (every
/// stage's output rounded to T), plus tolerance<T>::abs.

#include <optional>

#include "../support/strided.hpp"
#include "../support/testing.hpp"

namespace attn::test {

template <class C>
void scaled_scores_match_reference(const shape& s, bool) {
  using T = typename C::value;
  using R = typename C::ref;
  const qkv<C> in(s);
  host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Tk});
  host_tensor<R, 4> want({s.B, s.H, s.Tq, s.Tk});
  for (std::optional<double> scale : {std::optional<double>{}, std::optional<double>{0.3}}) {
    scaled_scores(C::policy(), in.q.view(), in.k.view(), got.view(), scale);
    scaled_scores(reference, in.rq.view(), in.rk.view(), want.view(), scale);
    EXPECT_TRUE(close(got, want)) << "scale " << scale.value_or(0);
  }
}

template <class C>
void causal_mask_matches_reference(const shape& s, bool) {
  using T = typename C::value;
  host_tensor<T, 4> got = random<T, 4>({s.B, s.H, s.Tq, s.Tk}, 7);
  host_tensor<typename C::ref, 4> want = convert<typename C::ref>(got);
  causal_mask(C::policy(), got.view());
  causal_mask(reference, want.view());
  EXPECT_EQ(max_error(got, want), 0.0);
}

template <class C>
void softmax_matches_reference(const shape& s, bool causal) {
  using T = typename C::value;
  host_tensor<T, 4> got = random<T, 4>({s.B, s.H, s.Tq, s.Tk}, 9, 4.0);
  if (causal) causal_mask(C::policy(), got.view());
  host_tensor<typename C::ref, 4> want = convert<typename C::ref>(got);
  softmax_rows(C::policy(), got.view());
  softmax_rows(reference, want.view());
  EXPECT_TRUE(close(got, want));
}

template <class C>
void weighted_values_match_reference(const shape& s, bool) {
  using T = typename C::value;
  using R = typename C::ref;
  const qkv<C> in(s);
  const host_tensor<T, 4> p = random<T, 4>({s.B, s.H, s.Tq, s.Tk}, 11, 1.0 / double(s.Tk));
  host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Dv});
  host_tensor<R, 4> want({s.B, s.H, s.Tq, s.Dv});
  weighted_values(C::policy(), p.view(), in.v.view(), got.view());
  weighted_values(reference, convert<R>(p).view(), in.rv.view(), want.view());
  EXPECT_TRUE(close(got, want));
}

/// One projection shape: x [B, T, C], w [C, E].
struct projection_shape {
  index_t B, T, C, E;
  std::string str() const {  // (a stream: GCC 12 warns falsely on chains of string +)
    std::ostringstream s;
    s << "B" << B << "_T" << T << "_C" << C << "_E" << E;
    return s.str();
  }
};

template <class C>
void project_matches_reference(const projection_shape& d) {
  using T = typename C::value;
  using R = typename C::ref;
  const host_tensor<T, 3> x = random<T, 3>({d.B, d.T, d.C}, 1);
  const host_tensor<T, 2> w = random<T, 2>({d.C, d.E}, 2, 1.0 / std::sqrt(double(d.C)));
  host_tensor<T, 1> bias(dims<1>{d.E});
  for (index_t i = 0; i < d.E; ++i) bias(i) = from_double<T>(0.01 * double(i % 17));
  host_tensor<T, 3> got({d.B, d.T, d.E});
  host_tensor<R, 3> want({d.B, d.T, d.E});
  project(C::policy(), x.view(), w.view(), got.view());
  project(reference, convert<R>(x).view(), convert<R>(w).view(), want.view());
  EXPECT_TRUE(close(got, want));
  project(C::policy(), x.view(), w.view(), got.view(), bias.view());
  project(reference, convert<R>(x).view(), convert<R>(w).view(), want.view(),
          convert<R>(bias).view());
  EXPECT_TRUE(close(got, want));
}

inline const std::vector<projection_shape>& projection_shapes() {
  static const std::vector<projection_shape> p = {
      {1, 1, 1, 1}, {2, 7, 64, 8}, {3, 65, 80, 63}, {1, 130, 256, 129}, {2, 1000, 64, 192}};
  return p;
}

/// Q, K and V into one interleaved [B, T, 3E] buffer, as multi_head_attention lays them out.
template <class C>
void project_qkv_matches_three_projections() {
  using T = typename C::value;
  using R = typename C::ref;
  const index_t B = 2, T_ = 65, Cm = 96, E = 48;
  const host_tensor<T, 3> x = random<T, 3>({B, T_, Cm}, 1);
  std::vector<host_tensor<T, 2>> w;
  std::vector<host_tensor<T, 1>> b;
  for (int n = 0; n < 3; ++n) {
    w.push_back(random<T, 2>({Cm, E}, 10 + n, 1.0 / std::sqrt(double(Cm))));
    b.emplace_back(dims<1>{E});
    for (index_t i = 0; i < E; ++i) b[n](i) = from_double<T>(0.1 * (n + 1));
  }
  host_tensor<T, 3> fused({B, T_, 3 * E});  // (B, T, 3E): q | k | v
  auto part = [&](index_t n) {
    return tensor_view<T, 3>{fused.data() + n * E, {B, T_, E}, {T_ * 3 * E, 3 * E, 1}};
  };
  project_qkv(C::policy(), x.view(), w[0].view(), w[1].view(), w[2].view(), part(0), part(1),
              part(2), b[0].view(), b[1].view(), b[2].view());
  for (int n = 0; n < 3; ++n) {
    host_tensor<R, 3> want({B, T_, E});
    host_tensor<T, 3> got({B, T_, E});
    project(reference, convert<R>(x).view(), convert<R>(w[n]).view(), want.view(),
            convert<R>(b[n]).view());
    for (index_t i = 0; i < B; ++i)
      for (index_t t = 0; t < T_; ++t)
        for (index_t e = 0; e < E; ++e) got(i, t, e) = part(n)(i, t, e);
    EXPECT_TRUE(close(got, want)) << "output " << n;
  }
}

/// The naive 16-bit attention: every stage's output rounded to T (reference math in between).
template <class C>
host_tensor<typename C::ref, 4> naive_attention(const qkv<C>& in, const shape& s,
                                                const attention_options& opt) {
  using T = typename C::value;
  using R = typename C::ref;
  host_tensor<R, 4> sc({s.B, s.H, s.Tq, s.Tk}), o({s.B, s.H, s.Tq, s.Dv});
  scaled_scores(reference, in.rq.view(), in.rk.view(), sc.view(), opt.scale);
  sc = convert<R>(convert<T>(sc));
  detail::run(reference, mask_args<R>{sc.view(), {opt.causal, opt.window}});
  softmax_rows(reference, sc.view());
  sc = convert<R>(convert<T>(sc));
  weighted_values(reference, sc.view(), in.rv.view(), o.view());
  return convert<R>(convert<T>(o));
}

/// Fused output against the reference: tolerance<T> for float and double, FlashAttention's
/// criterion for 16-bit types.
template <class C>
::testing::AssertionResult attention_close(const host_tensor<typename C::value, 4>& got,
                                           const host_tensor<typename C::ref, 4>& want,
                                           const qkv<C>& in, const shape& s,
                                           const attention_options& opt) {
  using T = typename C::value;
  if constexpr (std::is_same_v<T, typename C::ref>) {
    return close(got, want);
  } else {
    const double fast = max_error(got, want);
    const double naive = max_error(naive_attention(in, s, opt), want);
    if (fast <= tolerance<T>::fused_factor * naive + tolerance<T>::abs)
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "fused error " << fast << " > " << tolerance<T>::fused_factor
           << " x naive 16-bit error " << naive << " + " << tolerance<T>::abs;
  }
}

/// The fused attention (with log-sum-exp) of one case against the reference.
template <class C>
void check_attention(const shape& s, const attention_options& opt) {
  using T = typename C::value;
  using R = typename C::ref;
  const qkv<C> in(s);
  host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Dv});
  host_tensor<R, 4> want({s.B, s.H, s.Tq, s.Dv});
  host_tensor<accum_t<T>, 3> lse_got({s.B, s.H, s.Tq});
  host_tensor<accum_t<R>, 3> lse_want({s.B, s.H, s.Tq});
  attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), got.view(), lse_got.view(), opt);
  attention(reference, in.rq.view(), in.rk.view(), in.rv.view(), want.view(), lse_want.view(), opt);
  EXPECT_TRUE(attention_close(got, want, in, s, opt));
  if constexpr (std::is_same_v<T, R>)
    EXPECT_TRUE(close(lse_got, lse_want));
  else
    EXPECT_LT(max_error(lse_got, lse_want), lse_abs_16bit);
}

template <class C>
void attention_matches_reference(const shape& s, bool causal) {
  check_attention<C>(s, {.causal = causal});
}

/// Sliding windows (attn/core/visibility.hpp): causal (Mistral's convention) and symmetric.
template <class C>
void attention_window_matches_reference(const shape& s, bool causal) {
  for (index_t window : {1, 5, 64, 300}) {
    SCOPED_TRACE("window " + std::to_string(window));
    check_attention<C>(s, {.causal = causal, .window = window});
  }
}

template <class C>
void attention_equals_the_four_stages_composed(const shape& s, bool causal) {
  using T = typename C::value;
  const qkv<C> in(s);
  host_tensor<T, 4> scores({s.B, s.H, s.Tq, s.Tk}), staged({s.B, s.H, s.Tq, s.Dv}),
      fused({s.B, s.H, s.Tq, s.Dv});
  scaled_scores(C::policy(), in.q.view(), in.k.view(), scores.view());
  if (causal) causal_mask(C::policy(), scores.view());
  softmax_rows(C::policy(), scores.view());
  weighted_values(C::policy(), scores.view(), in.v.view(), staged.view());
  attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), fused.view(), {.causal = causal});
  if constexpr (std::is_same_v<T, typename C::ref>)
    EXPECT_TRUE(close(fused, staged));
  else  // the staged path rounds to 16 bits twice more
    EXPECT_LT(max_error(fused, staged), 4 * tolerance<T>::rel);
}

/// q, k, v, o kept as [B, T, H, D] in memory and passed as [B, H, T, D] by strides; k also as
/// [B, H, D, T] (column stride != 1), which takes the packing (CPU) or element-wise (CUDA)
/// path; the stages through the same views.
template <class C>
void strided_views_match_reference(const shape& s, bool causal) {
  using T = typename C::value;
  using R = typename C::ref;
  const qkv<C> in(s);
  strided_qkv<T> st(s, in.q, in.k, in.v);
  for (bool contiguous_k : {false, true}) {
    const tensor_view<const T, 4> k = contiguous_k ? in.k.view() : st.k();
    attention(C::policy(), st.q(), k, st.v(), st.o(), {.causal = causal});
    host_tensor<R, 4> want({s.B, s.H, s.Tq, s.Dv});
    attention(reference, in.rq.view(), in.rk.view(), in.rv.view(), want.view(), {.causal = causal});
    EXPECT_TRUE(attention_close(st.o_bhtd(), want, in, s, {.causal = causal}))
        << "contiguous k " << contiguous_k;
  }
  host_tensor<T, 4> sc({s.B, s.H, s.Tq, s.Tk});
  host_tensor<R, 4> sc_want({s.B, s.H, s.Tq, s.Tk});
  scaled_scores(C::policy(), st.q(), st.k(), sc.view());
  scaled_scores(reference, in.rq.view(), in.rk.view(), sc_want.view());
  EXPECT_TRUE(close(sc, sc_want));
  softmax_rows(reference, sc_want.view());
  const host_tensor<T, 4> p = convert<T>(sc_want);
  host_tensor<T, 4> wv({s.B, s.H, s.Tq, s.Dv});
  host_tensor<R, 4> wv_want({s.B, s.H, s.Tq, s.Dv});
  weighted_values(C::policy(), p.view(), st.v(), wv.view());
  weighted_values(reference, convert<R>(p).view(), in.rv.view(), wv_want.view());
  EXPECT_TRUE(close(wv, wv_want));
}

/// o kept as [B, H, Dv, Tq] in memory (column stride != 1): the fused kernels write it element
/// by element instead of a row at a time.
template <class C>
void attention_into_transposed_output(const shape& s, bool causal) {
  using T = typename C::value;
  using R = typename C::ref;
  const qkv<C> in(s);
  host_tensor<T, 4> o_bhdt({s.B, s.H, s.Dv, s.Tq});
  host_tensor<R, 4> want({s.B, s.H, s.Tq, s.Dv});
  const tensor_view<T, 4> o{
      o_bhdt.data(), {s.B, s.H, s.Tq, s.Dv}, {s.H * s.Dv * s.Tq, s.Dv * s.Tq, 1, s.Tq}};
  attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), o, {.causal = causal});
  attention(reference, in.rq.view(), in.rk.view(), in.rv.view(), want.view(), {.causal = causal});
  host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Dv});
  for (index_t b = 0; b < s.B; ++b)
    for (index_t h = 0; h < s.H; ++h)
      for (index_t t = 0; t < s.Tq; ++t)
        for (index_t d = 0; d < s.Dv; ++d) got(b, h, t, d) = o(b, h, t, d);
  EXPECT_TRUE(attention_close(got, want, in, s, {.causal = causal}));
}

/// Tq > Tk under the bottom-right causal mask: the first Tq - Tk queries see no key.
template <class C>
void fully_masked_rows_are_zero_with_minus_infinity_lse() {
  using T = typename C::value;
  const shape s{2, 2, 70, 5, 64, 64};
  const qkv<C> in(s);
  host_tensor<T, 4> o({s.B, s.H, s.Tq, s.Dv});
  host_tensor<accum_t<T>, 3> lse({s.B, s.H, s.Tq});
  attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
            {.causal = true});
  for (index_t b = 0; b < s.B; ++b)
    for (index_t h = 0; h < s.H; ++h)
      for (index_t i = 0; i < s.Tq; ++i) {
        if (i < s.Tq - s.Tk) {
          ASSERT_EQ(lse(b, h, i), -std::numeric_limits<accum_t<T>>::infinity()) << i;
          for (index_t d = 0; d < s.Dv; ++d) ASSERT_EQ(to_double(o(b, h, i, d)), 0.0) << i;
        } else {
          ASSERT_TRUE(std::isfinite(lse(b, h, i))) << i;
        }
      }
}

/// Registers the bodies above for `cases` over `shapes`.
template <class Cases>
void register_stage_tests(Cases cases, const std::vector<shape>& shapes,
                          const std::vector<shape>& few) {
  ATTN_REGISTER_SHAPE_TEST(cases, "Stages", "ScaledScores", scaled_scores_match_reference, shapes,
                           ({false}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Stages", "CausalMask", causal_mask_matches_reference, shapes,
                           ({false}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Stages", "Softmax", softmax_matches_reference, shapes,
                           ({false, true}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Stages", "WeightedValues", weighted_values_match_reference,
                           shapes, ({false}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Stages", "Attention", attention_matches_reference, shapes,
                           ({false, true}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Stages", "AttentionWindow", attention_window_matches_reference,
                           few, ({false, true}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Stages", "AttentionEqualsStages",
                           attention_equals_the_four_stages_composed, few, ({false, true}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Stages", "StridedViews", strided_views_match_reference,
                           (std::vector<shape>{{2, 3, 65, 65, 64, 64}, {1, 2, 7, 130, 80, 80}}),
                           ({false, true}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Stages", "TransposedOutput", attention_into_transposed_output,
                           (std::vector<shape>{{1, 2, 65, 65, 64, 64}, {2, 1, 7, 130, 80, 24}}),
                           ({false, true}));
  for (const projection_shape& d : projection_shapes())
    register_test(cases, "Stages", "Project/" + d.str(),
                  [=](auto c) { return [=] { project_matches_reference<decltype(c)>(d); }; });
  ATTN_REGISTER_TEST(cases, "Stages", "ProjectQkv", project_qkv_matches_three_projections);
  ATTN_REGISTER_TEST(cases, "Stages", "FullyMaskedRows",
                     fully_masked_rows_are_zero_with_minus_infinity_lse);
}

}  // namespace attn::test
