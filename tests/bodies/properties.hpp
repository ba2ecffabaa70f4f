#pragma once
/// \file
/// Properties the seed states, and inputs that break naive implementations: bodies over a
/// backend case C (see stages.hpp).

#include <limits>

#include "../support/testing.hpp"

namespace attn::test {

template <class C>
void softmax_rows_sum_to_one_and_are_non_negative() {
  using T = typename C::value;
  for (bool causal : {false, true}) {
    host_tensor<T, 4> s = random<T, 4>({2, 3, 65, 65}, 3, 8.0);
    if (causal) causal_mask(C::policy(), s.view());
    softmax_rows(C::policy(), s.view());
    for (index_t b = 0; b < 2; ++b)
      for (index_t h = 0; h < 3; ++h)
        for (index_t i = 0; i < 65; ++i) {
          double sum = 0;
          for (index_t j = 0; j < 65; ++j) {
            ASSERT_GE(to_double(s(b, h, i, j)), 0.0);
            sum += to_double(s(b, h, i, j));
          }
          ASSERT_NEAR(sum, 1.0, 65 * tolerance<T>::rel) << "row " << i;
        }
  }
}

template <class C>
void masked_probabilities_are_exactly_zero() {
  using T = typename C::value;
  host_tensor<T, 4> s = random<T, 4>({1, 2, 63, 100}, 5, 4.0);  // query i sees keys j <= i + 37
  causal_mask(C::policy(), s.view());
  softmax_rows(C::policy(), s.view());
  for (index_t h = 0; h < 2; ++h)
    for (index_t i = 0; i < 63; ++i)
      for (index_t j = 0; j < 100; ++j) {
        if (j > i + 37)
          ASSERT_EQ(to_double(s(0, h, i, j)), 0.0) << i << "," << j;
        else
          ASSERT_GT(to_double(s(0, h, i, j)), 0.0) << i << "," << j;
      }
}

template <class C>
void row_zero_of_a_causal_square_attends_only_to_itself() {
  using T = typename C::value;
  const shape s{1, 1, 70, 70, 16, 16};
  const qkv<C> in(s);
  host_tensor<T, 4> o({1, 1, 70, 16});
  attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), {.causal = true});
  for (index_t d = 0; d < 16; ++d)
    EXPECT_NEAR(to_double(o(0, 0, 0, d)), to_double(in.v(0, 0, 0, d)), tolerance<T>::abs);
}

template <class C>
void future_tokens_never_change_earlier_outputs() {
  using T = typename C::value;
  const shape s{1, 2, 150, 150, 64, 64};
  const qkv<C> a(s);
  qkv<C> b(s);
  const index_t t0 = 70;  // positions > t0 get new keys and values
  for (index_t h = 0; h < 2; ++h)
    for (index_t t = t0 + 1; t < 150; ++t)
      for (index_t d = 0; d < 64; ++d) {
        b.k(0, h, t, d) = from_double<T>(1000 * to_double(b.k(0, h, t, d)));
        b.v(0, h, t, d) = from_double<T>(-7 + to_double(b.v(0, h, t, d)));
      }
  host_tensor<T, 4> oa({1, 2, 150, 64}), ob({1, 2, 150, 64});
  attention(C::policy(), a.q.view(), a.k.view(), a.v.view(), oa.view(), {.causal = true});
  attention(C::policy(), b.q.view(), b.k.view(), b.v.view(), ob.view(), {.causal = true});
  for (index_t h = 0; h < 2; ++h)
    for (index_t t = 0; t <= t0; ++t)
      for (index_t d = 0; d < 64; ++d)
        ASSERT_EQ(to_double(oa(0, h, t, d)), to_double(ob(0, h, t, d))) << t;
  EXPECT_NE(to_double(oa(0, 0, 149, 0)), to_double(ob(0, 0, 149, 0)));  // later ones change
}

