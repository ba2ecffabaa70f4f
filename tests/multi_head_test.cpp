// multi_head_attention: against the reference at the ANDREA-120M shape, and the composition
// itself (head split, concatenation, output projection) against explicit loops.

#include "support/testing.hpp"

namespace attn::test {
namespace {

/// Random layer weights (scaled by 1/sqrt(d_model)) and optional biases.
template <class T>
struct layer {
  index_t C;
  host_tensor<T, 2> w[4];
  std::vector<T> b[4];
  layer(index_t d_model, bool biases, std::uint32_t seed) : C(d_model) {
    for (int n = 0; n < 4; ++n) {
      w[n] = host_tensor<T, 2>({C, C});
      fill(w[n], seed + n, 1.0 / std::sqrt(double(C)));
      if (biases) b[n].assign(std::size_t(C), T(0.05 * (n + 1)));
    }
  }
  mha_weights<T> weights(index_t heads) const {
    return {w[0].view(), w[1].view(), w[2].view(), w[3].view(), b[0], b[1], b[2], b[3], heads};
  }
};

template <class C>
class MultiHead : public ::testing::Test {
 protected:
  using T = typename C::value_type;
  typename C::policy_type policy{};
};
TYPED_TEST_SUITE(MultiHead, backends, backend_names);

TYPED_TEST(MultiHead, MatchesReferenceAtAndreaShape) {
  using T = typename TestFixture::T;
  const index_t B = 1, T_ = 1024, C = 768, H = 12;
  const layer<T> l(C, true, 100);
  host_tensor<T, 3> x({B, T_, C}), got({B, T_, C}), want({B, T_, C});
  fill(x, 1);
  multi_head_attention(this->policy, x.view(), l.weights(H), got.view(), {.causal = true});
  multi_head_attention(reference, x.view(), l.weights(H), want.view(), {.causal = true});
  EXPECT_TRUE(close(got, want));
}

TYPED_TEST(MultiHead, MatchesReferenceOnOddShapes) {
  using T = typename TestFixture::T;
  struct cfg {
    index_t B, T_, C, H;
    bool causal, biases;
  };
  for (const cfg c : {cfg{2, 7, 24, 3, false, true}, cfg{1, 65, 64, 1, true, false},
                      cfg{3, 1, 16, 16, true, true}, cfg{2, 63, 96, 2, true, true}}) {
    SCOPED_TRACE(testing::Message()
                 << "B=" << c.B << " T=" << c.T_ << " C=" << c.C << " H=" << c.H);
    const layer<T> l(c.C, c.biases, 7);
    host_tensor<T, 3> x({c.B, c.T_, c.C}), got({c.B, c.T_, c.C}), want({c.B, c.T_, c.C});
    fill(x, 3);
    multi_head_attention(this->policy, x.view(), l.weights(c.H), got.view(), {.causal = c.causal});
    multi_head_attention(reference, x.view(), l.weights(c.H), want.view(), {.causal = c.causal});
    EXPECT_TRUE(close(got, want));
  }
}

// The composition checked by hand: per head h, Q_h = x W_q[:, hD:(h+1)D] + b_q[hD:...], etc.
TEST(MultiHeadComposition, MatchesExplicitLoops) {
  const index_t B = 2, T_ = 9, C = 12, H = 3, D = 4;
  const layer<double> l(C, true, 21);
  host_tensor<double, 3> x({B, T_, C}), got({B, T_, C});
  fill(x, 5);
  multi_head_attention(reference, x.view(), l.weights(H), got.view(), {.causal = true});

  for (index_t b = 0; b < B; ++b) {
    host_tensor<double, 2> concat({T_, C});
    for (index_t h = 0; h < H; ++h) {
      auto proj = [&](int n, index_t t, index_t d) {
        double acc = l.b[n][std::size_t(h * D + d)];
        for (index_t c = 0; c < C; ++c) acc += x(b, t, c) * l.w[n](c, h * D + d);
        return acc;
      };
      for (index_t i = 0; i < T_; ++i) {
        std::vector<double> p(std::size_t(i + 1));
        double m = -INFINITY, sum = 0;
        for (index_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (index_t d = 0; d < D; ++d) dot += proj(0, i, d) * proj(1, j, d);
          p[std::size_t(j)] = dot / std::sqrt(double(D));
          m = std::max(m, p[std::size_t(j)]);
        }
        for (double& e : p) sum += (e = std::exp(e - m));
        for (index_t d = 0; d < D; ++d) {
          double acc = 0;
          for (index_t j = 0; j <= i; ++j) acc += p[std::size_t(j)] / sum * proj(2, j, d);
          concat(i, h * D + d) = acc;
        }
      }
    }
    for (index_t t = 0; t < T_; ++t)
      for (index_t e = 0; e < C; ++e) {
        double acc = l.b[3][std::size_t(e)];
        for (index_t c = 0; c < C; ++c) acc += concat(t, c) * l.w[3](c, e);
        EXPECT_NEAR(got(b, t, e), acc, 1e-12) << b << "," << t << "," << e;
      }
  }
}

}  // namespace
}  // namespace attn::test
