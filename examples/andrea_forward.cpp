// ANDREA-120M multi-head causal self-attention, forward, on the CPU backend.
//
// Shapes: x (1, T, 768) -> 12 heads of 64 -> out (1, T, 768); T = 1024 unless given:
//   andrea_forward [T]
// Prints the time of one layer, a checksum of its output, and the top-left corner of head 0's
// probability matrix softmax(mask(Q K^T / 8)), which is lower-triangular with row 0 = [1 0 ...].

#include <attn/attn.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  const attn::index_t T = argc > 1 ? std::atol(argv[1]) : 1024;
  const attn::index_t B = 1, C = 768, H = 12, D = C / H;

  std::mt19937 gen(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](auto& t, float stddev) {
    for (attn::index_t i = 0; i < t.size(); ++i) t.data()[i] = stddev * normal(gen);
  };
  attn::host_tensor<float, 3> x({B, T, C}), out({B, T, C});
  attn::host_tensor<float, 2> w[4] = {
      attn::host_tensor<float, 2>({C, C}), attn::host_tensor<float, 2>({C, C}),
      attn::host_tensor<float, 2>({C, C}), attn::host_tensor<float, 2>({C, C})};
  random(x, 1.0f);
  for (auto& m : w) random(m, 0.02f);  // GPT-2's initialisation
  const attn::mha_weights<float> weights{
      .w_q = w[0].view(), .w_k = w[1].view(), .w_v = w[2].view(), .w_o = w[3].view(), .heads = H};

  const auto start = std::chrono::steady_clock::now();
  attn::multi_head_attention(attn::cpu, x.view(), weights, out.view(), {.causal = true});
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  double checksum = 0;
  for (attn::index_t i = 0; i < out.size(); ++i) checksum += out.data()[i];
  std::printf("ANDREA-120M attention layer: B=%td T=%td d_model=%td heads=%td causal\n", B, T, C,
              H);
  std::printf("time %.2f ms, checksum %.6f\n", ms, checksum);

  // Head 0's probabilities, stage by stage: project, score, mask, softmax.
  attn::host_tensor<float, 3> q({B, T, D}), k({B, T, D});
  const attn::tensor_view<const float, 2> wq0{w[0].data(), {C, D}, {C, 1}};
  const attn::tensor_view<const float, 2> wk0{w[1].data(), {C, D}, {C, 1}};
  attn::project(attn::cpu, x.view(), wq0, q.view());
  attn::project(attn::cpu, x.view(), wk0, k.view());
  attn::host_tensor<float, 4> p({B, 1, T, T});
  attn::scaled_scores(attn::cpu, attn::tensor_view<const float, 4>{q.data(), {B, 1, T, D}},
                      attn::tensor_view<const float, 4>{k.data(), {B, 1, T, D}}, p.view());
  attn::causal_mask(attn::cpu, p.view());
  attn::softmax_rows(attn::cpu, p.view());
  const attn::index_t n = std::min<attn::index_t>(T, 6);
  std::printf("head 0 probabilities, top-left %tdx%td:\n", n, n);
  for (attn::index_t i = 0; i < n; ++i) {
    for (attn::index_t j = 0; j < n; ++j) std::printf(" %.4f", p(0, 0, i, j));
    std::printf("\n");
  }
  return std::isfinite(checksum) ? 0 : 1;
}
