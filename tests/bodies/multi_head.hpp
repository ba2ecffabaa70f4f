#pragma once
/// \file
/// multi_head_attention against the reference: odd shapes, grouped key heads, biases, and the
/// workspace it fills for the backward pass. Bodies over a backend case C (see stages.hpp).

#include <attn/ops/multi_head.hpp>

#include "../support/testing.hpp"

namespace attn::test {

/// Random layer weights (scaled by 1/sqrt(d_model)) and optional biases, in T and in ref.
template <class C>
struct layer {
  using T = typename C::value;
  using R = typename C::ref;
  index_t d_model, heads, kv_heads;
  std::vector<host_tensor<T, 2>> w;
  std::vector<host_tensor<T, 1>> b;
  std::vector<host_tensor<R, 2>> rw;
  std::vector<host_tensor<R, 1>> rb;

  layer(index_t C_, index_t H, index_t Hkv, bool biases, std::uint32_t seed)
      : d_model(C_), heads(H), kv_heads(Hkv) {
    const index_t Ckv = Hkv * (C_ / H);
    const index_t cols[] = {C_, Ckv, Ckv, C_};
    for (int n = 0; n < 4; ++n) {
      w.push_back(random<T, 2>({C_, cols[n]}, seed + n, 1.0 / std::sqrt(double(C_))));
      b.emplace_back(dims<1>{biases ? cols[n] : 0});
      for (index_t i = 0; i < b[n].size(); ++i) b[n](i) = from_double<T>(0.05 * (n + 1));
      rw.push_back(convert<R>(w[n]));
      rb.push_back(convert<R>(b[n]));
    }
  }
  template <class U>
  static mha_weights<U> weights(const std::vector<host_tensor<U, 2>>& w,
                                const std::vector<host_tensor<U, 1>>& b, index_t H, index_t Hkv) {
    return {w[0].view(), w[1].view(), w[2].view(), w[3].view(), b[0].view(),
            b[1].view(), b[2].view(), b[3].view(), H,           Hkv};
  }
  mha_weights<T> weights() const { return weights(w, b, heads, kv_heads); }
  mha_weights<R> ref_weights() const { return weights(rw, rb, heads, kv_heads); }
};

struct mha_shape {
  index_t B, T, C, H, Hkv;
  bool causal, biases;
  std::string str() const {  // (a stream: GCC 12 warns falsely on chains of string +)
    std::ostringstream s;
    s << "B" << B << "_T" << T << "_C" << C << "_H" << H << "_Hkv" << Hkv
      << (causal ? "_causal" : "") << (biases ? "_bias" : "");
    return s.str();
  }
};

template <class C>
void multi_head_matches_reference(const mha_shape& m) {
  using T = typename C::value;
  using R = typename C::ref;
  const layer<C> l(m.C, m.H, m.Hkv, m.biases, 7);
  const host_tensor<T, 3> x = random<T, 3>({m.B, m.T, m.C}, 3);
  host_tensor<T, 3> got({m.B, m.T, m.C});
  host_tensor<R, 3> want({m.B, m.T, m.C});
  mha_workspace<T> ws;
  multi_head_attention(C::policy(), x.view(), l.weights(), got.view(), {.causal = m.causal}, ws);
  multi_head_attention(reference, convert<R>(x).view(), l.ref_weights(), want.view(),
                       {.causal = m.causal});
  if constexpr (std::is_same_v<T, R>)
    EXPECT_TRUE(close(got, want));
  else  // four 16-bit roundings in a row
    EXPECT_LT(max_error(got, want), 8 * tolerance<T>::rel);

  // The workspace holds the projections and the log-sum-exp of this forward.
  host_tensor<R, 3> q({m.B, m.T, m.C});
  project(reference, convert<R>(x).view(), l.rw[0].view(), q.view(), l.rb[0].view());
  host_tensor<T, 3> ws_q({m.B, m.T, m.C});
  const index_t D = m.C / m.H;
  for (index_t b = 0; b < m.B; ++b)
    for (index_t t = 0; t < m.T; ++t)
      for (index_t c = 0; c < m.C; ++c) ws_q(b, t, c) = ws.q()(b, c / D, t, c % D);
  EXPECT_TRUE(close(ws_q, q));
  for (index_t i = 0; i < ws.lse().extent(2); ++i)
    ASSERT_TRUE(std::isfinite(ws.lse()(0, 0, i))) << i;
}

inline const std::vector<mha_shape>& mha_shapes() {
  static const std::vector<mha_shape> s = {
      {2, 7, 24, 3, 3, false, true}, {1, 65, 64, 1, 1, true, false}, {3, 1, 16, 16, 16, true, true},
      {2, 63, 96, 2, 2, true, true}, {2, 33, 96, 6, 2, true, true},  {1, 20, 48, 4, 1, false, true},
  };
  return s;
}

template <class Cases>
void register_multi_head_tests(Cases cases, const std::vector<mha_shape>& shapes) {
  for (const mha_shape& m : shapes)
    register_test(cases, "MultiHead", m.str(),
                  [=](auto c) { return [=] { multi_head_matches_reference<decltype(c)>(m); }; });
}

}  // namespace attn::test