/// NaN and Inf stored where the mask hides them (future positions, past a row's key count,
/// outside the window) never reach a row's result; the same values where a row sees them make
/// that row NaN, as IEEE arithmetic would.
template <class C>
void non_finite_values_count_only_where_visible() {
  using T = typename C::value;
  const T nan = from_double<T>(NAN), inf = from_double<T>(INFINITY);
  const auto poison = [&](qkv<C>& in, index_t from, index_t to, index_t below = 0) {
    for (index_t h = 0; h < in.k.extent(1); ++h)
      for (index_t t = 0; t < in.k.extent(2); ++t)
        if ((t >= from && t < to) || t < below) {
          in.k(0, h, t, t % in.k.extent(3)) = (t % 2) ? nan : inf;
          in.v(0, h, t, (t + 1) % in.v.extent(3)) = (t % 3) ? inf : nan;
        }
  };
  const auto rows_equal = [](const host_tensor<T, 4>& a, const host_tensor<T, 4>& b, index_t rows) {
    for (index_t h = 0; h < a.extent(1); ++h)
      for (index_t i = 0; i < rows; ++i)
        for (index_t d = 0; d < a.extent(3); ++d)
          if (!(to_double(a(0, h, i, d)) == to_double(b(0, h, i, d)))) return false;
    return true;
  };
  {  // causal: keys and values after position 70 poisoned; rows up to 70 unchanged
    const shape s{1, 2, 150, 150, 64, 64};
    const qkv<C> clean(s);
    qkv<C> dirty(s);
    poison(dirty, 71, 150);
    host_tensor<T, 4> oc({1, 2, 150, 64}), od({1, 2, 150, 64});
    attention(C::policy(), clean.q.view(), clean.k.view(), clean.v.view(), oc.view(),
              {.causal = true});
    attention(C::policy(), dirty.q.view(), dirty.k.view(), dirty.v.view(), od.view(),
              {.causal = true});
    EXPECT_TRUE(rows_equal(oc, od, 71));
    EXPECT_TRUE(std::isnan(to_double(od(0, 0, 71, 5))));  // row 71 sees key 71's NaN score
    // with a window of 20, rows from 100 on never see keys below 81
    qkv<C> far(s);
    poison(far, 0, 0, 81);
    host_tensor<T, 4> ow({1, 2, 150, 64}), ofar({1, 2, 150, 64});
    attention(C::policy(), clean.q.view(), clean.k.view(), clean.v.view(), ow.view(),
              {.causal = true, .window = 20});
    attention(C::policy(), far.q.view(), far.k.view(), far.v.view(), ofar.view(),
              {.causal = true, .window = 20});
    for (index_t h = 0; h < 2; ++h)
      for (index_t i = 100; i < 150; ++i)
        for (index_t d = 0; d < 64; ++d)
          ASSERT_EQ(to_double(ow(0, h, i, d)), to_double(ofar(0, h, i, d))) << i;
  }
  {  // one query against 3000 keys (the split-KV decode path), garbage past the length
    const shape s{1, 2, 1, 3000, 64, 64};
    const qkv<C> clean(s);
    qkv<C> dirty(s);
    poison(dirty, 2500, 3000);
    const std::vector<std::int32_t> len = {2500};
    host_tensor<T, 4> oc({1, 2, 1, 64}), od({1, 2, 1, 64});
    attention(C::policy(), clean.q.view(), clean.k.view(), clean.v.view(), oc.view(), {}, len);
    attention(C::policy(), dirty.q.view(), dirty.k.view(), dirty.v.view(), od.view(), {}, len);
    EXPECT_TRUE(rows_equal(oc, od, 1));
    EXPECT_TRUE(all_finite(od));
    attention(C::policy(), dirty.q.view(), dirty.k.view(), dirty.v.view(), od.view());
    EXPECT_TRUE(std::isnan(to_double(od(0, 1, 0, 0))));  // all 3000 visible: NaN
  }
  {  // a group of 32 query rows (8 heads x 4 queries per key head, the decode kernel's tiled
     // blocks): garbage past the length stays out, and key 2499, which under the causal mask
     // only each head's last query sees, makes that query NaN and no other
    const shape s{1, 16, 4, 3000, 40, 24, 2};
    const qkv<C> clean(s);
    qkv<C> dirty(s);
    poison(dirty, 2499, 3000);
    const std::vector<std::int32_t> len = {2500};
    host_tensor<T, 4> oc({1, 16, 4, 24}), od({1, 16, 4, 24});
    attention(C::policy(), clean.q.view(), clean.k.view(), clean.v.view(), oc.view(),
              {.causal = true}, len);
    attention(C::policy(), dirty.q.view(), dirty.k.view(), dirty.v.view(), od.view(),
              {.causal = true}, len);
    EXPECT_TRUE(rows_equal(oc, od, 3));
    for (index_t h = 0; h < 16; ++h) EXPECT_TRUE(std::isnan(to_double(od(0, h, 3, 0)))) << h;
  }
  {  // a NaN query makes its own row NaN, not zeros
    const shape s{1, 1, 9, 9, 16, 16};
    qkv<C> in(s);
    in.q(0, 0, 4, 3) = nan;
    host_tensor<T, 4> o({1, 1, 9, 16});
    attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), {.causal = true});
    for (index_t d = 0; d < 16; ++d) EXPECT_TRUE(std::isnan(to_double(o(0, 0, 4, d))));
    EXPECT_TRUE(std::isfinite(to_double(o(0, 0, 3, 0))));
  }
  // Scores of +inf (a -inf query under a negative scale) give inf - inf: NaN output and lse, on
  // the decode path (one query, two heads per KV head: split-KV chunks and their merge) and the
  // item kernel (17 queries); the other head stays finite.
  for (index_t Tq : {1, 17}) {
    const shape s{1, 2, Tq, 40, 8, 8, 1};
    qkv<C> in(s);
    for (index_t i = 0; i < Tq; ++i) in.q(0, 0, i, 0) = from_double<T>(-INFINITY);
    host_tensor<T, 4> o({1, 2, Tq, 8});
    host_tensor<accum_t<T>, 3> lse({1, 2, Tq});
    attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
              {.scale = -1.0});
    EXPECT_TRUE(std::isnan(to_double(o(0, 0, 0, 0)))) << Tq;
    EXPECT_TRUE(std::isnan(double(lse(0, 0, Tq - 1)))) << Tq;
    EXPECT_TRUE(std::isfinite(double(lse(0, 1, 0)))) << Tq;
  }
  // Scores that are all -inf where a row sees keys (a -inf query against positive keys) end
  // as one pass over the keys ends them, 0 / 0: NaN output with lse -inf, not the zeros of a
  // row that sees no key. On the decode path (one query, two heads per KV head) over one chunk
  // of keys and over several (their merge), with a strided lse that the kernel cannot write in
  // place, and on the item kernel (17 queries); the other head stays finite.
  for (index_t Tq : {1, 17})
    for (index_t Tk : {40, 1500}) {
      const shape s{1, 2, Tq, Tk, 8, 8, 1};
      qkv<C> in(s);
      for (index_t i = 0; i < Tq; ++i) in.q(0, 0, i, 0) = from_double<T>(-INFINITY);
      for (index_t j = 0; j < Tk; ++j)
        in.k(0, 0, j, 0) = from_double<T>(0.25 + std::fabs(to_double(in.k(0, 0, j, 0))));
      host_tensor<T, 4> o({1, 2, Tq, 8});
      host_tensor<accum_t<T>, 3> lse_memory({1, 2, 2 * Tq});
      const tensor_view<accum_t<T>, 3> lse(lse_memory.data(), {1, 2, Tq}, {4 * Tq, 2 * Tq, 2});
      attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse, {});
      for (index_t i = 0; i < Tq; ++i) {
        EXPECT_TRUE(std::isnan(to_double(o(0, 0, i, 3)))) << Tq << " " << Tk << " " << i;
        EXPECT_EQ(double(lse(0, 0, i)), -INFINITY) << Tq << " " << Tk << " " << i;
        EXPECT_TRUE(std::isfinite(to_double(o(0, 1, i, 3)))) << Tq << " " << Tk << " " << i;
      }
    }
  // Keys 0-1023 with scores of -inf (a -inf key against positive queries) beside finite ones:
  // their p is exactly 0, so their values add 0, but 0 x NaN where one of them is NaN, in its
  // column only. On the decode path that is a whole chunk of -inf scores merged with finite
  // ones (one query, and four: 8 rows of a group, the tiled blocks), and on the item kernel.
  for (index_t Tq : {1, 4, 17}) {
    const shape s{1, 2, Tq, 1500, 8, 8, 1};
    qkv<C> in(s);
    for (index_t h = 0; h < 2; ++h)
      for (index_t i = 0; i < Tq; ++i)
        in.q(0, h, i, 0) = from_double<T>(0.25 + std::fabs(to_double(in.q(0, h, i, 0))));
    for (index_t j = 0; j < 1024; ++j) in.k(0, 0, j, 0) = from_double<T>(-INFINITY);
    host_tensor<T, 4> clean({1, 2, Tq, 8}), dirty({1, 2, Tq, 8});
    attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), clean.view());
    in.v(0, 0, 700, 5) = nan;
    attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), dirty.view());
    EXPECT_TRUE(all_finite(clean)) << Tq;
    for (index_t h = 0; h < 2; ++h)
      for (index_t i = 0; i < Tq; ++i)
        for (index_t d = 0; d < 8; ++d) {
          if (d == 5)
            EXPECT_TRUE(std::isnan(to_double(dirty(0, h, i, d)))) << Tq << " " << h << " " << i;
          else
            EXPECT_EQ(to_double(dirty(0, h, i, d)), to_double(clean(0, h, i, d)))
                << Tq << " " << h << " " << i << " " << d;
        }
  }
  {  // merging a NaN part with one that saw no key (lse -inf) gives NaN, in either order
    host_tensor<T, 4> oa({1, 1, 1, 2}), ob({1, 1, 1, 2}), o({1, 1, 1, 2});
    host_tensor<accum_t<T>, 3> la({1, 1, 1}), lb({1, 1, 1}), lse({1, 1, 1});
    oa(0, 0, 0, 0) = oa(0, 0, 0, 1) = nan;
    la(0, 0, 0) = accum_t<T>(NAN);
    lb(0, 0, 0) = -std::numeric_limits<accum_t<T>>::infinity();
    for (bool swap : {false, true}) {
      if (swap)
        merge_attention(C::policy(), ob.view(), lb.view(), oa.view(), la.view(), o.view(),
                        lse.view());
      else
        merge_attention(C::policy(), oa.view(), la.view(), ob.view(), lb.view(), o.view(),
                        lse.view());
      EXPECT_TRUE(std::isnan(to_double(o(0, 0, 0, 1)))) << swap;
      EXPECT_TRUE(std::isnan(double(lse(0, 0, 0)))) << swap;
    }
  }
}

