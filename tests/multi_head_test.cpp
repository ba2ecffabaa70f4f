// multi_head_attention at the ANDREA-120M shape against the reference, and the composition
// itself (head split, concatenation, output projection) against explicit loops. The odd shapes
// are shared bodies (bodies/multi_head.hpp, registered in cpu_suite.cpp).

#include <attn/attn.hpp>

#include "bodies/multi_head.hpp"

namespace attn::test {
namespace {

template <class T>
class MultiHeadAndrea : public ::testing::Test {};
using andrea_types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MultiHeadAndrea, andrea_types);

TYPED_TEST(MultiHeadAndrea, MatchesReference) {
  using T = TypeParam;
  using C = backend_case<cpu_policy, T>;
  const index_t B = 1, T_ = 1024, Cm = 768, H = 12;
  const layer<C> l(Cm, H, H, true, 100);
  const host_tensor<T, 3> x = random<T, 3>({B, T_, Cm}, 1);
  host_tensor<T, 3> got({B, T_, Cm}), want({B, T_, Cm});
  multi_head_attention(cpu, x.view(), l.weights(), got.view(), {.causal = true});
  multi_head_attention(reference, x.view(), l.weights(), want.view(), {.causal = true});
  EXPECT_TRUE(close(got, want));
}

// Per head h, Q_h = x W_q[:, hD:(h+1)D] + b_q[hD:...], etc., written out as loops.
TEST(MultiHeadComposition, MatchesExplicitLoops) {
  const index_t B = 2, T_ = 9, Cm = 12, H = 3, D = 4;
  const layer<backend_case<reference_policy, double>> l(Cm, H, H, true, 21);
  const host_tensor<double, 3> x = random<double, 3>({B, T_, Cm}, 5);
  host_tensor<double, 3> got({B, T_, Cm});
  multi_head_attention(reference, x.view(), l.weights(), got.view(), {.causal = true});

  for (index_t b = 0; b < B; ++b) {
    host_tensor<double, 2> concat({T_, Cm});
    for (index_t h = 0; h < H; ++h) {
      auto proj = [&](int n, index_t t, index_t d) {
        double acc = l.b[n](h * D + d);
        for (index_t c = 0; c < Cm; ++c) acc += x(b, t, c) * l.w[n](c, h * D + d);
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
      for (index_t e = 0; e < Cm; ++e) {
        double acc = l.b[3](e);
        for (index_t c = 0; c < Cm; ++c) acc += concat(t, c) * l.w[3](c, e);
        EXPECT_NEAR(got(b, t, e), acc, 1e-12) << b << "," << t << "," << e;
      }
  }
}

}  // namespace
}  // namespace attn::test
