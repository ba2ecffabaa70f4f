// Training an ANDREA-120M-shaped causal attention layer (d_model 768, 12 heads of 64) with plain
// SGD on multi_head_attention_backward, on a task only attention can solve: copy the input of
// the position `k` steps back. And the seed's case for the divisor, measured: the typical size
// of q . k for random unit-variance vectors, and the gradient that reaches W_Q with and
// without 1/sqrt(d_k).
//
//   train_step [steps] [T]      (defaults: 120 steps, T = 64)
//
// Inputs are fresh every step: x_t = a random unit-variance vector (the "token") plus a fixed
// sinusoidal position code; the target of position t >= k is x_{t-k}; the loss is the mean
// squared error per element over those positions. The layer must learn to attend from t to
// t - k (through W_Q and W_K acting on the position codes) and to pass the content through
// (W_V W_O close to the identity).

#include <attn/attn.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

using attn::index_t;
using tensor2 = attn::host_tensor<float, 2>;
using tensor3 = attn::host_tensor<float, 3>;

/// x [B, T, C]: random tokens plus position codes, and the copy targets.
void make_batch(std::mt19937& gen, tensor3& x, tensor3& target, index_t k) {
  const index_t B = x.extent(0), T = x.extent(1), C = x.extent(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < T; ++t)
      for (index_t c = 0; c < C; ++c) {
        const double rate = std::pow(1e4, -double(c / 2 * 2) / double(C));
        const float pos =
            float(c % 2 == 0 ? std::sin(double(t) * rate) : std::cos(double(t) * rate));
        x(b, t, c) = 0.5f * normal(gen) + pos;
      }
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < T; ++t)
      for (index_t c = 0; c < C; ++c) target(b, t, c) = t >= k ? x(b, t - k, c) : 0.0f;
}

/// The mean squared error over positions t >= k, and its gradient d_out.
double loss_and_gradient(const tensor3& out, const tensor3& target, index_t k, tensor3& d_out) {
  const index_t B = out.extent(0), T = out.extent(1), C = out.extent(2);
  const double n = double(B * (T - k) * C);
  double loss = 0;
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < T; ++t)
      for (index_t c = 0; c < C; ++c) {
        const double e = t >= k ? double(out(b, t, c)) - target(b, t, c) : 0.0;
        loss += e * e;
        d_out(b, t, c) = float(2 * e / n);
      }
  return loss / n;
}

double norm(const tensor2& g) {
  double s = 0;
  for (index_t i = 0; i < g.size(); ++i) s += double(g.data()[i]) * g.data()[i];
  return std::sqrt(s);
}