template <class C>
void softmax_is_shift_invariant() {
  using T = typename C::value;
  host_tensor<T, 4> s = random<T, 4>({1, 2, 33, 77}, 8, 3.0);
  host_tensor<T, 4> shifted = s;
  for (index_t i = 0; i < shifted.size(); ++i)
    shifted.data()[i] = from_double<T>(to_double(shifted.data()[i]) + 16);
  softmax_rows(C::policy(), s.view());
  softmax_rows(C::policy(), shifted.view());
  EXPECT_TRUE(close(shifted, s, 4.0));  // adding 16 rounds the inputs by up to 2^-20 (float)
}

template <class C>
void huge_scores_stay_finite() {
  using T = typename C::value;
  // Scores of magnitude up to ~1e4: exp would overflow without the max subtraction.
  const shape s{1, 2, 65, 65, 64, 64};
  const qkv<C> in(s, 1, 300.0);
  for (bool causal : {false, true}) {
    host_tensor<T, 4> o({1, 2, 65, 64});
    host_tensor<accum_t<T>, 3> lse({1, 2, 65});
    attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
              {.causal = causal});
    EXPECT_TRUE(all_finite(o));
    EXPECT_TRUE(all_finite(lse));
    for (index_t i = 0; i < o.size(); ++i) ASSERT_LE(std::abs(to_double(o.data()[i])), 1 + 1e-5);

    host_tensor<T, 4> p({1, 2, 65, 65});
    scaled_scores(C::policy(), in.q.view(), in.k.view(), p.view());
    double biggest = 0;
    for (index_t i = 0; i < p.size(); ++i)
      biggest = std::max(biggest, std::abs(to_double(p.data()[i])));
    EXPECT_GT(biggest, 5e3);
    if (causal) causal_mask(C::policy(), p.view());
    softmax_rows(C::policy(), p.view());
    EXPECT_TRUE(all_finite(p));
  }
}

