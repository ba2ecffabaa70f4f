// Every seed stage on every backend against attn::reference, over odd shapes, both mask
// settings and strided views.

#include "support/strided.hpp"
#include "support/testing.hpp"

namespace attn::test {
namespace {

template <class C>
class Stages : public ::testing::Test {
 protected:
  using T = typename C::value_type;
  typename C::policy_type policy{};
};
TYPED_TEST_SUITE(Stages, backends, backend_names);

TYPED_TEST(Stages, ScaledScoresMatchReference) {
  using T = typename TestFixture::T;
  for (const shape& s : shapes()) {
    SCOPED_TRACE(s.str());
    const qkv<T> in(s);
    host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Tk}), want({s.B, s.H, s.Tq, s.Tk});
    scaled_scores(this->policy, in.q.view(), in.k.view(), got.view());
    scaled_scores(reference, in.q.view(), in.k.view(), want.view());
    EXPECT_TRUE(close(got, want));
    scaled_scores(this->policy, in.q.view(), in.k.view(), got.view(), 0.3);
    scaled_scores(reference, in.q.view(), in.k.view(), want.view(), 0.3);
    EXPECT_TRUE(close(got, want));
  }
}

TYPED_TEST(Stages, CausalMaskMatchesReference) {
  using T = typename TestFixture::T;
  for (const shape& s : shapes()) {
    SCOPED_TRACE(s.str());
    host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Tk});
    fill(got, 7);
    host_tensor<T, 4> want = got;
    causal_mask(this->policy, got.view());
    causal_mask(reference, want.view());
    EXPECT_TRUE(identical(got, want));
  }
}

TYPED_TEST(Stages, SoftmaxMatchesReference) {
  using T = typename TestFixture::T;
  for (const shape& s : shapes())
    for (bool causal : {false, true}) {
      SCOPED_TRACE(s.str() + (causal ? " causal" : ""));
      host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Tk});
      fill(got, 9, 4.0);
      if (causal) causal_mask(reference, got.view());
      host_tensor<T, 4> want = got;
      softmax_rows(this->policy, got.view());
      softmax_rows(reference, want.view());
      EXPECT_TRUE(close(got, want));
    }
}

TYPED_TEST(Stages, WeightedValuesMatchReference) {
  using T = typename TestFixture::T;
  for (const shape& s : shapes()) {
    SCOPED_TRACE(s.str());
    const qkv<T> in(s);
    host_tensor<T, 4> p({s.B, s.H, s.Tq, s.Tk});
    fill(p, 11, 1.0 / double(s.Tk));  // unit-scale output
    host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Dv}), want({s.B, s.H, s.Tq, s.Dv});
    weighted_values(this->policy, p.view(), in.v.view(), got.view());
    weighted_values(reference, p.view(), in.v.view(), want.view());
    EXPECT_TRUE(close(got, want));
  }
}

TYPED_TEST(Stages, ProjectMatchesReference) {
  using T = typename TestFixture::T;
  struct dims3 {
    index_t B, T_, C, E;
  };
  for (const dims3 d : {dims3{1, 1, 1, 1}, dims3{2, 7, 64, 8}, dims3{3, 65, 80, 63},
                        dims3{1, 130, 256, 129}, dims3{2, 1000, 64, 192}}) {
    SCOPED_TRACE(testing::Message()
                 << "B=" << d.B << " T=" << d.T_ << " C=" << d.C << " E=" << d.E);
    host_tensor<T, 3> x({d.B, d.T_, d.C}), got({d.B, d.T_, d.E}), want({d.B, d.T_, d.E});
    host_tensor<T, 2> w({d.C, d.E});
    fill(x, 1);
    fill(w, 2, 1.0 / std::sqrt(double(d.C)));
    std::vector<T> bias(static_cast<std::size_t>(d.E));
    for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = T(0.01 * double(i % 17));
    project(this->policy, x.view(), w.view(), got.view());
    project(reference, x.view(), w.view(), want.view());
    EXPECT_TRUE(close(got, want));
    project(this->policy, x.view(), w.view(), got.view(), bias);
    project(reference, x.view(), w.view(), want.view(), bias);
    EXPECT_TRUE(close(got, want));
  }
}

TYPED_TEST(Stages, ProjectQkvMatchesThreeProjections) {
  using T = typename TestFixture::T;
  const index_t B = 2, T_ = 65, C = 96, E = 48;
  host_tensor<T, 3> x({B, T_, C});
  host_tensor<T, 2> w[3] = {host_tensor<T, 2>({C, E}), host_tensor<T, 2>({C, E}),
                            host_tensor<T, 2>({C, E})};
  fill(x, 1);
  std::vector<T> b[3];
  for (int n = 0; n < 3; ++n) {
    fill(w[n], 10 + n, 1.0 / std::sqrt(double(C)));
    b[n].assign(E, T(0.1 * (n + 1)));
  }
  // Outputs interleaved in one [B, T, 3E] buffer, as multi_head_attention lays them out.
  host_tensor<T, 3> fused({B, T_, 3 * E});
  auto part = [&](index_t n) {
    return tensor_view<T, 3>{fused.data() + n * E, {B, T_, E}, {T_ * 3 * E, 3 * E, 1}};
  };
  project_qkv(this->policy, x.view(), w[0].view(), w[1].view(), w[2].view(), part(0), part(1),
              part(2), b[0], b[1], b[2]);
  for (int n = 0; n < 3; ++n) {
    host_tensor<T, 3> want({B, T_, E}), got({B, T_, E});
    project(reference, x.view(), w[n].view(), want.view(), b[n]);
    for (index_t i = 0; i < B; ++i)
      for (index_t t = 0; t < T_; ++t)
        for (index_t e = 0; e < E; ++e) got(i, t, e) = part(n)(i, t, e);
    EXPECT_TRUE(close(got, want)) << "output " << n;
  }
}

