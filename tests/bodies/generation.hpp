#pragma once
/// \file
/// Generation: grouped-query attention, sliding windows and per-row key counts against
/// explicit masks, decoding token by token through a KV cache against one causal call, the
/// merge of two halves against the whole, packed variable-length batches, and the split-KV
/// decode path at long key axes. Bodies over a backend case C (see stages.hpp).

#include <attn/ops/kv_cache.hpp>
#include <attn/ops/merge.hpp>

#include "../support/testing.hpp"
#include "stages.hpp"

namespace attn::test {

/// Attention written out with an explicit mask: visible(b, i, j) decides, nothing else.
template <class R, class Visible>
host_tensor<R, 4> explicit_mask_attention(const host_tensor<R, 4>& q, const host_tensor<R, 4>& k,
                                          const host_tensor<R, 4>& v, double scale,
                                          Visible&& visible) {
  const index_t B = q.extent(0), H = q.extent(1), Tq = q.extent(2), Tk = k.extent(2);
  const index_t G = H / k.extent(1), Dv = v.extent(3);
  host_tensor<R, 4> o({B, H, Tq, Dv});
  for (index_t b = 0; b < B; ++b)
    for (index_t h = 0; h < H; ++h)
      for (index_t i = 0; i < Tq; ++i) {
        std::vector<double> p(std::size_t(Tk), 0.0);
        double m = -INFINITY, sum = 0;
        for (index_t j = 0; j < Tk; ++j)
          if (visible(b, i, j)) {
            double dot = 0;
            for (index_t d = 0; d < q.extent(3); ++d)
              dot += double(q(b, h, i, d)) * k(b, h / G, j, d);
            p[std::size_t(j)] = dot * scale;
            m = std::max(m, p[std::size_t(j)]);
          }
        for (index_t j = 0; j < Tk; ++j)
          if (visible(b, i, j)) sum += (p[std::size_t(j)] = std::exp(p[std::size_t(j)] - m));
        for (index_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (index_t j = 0; j < Tk; ++j)
            if (visible(b, i, j)) acc += p[std::size_t(j)] / sum * v(b, h / G, j, d);
          o(b, h, i, d) = R(sum > 0 ? acc : 0.0);
        }
      }
  return o;
}

/// Grouped-query attention equals the same problem with every key/value head repeated.
template <class C>
void gqa_equals_repeated_heads(const shape& s, bool causal) {
  using T = typename C::value;
  const qkv<C> in(s);
  const index_t G = s.H / s.kv_heads();
  host_tensor<T, 4> k_rep({s.B, s.H, s.Tk, s.D}), v_rep({s.B, s.H, s.Tk, s.Dv});
  for (index_t b = 0; b < s.B; ++b)
    for (index_t h = 0; h < s.H; ++h)
      for (index_t j = 0; j < s.Tk; ++j) {
        for (index_t d = 0; d < s.D; ++d) k_rep(b, h, j, d) = in.k(b, h / G, j, d);
        for (index_t d = 0; d < s.Dv; ++d) v_rep(b, h, j, d) = in.v(b, h / G, j, d);
      }
  host_tensor<T, 4> grouped({s.B, s.H, s.Tq, s.Dv}), repeated({s.B, s.H, s.Tq, s.Dv});
  attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), grouped.view(), {.causal = causal});
  attention(C::policy(), in.q.view(), k_rep.view(), v_rep.view(), repeated.view(),
            {.causal = causal});
  EXPECT_TRUE(close(grouped, repeated));
}