/// For one head of dimension dk (T 64 positions, causal): the standard deviation of q . k for
/// random unit-variance q and k, the mean largest probability of a row, and with and without
/// the divisor: the gradient that reaches the softmax's input (the logits) and W_Q.
void divisor_row(index_t dk) {
  const index_t T = 64, C = 64;
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  tensor3 x({1, T, C});
  tensor2 w_q({C, dk}), w_k({C, dk}), w_v({C, dk});
  for (index_t i = 0; i < x.size(); ++i) x.data()[i] = normal(gen);
  for (auto* w : {&w_q, &w_k, &w_v})  // unit-variance q, k, v components
    for (index_t i = 0; i < w->size(); ++i) w->data()[i] = normal(gen) / std::sqrt(float(C));
  tensor3 q({1, T, dk}), k({1, T, dk}), v({1, T, dk}), d_o({1, T, dk});
  attn::project_qkv(attn::cpu, x.view(), w_q.view(), w_k.view(), w_v.view(), q.view(), k.view(),
                    v.view());
  for (index_t i = 0; i < d_o.size(); ++i) d_o.data()[i] = normal(gen);
  const auto heads = [&](tensor3& t) {
    return attn::tensor_view<float, 4>{t.data(), {1, 1, T, dk}};
  };
  double spread = 0, peak[2] = {}, d_logits[2] = {}, d_wq[2] = {};
  for (int scaled = 0; scaled < 2; ++scaled) {
    const double scale = scaled ? 1.0 / std::sqrt(double(dk)) : 1.0;
    // The stages, so the logits and probabilities can be looked at.
    attn::host_tensor<float, 4> p({1, 1, T, T}), dp({1, 1, T, T}), dq4({1, 1, T, dk});
    attn::scaled_scores(attn::cpu, heads(q), heads(k), p.view(), scale);
    if (!scaled)
      for (index_t i = 0; i < T; ++i)
        for (index_t j = 0; j <= i; ++j) spread += double(p(0, 0, i, j)) * p(0, 0, i, j);
    attn::causal_mask(attn::cpu, p.view());
    attn::softmax_rows(attn::cpu, p.view());
    for (index_t i = 0; i < T; ++i) {
      float m = 0;
      for (index_t j = 0; j <= i; ++j) m = std::max(m, p(0, 0, i, j));
      peak[scaled] += m / double(T);
    }
    attn::weighted_values_backward(attn::cpu, p.view(), heads(v), heads(d_o), dp.view(), {});
    attn::softmax_rows_backward(attn::cpu, p.view(), dp.view(), dp.view());
    double s2 = 0;
    for (index_t i = 0; i < dp.size(); ++i) s2 += double(dp.data()[i]) * dp.data()[i];
    d_logits[scaled] = std::sqrt(s2);
    attn::scaled_scores_backward(attn::cpu, heads(q), heads(k), dp.view(), dq4.view(), {}, scale);
    tensor2 dw_q({C, dk});
    attn::project_backward(attn::cpu, x.view(), w_q.view(),
                           attn::tensor_view<const float, 3>{dq4.data(), {1, T, dk}}, {},
                           dw_q.view());
    d_wq[scaled] = norm(dw_q);
  }
  std::printf("  %5td   %6.1f       %.2f / %.2f      %9.3g / %-9.3g   %9.3g / %-9.3g\n", dk,
              std::sqrt(spread / double(T * (T + 1) / 2)), peak[1], peak[0], d_logits[1],
              d_logits[0], d_wq[1], d_wq[0]);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 120;
  const index_t T = argc > 2 ? std::atol(argv[2]) : 64;
  const index_t B = 4, C = 768, H = 12, k = 3;
  const float lr = 0.5f;

  std::mt19937 gen(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  tensor2 w[4] = {tensor2({C, C}), tensor2({C, C}), tensor2({C, C}), tensor2({C, C})};
  for (auto& m : w)
    for (index_t i = 0; i < m.size(); ++i) m.data()[i] = 0.02f * normal(gen);  // GPT-2's init
  tensor2 dw[4] = {tensor2({C, C}), tensor2({C, C}), tensor2({C, C}), tensor2({C, C})};
  tensor3 x({B, T, C}), target({B, T, C}), out({B, T, C}), d_out({B, T, C});
  attn::mha_workspace<float> ws;
  const attn::attention_options opt{.causal = true};
  const attn::mha_gradients<float> g{
      .d_w_q = dw[0].view(), .d_w_k = dw[1].view(), .d_w_v = dw[2].view(), .d_w_o = dw[3].view()};

  std::printf(
      "ANDREA-120M attention layer (d_model %td, %td heads), causal, B %td, T %td: "
      "copy the input %td positions back, plain SGD (lr %.2f)\n",
      C, H, B, T, k, double(lr));
  double first = 0, last = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step <= steps; ++step) {
    make_batch(gen, x, target, k);
    const attn::mha_weights<float> weights{
        w[0].view(), w[1].view(), w[2].view(), w[3].view(), {}, {}, {}, {}, H};
    attn::multi_head_attention(attn::cpu, x.view(), weights, out.view(), opt, ws);
    const double loss = loss_and_gradient(out, target, k, d_out);
    if (step == 0) first = loss;
    last = loss;
    if (step % 20 == 0) std::printf("step %4d  loss %.4f\n", step, loss);
    if (step == steps) break;
    attn::multi_head_attention_backward(attn::cpu, x.view(), weights, ws, d_out.view(), g, opt);
    for (int n = 0; n < 4; ++n)
      for (index_t i = 0; i < w[n].size(); ++i) w[n].data()[i] -= lr * dw[n].data()[i];
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("loss %.4f -> %.4f in %d steps (%.1f ms a step, forward + backward)\n\n", first, last,
              steps, 1e3 * seconds / (steps + 1));

  std::printf(
      "Why divide by sqrt(d_k): random unit-variance q and k, causal, T 64; each pair is with "
      "1/sqrt(d_k) / without it\n"
      "  d_k   std(q.k)   max prob of a row   |dL/dlogits|            |dL/dW_Q|\n");
  for (index_t dk : {64, 256, 4096}) divisor_row(dk);
  return last < 0.5 * first ? 0 : 1;
}
