// Properties the seed states, and inputs that break naive implementations.

#include <limits>

#include "support/testing.hpp"

namespace attn::test {
namespace {

template <class C>
class Properties : public ::testing::Test {
 protected:
  using T = typename C::value_type;
  typename C::policy_type policy{};
  static constexpr T inf = std::numeric_limits<T>::infinity();
};
TYPED_TEST_SUITE(Properties, backends, backend_names);

TYPED_TEST(Properties, SoftmaxRowsSumToOneAndAreNonNegative) {
  using T = typename TestFixture::T;
  for (bool causal : {false, true}) {
    host_tensor<T, 4> s({2, 3, 65, 65});
    fill(s, 3, 8.0);
    if (causal) causal_mask(this->policy, s.view());
    softmax_rows(this->policy, s.view());
    for (index_t b = 0; b < 2; ++b)
      for (index_t h = 0; h < 3; ++h)
        for (index_t i = 0; i < 65; ++i) {
          double sum = 0;
          for (index_t j = 0; j < 65; ++j) {
            ASSERT_GE(s(b, h, i, j), T(0));
            sum += s(b, h, i, j);
          }
          ASSERT_NEAR(sum, 1.0, 65 * tolerance<T>::rel) << "row " << i;
        }
  }
}

TYPED_TEST(Properties, MaskedProbabilitiesAreExactlyZero) {
  using T = typename TestFixture::T;
  host_tensor<T, 4> s({1, 2, 63, 100});  // Tq < Tk: query i sees keys j <= i + 37
  fill(s, 5, 4.0);
  causal_mask(this->policy, s.view());
  softmax_rows(this->policy, s.view());
  for (index_t h = 0; h < 2; ++h)
    for (index_t i = 0; i < 63; ++i)
      for (index_t j = 0; j < 100; ++j) {
        if (j > i + 37)
          ASSERT_EQ(s(0, h, i, j), T(0)) << i << "," << j;
        else
          ASSERT_GT(s(0, h, i, j), T(0)) << i << "," << j;
      }
}

TYPED_TEST(Properties, RowZeroOfACausalSquareAttendsOnlyToItself) {
  using T = typename TestFixture::T;
  const shape s{1, 1, 70, 70, 16, 16};
  const qkv<T> in(s);
  host_tensor<T, 4> o({1, 1, 70, 16});
  attention(this->policy, in.q.view(), in.k.view(), in.v.view(), o.view(), {.causal = true});
  for (index_t d = 0; d < 16; ++d) EXPECT_NEAR(o(0, 0, 0, d), in.v(0, 0, 0, d), tolerance<T>::abs);
}

TYPED_TEST(Properties, FutureTokensNeverChangeEarlierOutputs) {
  using T = typename TestFixture::T;
  const shape s{1, 2, 150, 150, 64, 64};
  const qkv<T> a(s);
  qkv<T> b(s);
  const index_t t0 = 70;  // positions > t0 get new keys and values
  for (index_t h = 0; h < 2; ++h)
    for (index_t t = t0 + 1; t < 150; ++t)
      for (index_t d = 0; d < 64; ++d) {
        b.k(0, h, t, d) = T(1000) * b.k(0, h, t, d);
        b.v(0, h, t, d) = T(-7) + b.v(0, h, t, d);
      }
  host_tensor<T, 4> oa({1, 2, 150, 64}), ob({1, 2, 150, 64});
  attention(this->policy, a.q.view(), a.k.view(), a.v.view(), oa.view(), {.causal = true});
  attention(this->policy, b.q.view(), b.k.view(), b.v.view(), ob.view(), {.causal = true});
  for (index_t h = 0; h < 2; ++h)
    for (index_t t = 0; t <= t0; ++t)
      for (index_t d = 0; d < 64; ++d) ASSERT_EQ(oa(0, h, t, d), ob(0, h, t, d)) << t;
  EXPECT_NE(oa(0, 0, 149, 0), ob(0, 0, 149, 0));  // and later ones do change
}

TYPED_TEST(Properties, SoftmaxIsShiftInvariant) {
  using T = typename TestFixture::T;
  host_tensor<T, 4> s({1, 2, 33, 77});
  fill(s, 8, 3.0);
  host_tensor<T, 4> shifted = s;
  for (index_t i = 0; i < shifted.size(); ++i) shifted.data()[i] += T(16);
  softmax_rows(this->policy, s.view());
  softmax_rows(this->policy, shifted.view());
  EXPECT_TRUE(close(shifted, s, 4.0));  // adding 16 rounds the inputs by up to 2^-20 (float)
}

TYPED_TEST(Properties, HugeScoresStayFinite) {
  using T = typename TestFixture::T;
  // Scores of magnitude up to ~1e4: exp would overflow without the max subtraction.
  const shape s{1, 2, 65, 65, 64, 64};
  qkv<T> in(s);
  for (index_t i = 0; i < in.q.size(); ++i) in.q.data()[i] *= T(300);
  for (index_t i = 0; i < in.k.size(); ++i) in.k.data()[i] *= T(300);
  for (bool causal : {false, true}) {
    host_tensor<T, 4> o({1, 2, 65, 64});
    host_tensor<accum_t<T>, 3> lse({1, 2, 65});
    attention(this->policy, in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
              {.causal = causal});
    EXPECT_TRUE(all_finite(o));
    EXPECT_TRUE(all_finite(lse));
    for (index_t i = 0; i < o.size(); ++i) ASSERT_LE(std::abs(o.data()[i]), T(1) + T(1e-5));

    host_tensor<T, 4> p({1, 2, 65, 65});
    scaled_scores(this->policy, in.q.view(), in.k.view(), p.view());
    T biggest = 0;
    for (index_t i = 0; i < p.size(); ++i) biggest = std::max(biggest, std::abs(p.data()[i]));
    EXPECT_GT(biggest, T(5e3));
    if (causal) causal_mask(this->policy, p.view());
    softmax_rows(this->policy, p.view());
    EXPECT_TRUE(all_finite(p));
  }
}

TYPED_TEST(Properties, FullyMaskedRowsGiveZerosNotNaN) {
  using T = typename TestFixture::T;
  // Tq > Tk with the bottom-right causal mask: the first Tq - Tk queries see no key.
  const shape s{2, 2, 70, 5, 8, 8};
  const qkv<T> in(s);
  host_tensor<T, 4> o({2, 2, 70, 8});
  host_tensor<accum_t<T>, 3> lse({2, 2, 70});
  attention(this->policy, in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
            {.causal = true});
  for (index_t b = 0; b < 2; ++b)
    for (index_t h = 0; h < 2; ++h)
      for (index_t i = 0; i < 70; ++i) {
        if (i < 65) {
          EXPECT_EQ(lse(b, h, i), -std::numeric_limits<accum_t<T>>::infinity());
          for (index_t d = 0; d < 8; ++d) ASSERT_EQ(o(b, h, i, d), T(0));
        } else {
          EXPECT_TRUE(std::isfinite(lse(b, h, i)));
        }
      }

  host_tensor<T, 4> sc({1, 1, 3, 4});
  for (index_t i = 0; i < sc.size(); ++i) sc.data()[i] = -TestFixture::inf;
  sc(0, 0, 2, 1) = T(1e4);  // the last row has one finite entry among -inf
  softmax_rows(this->policy, sc.view());
  for (index_t j = 0; j < 4; ++j) {
    EXPECT_EQ(sc(0, 0, 0, j), T(0));
    EXPECT_EQ(sc(0, 0, 2, j), T(j == 1 ? 1 : 0));
  }
}

TYPED_TEST(Properties, NegativeInfinityScoresAreIgnored) {
  using T = typename TestFixture::T;
  host_tensor<T, 4> s({1, 1, 40, 90});
  fill(s, 4, 2.0);
  for (index_t i = 0; i < 40; ++i)
    for (index_t j = (i * 7) % 5; j < 90; j += 3) s(0, 0, i, j) = -TestFixture::inf;
  host_tensor<T, 4> want = s;
  softmax_rows(this->policy, s.view());
  softmax_rows(reference, want.view());
  EXPECT_TRUE(all_finite(s));
  EXPECT_TRUE(close(s, want));
}

}  // namespace
}  // namespace attn::test