/// Windows and per-row key counts against attention with an explicit mask, written from the
/// rule's definition: position p = i + L - Tq; causal: p - w < j <= p; else |j - p| < w.
template <class C>
void window_and_lengths_match_an_explicit_mask(const shape& s, bool causal) {
  using T = typename C::value;
  using R = typename C::ref;
  const qkv<C> in(s);
  std::vector<std::int32_t> lengths;
  for (index_t b = 0; b < s.B; ++b) lengths.push_back(std::int32_t(s.Tk - (b * 7) % (s.Tk + 1)));
  for (index_t w : {0, 1, 6, 40}) {
    SCOPED_TRACE("window " + std::to_string(w));
    const auto visible = [&](index_t b, index_t i, index_t j) {
      const index_t L = lengths[std::size_t(b)], p = i + L - s.Tq;
      if (j >= L) return false;
      if (causal && j > p) return false;
      if (w > 0 && j <= p - w) return false;
      if (w > 0 && !causal && j >= p + w) return false;
      return true;
    };
    const attention_options opt{.causal = causal, .window = w};
    const host_tensor<R, 4> want =
        explicit_mask_attention(in.rq, in.rk, in.rv, 1.0 / std::sqrt(double(s.D)), visible);
    host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Dv});
    host_tensor<std::int32_t, 1> len(dims<1>{s.B});
    for (index_t b = 0; b < s.B; ++b) len(b) = lengths[std::size_t(b)];
    attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), got.view(), opt, len.view());
    if constexpr (std::is_same_v<T, R>)
      EXPECT_TRUE(close(got, want));
    else
      EXPECT_LT(max_error(got, want), 4 * tolerance<T>::rel);
  }
}

/// Decoding through a cache, one token at a time after prefills of different lengths, gives
/// what one causal call over each whole sequence gives.
template <class C>
void decode_through_a_cache_equals_one_causal_call(const shape& s, bool) {
  using T = typename C::value;
  const index_t steps = s.Tq;                                    // decoded positions
  const std::vector<index_t> prefill = {s.Tk, s.Tk / 2 + 1, 3};  // per sequence (B <= 3)
  const index_t B = s.B, Hkv = s.kv_heads(), cap = s.Tk + steps;
  // The whole sequences: q, k, v of prefill + steps positions each.
  const shape full{B, s.H, cap, cap, s.D, s.Dv, s.Hkv};
  const qkv<C> in(full);
  kv_cache<T> cache(
      {.batch = B, .kv_heads = Hkv, .capacity = cap, .head_dim = s.D, .value_dim = s.Dv});
  for (index_t b = 0; b < B; ++b) {
    for (index_t h = 0; h < Hkv; ++h)
      for (index_t t = 0; t < prefill[std::size_t(b)]; ++t) {
        for (index_t d = 0; d < s.D; ++d) cache.keys()(b, h, t, d) = in.k(b, h, t, d);
        for (index_t d = 0; d < s.Dv; ++d) cache.values()(b, h, t, d) = in.v(b, h, t, d);
      }
    cache.set_length(b, prefill[std::size_t(b)]);
  }
  // got[b, h, t] for the decoded positions t of each sequence.
  host_tensor<T, 4> got({B, s.H, steps, s.Dv});
  for (index_t step = 0; step < steps; ++step) {
    host_tensor<T, 4> q1({B, s.H, 1, s.D}), k1({B, Hkv, 1, s.D}), v1({B, Hkv, 1, s.Dv}),
        o1({B, s.H, 1, s.Dv});
    for (index_t b = 0; b < B; ++b) {
      const index_t t = prefill[std::size_t(b)] + step;
      for (index_t h = 0; h < s.H; ++h)
        for (index_t d = 0; d < s.D; ++d) q1(b, h, 0, d) = in.q(b, h, t, d);
      for (index_t h = 0; h < Hkv; ++h) {
        for (index_t d = 0; d < s.D; ++d) k1(b, h, 0, d) = in.k(b, h, t, d);
        for (index_t d = 0; d < s.Dv; ++d) v1(b, h, 0, d) = in.v(b, h, t, d);
      }
    }
    cache.append(C::policy(), k1.view(), v1.view());
    attention(C::policy(), q1.view(), cache, o1.view(), {.causal = true});
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < s.H; ++h)
        for (index_t d = 0; d < s.Dv; ++d) got(b, h, step, d) = o1(b, h, 0, d);
  }
  for (index_t b = 0; b < B; ++b) {
    const index_t n = prefill[std::size_t(b)] + steps;
    EXPECT_EQ(cache.length(b), n);
    // One causal call over sequence b alone.
    const auto first = [&](const host_tensor<T, 4>& t, index_t rows) {
      return tensor_view<const T, 4>{t.data() + b * t.extent(1) * t.extent(2) * t.extent(3),
                                     {1, t.extent(1), rows, t.extent(3)},
                                     {0, t.extent(2) * t.extent(3), t.extent(3), 1}};
    };
    host_tensor<T, 4> whole({1, s.H, n, s.Dv});
    attention(C::policy(), first(in.q, n), first(in.k, n), first(in.v, n), whole.view(),
              {.causal = true});
    host_tensor<T, 4> want({1, s.H, steps, s.Dv}), mine({1, s.H, steps, s.Dv});
    for (index_t h = 0; h < s.H; ++h)
      for (index_t t = 0; t < steps; ++t)
        for (index_t d = 0; d < s.Dv; ++d) {
          want(0, h, t, d) = whole(0, h, n - steps + t, d);
          mine(0, h, t, d) = got(b, h, t, d);
        }
    if constexpr (std::is_same_v<T, typename C::ref>)
      EXPECT_TRUE(close(mine, want)) << "sequence " << b;
    else
      EXPECT_LT(max_error(mine, want), 4 * tolerance<T>::rel) << "sequence " << b;
  }
}