TYPED_TEST(Stages, AttentionMatchesReference) {
  using T = typename TestFixture::T;
  for (const shape& s : shapes())
    for (bool causal : {false, true}) {
      SCOPED_TRACE(s.str() + (causal ? " causal" : ""));
      const qkv<T> in(s);
      host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Dv}), want({s.B, s.H, s.Tq, s.Dv});
      host_tensor<accum_t<T>, 3> lse_got({s.B, s.H, s.Tq}), lse_want({s.B, s.H, s.Tq});
      const attention_options opt{.causal = causal};
      attention(this->policy, in.q.view(), in.k.view(), in.v.view(), got.view(), lse_got.view(),
                opt);
      attention(reference, in.q.view(), in.k.view(), in.v.view(), want.view(), lse_want.view(),
                opt);
      EXPECT_TRUE(close(got, want));
      EXPECT_TRUE(close(lse_got, lse_want));
    }
}

TYPED_TEST(Stages, AttentionEqualsTheFourStagesComposed) {
  using T = typename TestFixture::T;
  for (const shape& s : {shape{1, 2, 65, 65, 64, 64}, shape{2, 1, 7, 63, 8, 16}})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(s.str() + (causal ? " causal" : ""));
      const qkv<T> in(s);
      host_tensor<T, 4> scores({s.B, s.H, s.Tq, s.Tk}), staged({s.B, s.H, s.Tq, s.Dv}),
          fused({s.B, s.H, s.Tq, s.Dv});
      scaled_scores(this->policy, in.q.view(), in.k.view(), scores.view());
      if (causal) causal_mask(this->policy, scores.view());
      softmax_rows(this->policy, scores.view());
      weighted_values(this->policy, scores.view(), in.v.view(), staged.view());
      attention(this->policy, in.q.view(), in.k.view(), in.v.view(), fused.view(),
                {.causal = causal});
      EXPECT_TRUE(close(fused, staged));
    }
}

// q, k, v, o kept as [B, T, H, D] in memory and passed as [B, H, T, D] by strides; k also as
// [B, H, D, T] (column stride != 1), which takes the packing path.
TYPED_TEST(Stages, StridedViewsMatchReference) {
  using T = typename TestFixture::T;
  for (const shape& s : {shape{2, 3, 65, 65, 64, 64}, shape{1, 2, 7, 130, 80, 80}})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(s.str() + (causal ? " causal" : ""));
      const qkv<T> in(s);
      strided_qkv<T> st(s, in.q, in.k, in.v);
      attention(this->policy, st.q(), st.k(), st.v(), st.o(), {.causal = causal});
      host_tensor<T, 4> want({s.B, s.H, s.Tq, s.Dv});
      attention(reference, in.q.view(), in.k.view(), in.v.view(), want.view(), {.causal = causal});
      EXPECT_TRUE(close(st.o_bhtd(), want));

      // The stages through the same strided views.
      host_tensor<T, 4> sc({s.B, s.H, s.Tq, s.Tk}), sc_want({s.B, s.H, s.Tq, s.Tk});
      scaled_scores(this->policy, st.q(), st.k(), sc.view());
      scaled_scores(reference, in.q.view(), in.k.view(), sc_want.view());
      EXPECT_TRUE(close(sc, sc_want));
      host_tensor<T, 4> wv({s.B, s.H, s.Tq, s.Dv}), wv_want({s.B, s.H, s.Tq, s.Dv});
      softmax_rows(reference, sc_want.view());
      weighted_values(this->policy, sc_want.view(), st.v(), wv.view());
      weighted_values(reference, sc_want.view(), in.v.view(), wv_want.view());
      EXPECT_TRUE(close(wv, wv_want));
    }
}

// o kept as [B, H, Dv, Tq] in memory (column stride != 1): the fused kernels write it element
// by element instead of a row at a time.
TYPED_TEST(Stages, AttentionIntoTransposedOutput) {
  using T = typename TestFixture::T;
  for (const shape& s : {shape{1, 2, 65, 65, 64, 64}, shape{2, 1, 7, 130, 80, 24}})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(s.str() + (causal ? " causal" : ""));
      const qkv<T> in(s);
      host_tensor<T, 4> o_bhdt({s.B, s.H, s.Dv, s.Tq}), want({s.B, s.H, s.Tq, s.Dv});
      const tensor_view<T, 4> o{
          o_bhdt.data(), {s.B, s.H, s.Tq, s.Dv}, {s.H * s.Dv * s.Tq, s.Dv * s.Tq, 1, s.Tq}};
      attention(this->policy, in.q.view(), in.k.view(), in.v.view(), o, {.causal = causal});
      attention(reference, in.q.view(), in.k.view(), in.v.view(), want.view(), {.causal = causal});
      host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Dv});
      for (index_t b = 0; b < s.B; ++b)
        for (index_t h = 0; h < s.H; ++h)
          for (index_t t = 0; t < s.Tq; ++t)
            for (index_t d = 0; d < s.Dv; ++d) got(b, h, t, d) = o(b, h, t, d);
      EXPECT_TRUE(close(got, want));
    }
}

}  // namespace
}  // namespace attn::test