template <class C>
void a_row_of_only_minus_infinity_becomes_zeros() {
  using T = typename C::value;
  host_tensor<T, 4> sc({1, 1, 3, 4});
  for (index_t i = 0; i < sc.size(); ++i) sc.data()[i] = from_double<T>(-INFINITY);
  sc(0, 0, 2, 1) = from_double<T>(1e4);  // the last row has one finite entry among -inf
  softmax_rows(C::policy(), sc.view());
  for (index_t j = 0; j < 4; ++j) {
    EXPECT_EQ(to_double(sc(0, 0, 0, j)), 0.0);
    EXPECT_EQ(to_double(sc(0, 0, 2, j)), j == 1 ? 1.0 : 0.0);
  }
}

template <class C>
void negative_infinity_scores_are_ignored() {
  using T = typename C::value;
  host_tensor<T, 4> s = random<T, 4>({1, 1, 40, 90}, 4, 2.0);
  for (index_t i = 0; i < 40; ++i)
    for (index_t j = (i * 7) % 5; j < 90; j += 3) s(0, 0, i, j) = from_double<T>(-INFINITY);
  host_tensor<typename C::ref, 4> want = convert<typename C::ref>(s);
  softmax_rows(C::policy(), s.view());
  softmax_rows(reference, want.view());
  EXPECT_TRUE(all_finite(s));
  EXPECT_TRUE(close(s, want));
}