/// Attention over two halves of the keys, merged, equals attention over all of them.
template <class C>
void merge_of_two_halves_equals_the_whole(const shape& s, bool) {
  using T = typename C::value;
  const qkv<C> in(s);
  const index_t half = s.Tk / 2;
  const auto keys = [&](const host_tensor<T, 4>& t, index_t j0, index_t n) {
    return tensor_view<const T, 4>{
        t.data() + j0 * t.extent(3),
        {t.extent(0), t.extent(1), n, t.extent(3)},
        {t.extent(1) * t.extent(2) * t.extent(3), t.extent(2) * t.extent(3), t.extent(3), 1}};
  };
  host_tensor<T, 4> oa({s.B, s.H, s.Tq, s.Dv}), ob(oa.extents()), whole(oa.extents()),
      merged(oa.extents());
  host_tensor<accum_t<T>, 3> la({s.B, s.H, s.Tq}), lb(la.extents()), lw(la.extents()),
      lm(la.extents());
  attention(C::policy(), in.q.view(), keys(in.k, 0, half), keys(in.v, 0, half), oa.view(),
            la.view());
  attention(C::policy(), in.q.view(), keys(in.k, half, s.Tk - half), keys(in.v, half, s.Tk - half),
            ob.view(), lb.view());
  attention(C::policy(), in.q.view(), in.k.view(), in.v.view(), whole.view(), lw.view());
  merge_attention(C::policy(), oa.view(), la.view(), ob.view(), lb.view(), merged.view(),
                  lm.view());
  const double factor = std::is_same_v<T, typename C::ref> ? 1.0 : 4.0;
  EXPECT_TRUE(close(merged, whole, factor));
  EXPECT_TRUE(close(lm, lw, factor));
  // In place, into the first half's buffers.
  merge_attention(C::policy(), oa.view(), la.view(), ob.view(), lb.view(), oa.view(), la.view());
  EXPECT_TRUE(close(oa, whole, factor));
}

