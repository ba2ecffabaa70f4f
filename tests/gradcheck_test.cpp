// The reference backward of every stage, of the fused attention and of the multi-head layer
// against central finite differences of the reference forward, in double: odd shapes, causal
// and not, windows, Tq != Tk, grouped key heads, strided views. The reference is the oracle the
// other backends' gradients are held to, so it is held to the forward itself.

#include <attn/attn.hpp>

#include "bodies/multi_head.hpp"
#include "support/gradcheck.hpp"
#include "support/strided.hpp"
#include "support/testing.hpp"

namespace attn::test {
namespace {

using D = backend_case<reference_policy, double>;

TEST(Gradcheck, Project) {
  for (const auto& [B, T_, C, E] :
       std::vector<std::array<index_t, 4>>{{1, 1, 1, 1}, {2, 7, 8, 3}, {3, 5, 65, 7}}) {
    SCOPED_TRACE(testing::Message() << B << "x" << T_ << "x" << C << " -> " << E);
    host_tensor<double, 3> x = random<double, 3>({B, T_, C}, 1);
    host_tensor<double, 2> w = random<double, 2>({C, E}, 2);
    host_tensor<double, 1> bias = random<double, 1>({E}, 3);
    const host_tensor<double, 3> wy = random<double, 3>({B, T_, E}, 4);
    host_tensor<double, 3> y({B, T_, E}), dx({B, T_, C});
    host_tensor<double, 2> dw({C, E});
    host_tensor<double, 1> db(dims<1>{E});
    project_backward(reference, x.view(), w.view(), wy.view(), dx.view(), dw.view(), db.view());
    const auto loss = [&] {
      project(reference, x.view(), w.view(), y.view(), bias.view());
      return weighted_sum(y, wy);
    };
    EXPECT_TRUE(gradcheck(x, dx, loss));
    EXPECT_TRUE(gradcheck(w, dw, loss));
    EXPECT_TRUE(gradcheck(bias, db, loss));
  }
}

TEST(Gradcheck, ScaledScores) {
  for (const shape& s :
       {shape{1, 1, 1, 1, 1, 1}, shape{2, 3, 7, 9, 8, 8}, shape{1, 4, 5, 6, 3, 3, 2}})
    for (std::optional<double> scale : {std::optional<double>{}, std::optional<double>{0.7}}) {
      SCOPED_TRACE(s.str());
      qkv<D> in(s);
      const host_tensor<double, 4> wy = random<double, 4>({s.B, s.H, s.Tq, s.Tk}, 5);
      host_tensor<double, 4> sc({s.B, s.H, s.Tq, s.Tk}), dq(in.q.extents()), dk(in.k.extents());
      scaled_scores_backward(reference, in.q.view(), in.k.view(), wy.view(), dq.view(), dk.view(),
                             scale);
      const auto loss = [&] {
        scaled_scores(reference, in.q.view(), in.k.view(), sc.view(), scale);
        return weighted_sum(sc, wy);
      };
      EXPECT_TRUE(gradcheck(in.q, dq, loss));
      EXPECT_TRUE(gradcheck(in.k, dk, loss));
    }
}

// softmax(mask(s)): the mask's gradient zeroes what it hid, the softmax's is p (dp - <dp, p>).
TEST(Gradcheck, MaskAndSoftmax) {
  for (const auto& e :
       {dims<4>{1, 1, 1, 1}, dims<4>{2, 2, 7, 7}, dims<4>{1, 3, 9, 4}, dims<4>{1, 1, 4, 11}})
    for (bool causal : {false, true}) {
      host_tensor<double, 4> s = random<double, 4>(e, 6, 3.0);
      const host_tensor<double, 4> wy = random<double, 4>(e, 7);
      host_tensor<double, 4> p(e), ds(e);
      const auto forward = [&] {
        p = s;
        if (causal) causal_mask(reference, p.view());
        softmax_rows(reference, p.view());
      };
      forward();
      host_tensor<double, 4> dp = wy;  // in place: ds is dp
      softmax_rows_backward(reference, p.view(), dp.view(), dp.view());
      if (causal) causal_mask_backward(reference, dp.view());
      EXPECT_TRUE(gradcheck(s, dp, [&] {
        forward();
        return weighted_sum(p, wy);
      }));
    }
}

TEST(Gradcheck, WeightedValues) {
  for (const shape& s :
       {shape{1, 1, 1, 1, 1, 1}, shape{2, 3, 7, 9, 8, 5}, shape{1, 4, 5, 6, 3, 3, 1}}) {
    SCOPED_TRACE(s.str());
    qkv<D> in(s);
    host_tensor<double, 4> p = random<double, 4>({s.B, s.H, s.Tq, s.Tk}, 8);
    const host_tensor<double, 4> wy = random<double, 4>({s.B, s.H, s.Tq, s.Dv}, 9);
    host_tensor<double, 4> o({s.B, s.H, s.Tq, s.Dv}), dp(p.extents()), dv(in.v.extents());
    weighted_values_backward(reference, p.view(), in.v.view(), wy.view(), dp.view(), dv.view());
    const auto loss = [&] {
      weighted_values(reference, p.view(), in.v.view(), o.view());
      return weighted_sum(o, wy);
    };
    EXPECT_TRUE(gradcheck(p, dp, loss));
    EXPECT_TRUE(gradcheck(in.v, dv, loss));
  }
}

/// The fused attention's reference backward against finite differences of its forward.
void check_attention_gradients(const shape& s, const attention_options& opt, bool strided) {
  qkv<D> in(s);
  host_tensor<double, 4> o({s.B, s.H, s.Tq, s.Dv}), dq(in.q.extents()), dk(in.k.extents()),
      dv(in.v.extents());
  host_tensor<double, 3> lse({s.B, s.H, s.Tq});
  const host_tensor<double, 4> wy = random<double, 4>({s.B, s.H, s.Tq, s.Dv}, 10);
  attention(reference, in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(), opt);
  if (strided) {  // q, v, o as [B, T, H, D] memory, k as [B, H, D, T], through strides
    strided_qkv<double> st(s, in.q, in.k, in.v);
    strided_qkv<double> grads(s, dq, dk, dv);
    attention_backward(
        reference, st.q(), st.k(), st.v(), o.view(), lse.view(), wy.view(),
        tensor_view<double, 4>{grads.q_bthd.data(), st.q().extents(), st.q().strides()},
        tensor_view<double, 4>{grads.k_bhdt.data(), st.k().extents(), st.k().strides()},
        tensor_view<double, 4>{grads.v_bthd.data(), st.v().extents(), st.v().strides()}, opt);
    const auto back = [](const tensor_view<const double, 4>& from, host_tensor<double, 4>& to) {
      for (index_t b = 0; b < to.extent(0); ++b)
        for (index_t h = 0; h < to.extent(1); ++h)
          for (index_t t = 0; t < to.extent(2); ++t)
            for (index_t d = 0; d < to.extent(3); ++d) to(b, h, t, d) = from(b, h, t, d);
    };
    back(grads.q(), dq);
    back(grads.k(), dk);
    back(grads.v(), dv);
  } else {
    attention_backward(reference, in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
                       wy.view(), dq.view(), dk.view(), dv.view(), opt);
  }
  const auto loss = [&] {
    attention(reference, in.q.view(), in.k.view(), in.v.view(), o.view(), opt);
    return weighted_sum(o, wy);
  };
  EXPECT_TRUE(gradcheck(in.q, dq, loss)) << "dq";
  EXPECT_TRUE(gradcheck(in.k, dk, loss)) << "dk";
  EXPECT_TRUE(gradcheck(in.v, dv, loss)) << "dv";
}

TEST(Gradcheck, Attention) {
  for (const shape& s :
       {shape{1, 1, 1, 1, 1, 1}, shape{2, 3, 7, 7, 8, 8}, shape{1, 2, 63, 63, 1, 4},
        shape{1, 1, 65, 65, 8, 8}, shape{1, 2, 130, 130, 8, 8}, shape{1, 1, 7, 65, 64, 64},
        shape{3, 1, 65, 7, 80, 80}, shape{1, 6, 9, 12, 8, 8, 2}, shape{2, 3, 7, 20, 8, 8, 1}})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(s.str() + (causal ? " causal" : ""));
      check_attention_gradients(s, {.causal = causal}, false);
    }
}

TEST(Gradcheck, AttentionWindowsScalesAndStrides) {
  const shape s{2, 2, 20, 23, 8, 8};
  for (bool causal : {false, true}) {
    check_attention_gradients(s, {.causal = causal, .window = 4}, false);
    check_attention_gradients(s, {.causal = causal, .scale = 0.3}, false);
    check_attention_gradients(s, {.causal = causal}, true);
  }
}

TEST(Gradcheck, MultiHeadLayer) {
  for (const mha_shape& m :
       {mha_shape{2, 5, 12, 3, 3, true, true}, mha_shape{1, 7, 16, 4, 2, false, true},
        mha_shape{1, 4, 8, 2, 1, true, false}}) {
    SCOPED_TRACE(m.str());
    layer<D> l(m.C, m.H, m.Hkv, m.biases, 11);
    host_tensor<double, 3> x = random<double, 3>({m.B, m.T, m.C}, 12), out({m.B, m.T, m.C});
    const host_tensor<double, 3> wy = random<double, 3>({m.B, m.T, m.C}, 13);
    mha_workspace<double> ws;
    const attention_options opt{.causal = m.causal};
    multi_head_attention(reference, x.view(), l.weights(), out.view(), opt, ws);
    host_tensor<double, 3> dx(x.extents());
    std::vector<host_tensor<double, 2>> dw;
    std::vector<host_tensor<double, 1>> db;
    for (int n = 0; n < 4; ++n) {
      dw.emplace_back(l.w[n].extents());
      db.emplace_back(l.b[n].extents());
    }
    const mha_gradients<double> g{dx.view(),    dw[0].view(), dw[1].view(),
                                  dw[2].view(), dw[3].view(), db[0].view(),
                                  db[1].view(), db[2].view(), db[3].view()};
    multi_head_attention_backward(reference, x.view(), l.weights(), ws, wy.view(), g, opt);
    const auto loss = [&] {
      multi_head_attention(reference, x.view(), l.weights(), out.view(), opt);
      return weighted_sum(out, wy);
    };
    EXPECT_TRUE(gradcheck(x, dx, loss)) << "d_x";
    for (int n = 0; n < 4; ++n) {
      EXPECT_TRUE(gradcheck(l.w[n], dw[n], loss)) << "d_w " << n;
      if (m.biases) {
        EXPECT_TRUE(gradcheck(l.b[n], db[n], loss)) << "d_b " << n;
      }
    }
  }
}

}  // namespace
}  // namespace attn::test