template <class Cases>
void register_property_tests(Cases cases) {
  ATTN_REGISTER_TEST(cases, "Properties", "SoftmaxRowsSumToOne",
                     softmax_rows_sum_to_one_and_are_non_negative);
  ATTN_REGISTER_TEST(cases, "Properties", "MaskedProbabilitiesAreExactlyZero",
                     masked_probabilities_are_exactly_zero);
  ATTN_REGISTER_TEST(cases, "Properties", "RowZeroAttendsOnlyToItself",
                     row_zero_of_a_causal_square_attends_only_to_itself);
  ATTN_REGISTER_TEST(cases, "Properties", "FutureTokensNeverChangeEarlierOutputs",
                     future_tokens_never_change_earlier_outputs);
  ATTN_REGISTER_TEST(cases, "Properties", "SoftmaxIsShiftInvariant", softmax_is_shift_invariant);
  ATTN_REGISTER_TEST(cases, "Properties", "NonFiniteValuesCountOnlyWhereVisible",
                     non_finite_values_count_only_where_visible);
  ATTN_REGISTER_TEST(cases, "Properties", "HugeScoresStayFinite", huge_scores_stay_finite);
  ATTN_REGISTER_TEST(cases, "Properties", "OnlyMinusInfinityRowBecomesZeros",
                     a_row_of_only_minus_infinity_becomes_zeros);
  ATTN_REGISTER_TEST(cases, "Properties", "NegativeInfinityScoresAreIgnored",
                     negative_infinity_scores_are_ignored);
}

}  // namespace attn::test