/// Packed variable-length sequences equal one attention call per sequence.
template <class C>
void varlen_equals_one_call_per_sequence(const shape& s, bool causal) {
  using T = typename C::value;
  const std::vector<std::int32_t> lq = {std::int32_t(s.Tq), 1, std::int32_t(s.Tq / 2 + 3)};
  const std::vector<std::int32_t> lk = {std::int32_t(s.Tk), 9, std::int32_t(s.Tk / 3 + 5)};
  std::vector<std::int32_t> cq = {0}, ck = {0};
  for (std::size_t b = 0; b < lq.size(); ++b) {
    cq.push_back(cq.back() + lq[b]);
    ck.push_back(ck.back() + lk[b]);
  }
  const index_t Hkv = s.kv_heads();
  const host_tensor<T, 3> q = random<T, 3>({cq.back(), s.H, s.D}, 41);
  const host_tensor<T, 3> k = random<T, 3>({ck.back(), Hkv, s.D}, 42);
  const host_tensor<T, 3> v = random<T, 3>({ck.back(), Hkv, s.Dv}, 43);
  host_tensor<T, 3> o({cq.back(), s.H, s.Dv});
  attention_varlen(C::policy(), q.view(), k.view(), v.view(), o.view(), cq, ck, {.causal = causal});
  for (std::size_t b = 0; b < lq.size(); ++b) {
    const auto seq = [&](const host_tensor<T, 3>& t, index_t begin, index_t n) {
      host_tensor<T, 4> out({1, t.extent(1), n, t.extent(2)});
      for (index_t i = 0; i < n; ++i)
        for (index_t h = 0; h < t.extent(1); ++h)
          for (index_t d = 0; d < t.extent(2); ++d) out(0, h, i, d) = t(begin + i, h, d);
      return out;
    };
    const auto qb = seq(q, cq[b], lq[b]), kb = seq(k, ck[b], lk[b]), vb = seq(v, ck[b], lk[b]);
    host_tensor<T, 4> want({1, s.H, lq[b], s.Dv});
    attention(C::policy(), qb.view(), kb.view(), vb.view(), want.view(), {.causal = causal});
    const host_tensor<T, 4> got = seq(o, cq[b], lq[b]);
    EXPECT_TRUE(close(got, want)) << "sequence " << b;
  }
}

