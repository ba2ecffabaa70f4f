// Generation with a KV cache: an ANDREA-shaped attention layer (d_model 768, 12 query heads of
// 64, grouped-query attention with 4 key/value heads) produces its output one position at a
// time, the way a language model generates, and checks it against one causal call over the
// whole sequence.
//
//   generate [positions]          (256 unless given)
//
// Per step: project the new position's x to q, k and v, append k and v to the cache, attend
// with the one query against everything cached so far, project with W_O. Prints tokens per
// second of that loop, and of recomputing the whole prefix from scratch for one new token at
// the last position (what generating without a cache costs).

#include <attn/attn.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const attn::index_t N = argc > 1 ? std::atol(argv[1]) : 256;
  const attn::index_t B = 1, C = 768, H = 12, Hkv = 4, D = C / H, Ckv = Hkv * D;
  if (N < 1) {
    std::fprintf(stderr, "usage: generate [positions >= 1]\n");
    return 2;
  }

  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](auto& t, float stddev) {
    for (attn::index_t i = 0; i < t.size(); ++i) t.data()[i] = stddev * normal(gen);
  };
  attn::host_tensor<float, 3> x({B, N, C});
  attn::host_tensor<float, 2> w_q({C, C}), w_k({C, Ckv}), w_v({C, Ckv}), w_o({C, C});
  random(x, 1.0f);
  for (auto* w : {&w_q, &w_k, &w_v, &w_o}) random(*w, 0.02f);  // GPT-2's initialisation
  const attn::mha_weights<float> weights{.w_q = w_q.view(),
                                         .w_k = w_k.view(),
                                         .w_v = w_v.view(),
                                         .w_o = w_o.view(),
                                         .heads = H,
                                         .kv_heads = Hkv};

  // The decode loop. Buffers of one position: q and o [B, 1, C], k and v [B, 1, Ckv], seen as
  // [B, heads, 1, D] by strides (head h is columns [h D, (h + 1) D)).
  attn::kv_cache<float> cache({.batch = B, .kv_heads = Hkv, .capacity = N, .head_dim = D});
  attn::host_tensor<float, 3> q({B, 1, C}), k({B, 1, Ckv}), v({B, 1, Ckv}), o({B, 1, C});
  attn::host_tensor<float, 3> decoded({B, N, C});
  const auto heads = [&](attn::host_tensor<float, 3>& t, attn::index_t n) {
    return attn::tensor_view<float, 4>{t.data(), {B, n, 1, D}, {n * D, D, n * D, 1}};
  };
  const auto start = clock_type::now();
  for (attn::index_t t = 0; t < N; ++t) {
    const attn::tensor_view<const float, 3> x_t{x.data() + t * C, {B, 1, C}, {N * C, C, 1}};
    const attn::tensor_view<float, 3> y_t{decoded.data() + t * C, {B, 1, C}, {N * C, C, 1}};
    attn::project(attn::cpu, x_t, weights.w_q, q.view());
    attn::project(attn::cpu, x_t, weights.w_k, k.view());
    attn::project(attn::cpu, x_t, weights.w_v, v.view());
    cache.append(attn::cpu, heads(k, Hkv), heads(v, Hkv));
    attn::attention(attn::cpu, heads(q, H), cache, heads(o, H), {.causal = true});
    attn::project(attn::cpu, o.view(), weights.w_o, y_t);
  }
  const double decode_s = seconds_since(start);

  // The same layer over the whole sequence in one causal call: what recomputing costs per new
  // token at the last position, and the oracle for every decoded position.
  attn::host_tensor<float, 3> full({B, N, C});
  const auto start_full = clock_type::now();
  attn::multi_head_attention(attn::cpu, x.view(), weights, full.view(), {.causal = true});
  const double full_s = seconds_since(start_full);

  double worst = 0, scale = 0;
  for (attn::index_t i = 0; i < full.size(); ++i) {
    worst = std::max(worst, double(std::abs(decoded.data()[i] - full.data()[i])));
    scale = std::max(scale, double(std::abs(full.data()[i])));
  }
  const double last_step = [&] {
    double m = 0;
    for (attn::index_t c = 0; c < C; ++c)
      m = std::max(m, double(std::abs(decoded(0, N - 1, c) - full(0, N - 1, c))));
    return m;
  }();

  std::printf(
      "ANDREA-shaped layer: d_model %td, %td query heads, %td key/value heads, %td "
      "positions\n",
      C, H, Hkv, N);
  std::printf("decode through the KV cache: %8.1f tokens/s (%.3f ms per token)\n", N / decode_s,
              1e3 * decode_s / N);
  std::printf("recompute from scratch:      %8.1f tokens/s (%.3f ms for the token at %td)\n",
              1 / full_s, 1e3 * full_s, N - 1);
  std::printf(
      "max |decoded - full causal call|: last step %.3g, all steps %.3g (max |out| "
      "%.3g)\n",
      last_step, worst, scale);
  // Both paths sum in float, in different orders: they agree to 1e-5 of the output's scale.
  const bool ok = std::isfinite(worst) && worst <= 1e-5 * std::max(1.0, scale);
  std::printf("%s\n", ok ? "decoded positions match the causal call" : "MISMATCH");
  return ok ? 0 : 1;
}