/// Every bad call of the generation API throws shape_error naming the argument, and leaves the
/// cache and every output as they were.
template <class C>
void generation_errors_throw_before_writing() {
  using T = typename C::value;
  const auto pol = C::policy();
  kv_cache<T> cache({.batch = 2, .kv_heads = 2, .capacity = 8, .head_dim = 4});
  for (index_t i = 0; i < cache.keys().size(); ++i) {
    cache.keys().data()[i] = from_double<T>(42);
    cache.values().data()[i] = from_double<T>(42);
  }
  cache.set_length(0, 5);
  cache.set_length(1, 7);
  const auto untouched = [&] {
    for (index_t i = 0; i < cache.keys().size(); ++i)
      if (to_double(cache.keys().data()[i]) != 42 || to_double(cache.values().data()[i]) != 42)
        return false;
    return cache.length(0) == 5 && cache.length(1) == 7;
  };
  const auto throws = [&](const char* what, auto&& f) {
    try {
      f();
      ADD_FAILURE() << "no exception, expected one naming " << what;
    } catch (const shape_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    EXPECT_TRUE(untouched()) << what;
  };
  const host_tensor<T, 4> two({2, 2, 2, 4}), one({2, 2, 1, 4}), wrong_heads({2, 3, 1, 4}),
      wrong_dim({2, 2, 1, 5}), wrong_batch({1, 2, 1, 4});
  throws("capacity", [&] { cache.append(pol, two.view(), two.view()); });  // 7 + 2 > 8
  throws("k_new.Hkv", [&] { cache.append(pol, wrong_heads.view(), wrong_heads.view()); });
  throws("k_new.D", [&] { cache.append(pol, wrong_dim.view(), one.view()); });
  throws("k_new.B", [&] { cache.append(pol, wrong_batch.view(), wrong_batch.view()); });
  throws("v_new.Tnew", [&] { cache.append(pol, one.view(), two.view()); });
  throws("n is 9", [&] { cache.set_length(0, 9); });
  throws("n is -1", [&] { cache.set_length(1, -1); });
  throws("b is 2", [&] { cache.set_length(2, 1); });
  // The new positions must not come from the cache itself.
  const tensor_view<const T, 4> own_keys{cache.keys().data(), {2, 2, 1, 4}, cache.keys().strides()};
  throws("the cache's keys overlaps k_new", [&] { cache.append(pol, own_keys, one.view()); });
  host_tensor<T, 4> o({2, 3, 1, 4}), q3({2, 3, 1, 4}), q_batch({3, 2, 1, 4});
  for (index_t i = 0; i < o.size(); ++i) o.data()[i] = from_double<T>(42);
  throws("k.H", [&] { attention(pol, q3.view(), cache, o.view()); });  // 2 heads do not divide 3
  throws("the cache's batch", [&] { attention(pol, q_batch.view(), cache, o.view()); });
  const host_tensor<T, 4> q2({2, 2, 1, 4});
  const tensor_view<T, 4> o_in_cache{cache.values().data(), {2, 2, 1, 4}, cache.values().strides()};
  throws("o overlaps v", [&] { attention(pol, q2.view(), cache, o_in_cache); });
  for (index_t i = 0; i < o.size(); ++i) EXPECT_EQ(to_double(o.data()[i]), 42);
  // Per-row key counts out of range, and malformed packed offsets.
  const shape s{2, 2, 3, 5, 4, 4};
  const qkv<C> in(s);
  host_tensor<T, 4> out({2, 2, 3, 4});
  for (index_t i = 0; i < out.size(); ++i) out.data()[i] = from_double<T>(42);
  const std::vector<std::int32_t> too_long = {5, 6}, negative = {-1, 3}, three = {1, 2, 3};
  for (const auto* lengths : {&too_long, &negative, &three}) try {
      attention(pol, in.q.view(), in.k.view(), in.v.view(), out.view(), {}, *lengths);
      ADD_FAILURE() << "no exception";
    } catch (const shape_error& e) {
      EXPECT_NE(std::string(e.what()).find("kv_lengths"), std::string::npos) << e.what();
    }
  const host_tensor<T, 3> qv({6, 2, 4}), kvv({9, 2, 4});
  host_tensor<T, 3> ov({6, 2, 4});
  for (index_t i = 0; i < ov.size(); ++i) ov.data()[i] = from_double<T>(42);
  const std::vector<std::int32_t> cq = {0, 2, 6}, ck_bad_end = {0, 4, 8}, ck_decreasing = {0, 5, 4},
                                  ck_short = {0, 9};
  for (const auto* ck : {&ck_bad_end, &ck_decreasing, &ck_short}) try {
      attention_varlen(pol, qv.view(), kvv.view(), kvv.view(), ov.view(), cq, *ck);
      ADD_FAILURE() << "no exception";
    } catch (const shape_error& e) {
      EXPECT_NE(std::string(e.what()).find("cu_seqlens_k"), std::string::npos) << e.what();
    }
  for (index_t i = 0; i < out.size(); ++i) EXPECT_EQ(to_double(out.data()[i]), 42);
  for (index_t i = 0; i < ov.size(); ++i) EXPECT_EQ(to_double(ov.data()[i]), 42);
  // merge_attention with disagreeing extents.
  host_tensor<accum_t<T>, 3> la({2, 2, 3}), lb({2, 2, 4});
  try {
    merge_attention(pol, out.view(), la.view(), out.view(), lb.view(), out.view());
    ADD_FAILURE() << "no exception";
  } catch (const shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("lse_b"), std::string::npos) << e.what();
  }
}

template <class Cases>
void register_generation_tests(Cases cases, const std::vector<shape>& gqa,
                               const std::vector<shape>& masks, const std::vector<shape>& decode) {
  ATTN_REGISTER_SHAPE_TEST(cases, "Generation", "GqaEqualsRepeatedHeads", gqa_equals_repeated_heads,
                           gqa, ({false, true}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Generation", "WindowAndLengthsMatchExplicitMask",
                           window_and_lengths_match_an_explicit_mask, masks, ({false, true}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Generation", "DecodeThroughCacheEqualsCausalCall",
                           decode_through_a_cache_equals_one_causal_call, decode, ({false}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Generation", "MergeOfHalvesEqualsWhole",
                           merge_of_two_halves_equals_the_whole, masks, ({false}));
  ATTN_REGISTER_SHAPE_TEST(cases, "Generation", "VarlenEqualsOneCallPerSequence",
                           varlen_equals_one_call_per_sequence, masks, ({false, true}));
  ATTN_REGISTER_TEST(cases, "Generation", "ErrorsThrowBeforeWriting",
                     generation_errors_throw_before_writing);
}

}  // namespace attn::test
