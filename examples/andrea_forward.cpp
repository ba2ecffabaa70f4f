// ANDREA-120M multi-head causal self-attention, forward, on the CPU backend.
//
// Shapes: x (1, T, 768) -> 12 heads of 64 -> out (1, T, 768); T = 1024 unless given:
//   andrea_forward [T [heatmap.svg]]
// Prints the time of one layer, a checksum of its output, and the top-left corner of head 0's
// probability matrix softmax(mask(Q K^T / 8)), which is lower-triangular with row 0 = [1 0 ...].
// With a second argument it also draws that matrix's first 64 x 64 positions, beside the causal
// mask, as an SVG heatmap into that file (docs/images/attention_heatmap.svg is one).

#include <algorithm>
#include <attn/attn.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

// An SVG colour "#rrggbb" on a light-to-dark blue ramp, t in [0, 1] (0 is not white: white
// is what no query sees).
std::string ramp(double t) {
  const double stops[3][3] = {{222, 235, 247}, {86, 160, 206}, {8, 40, 100}};
  const double u = std::clamp(t, 0.0, 1.0) * 2;
  const int k = std::min(int(u), 1);
  int c[3];
  for (int i = 0; i < 3; ++i)
    c[i] = int(std::lround(stops[k][i] + (u - k) * (stops[k + 1][i] - stops[k][i])));
  char hex[8];
  std::snprintf(hex, sizeof hex, "#%02x%02x%02x", c[0], c[1], c[2]);
  return hex;
}

// Two n x n panels of 6-pixel cells, key j across and query i down: the causal mask (which keys
// each query sees, from the library's one visibility rule) and p(0, 0, i, j) on a log scale from
// 1e-3 to 1, with its colour bar. Plain SVG text, one <rect> per row of the mask and per visible
// cell of the probabilities.
bool write_heatmap(const char* path, const attn::host_tensor<float, 4>& p, attn::index_t n) {
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) return false;
  const int cell = 6, size = int(n) * cell, top = 50;
  const int x_mask = 50, x_prob = x_mask + size + 60, x_bar = x_prob + size + 20;
  std::fprintf(f,
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"13\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
               x_bar + 90, top + size + 45);
  const auto rect = [&](int x, int y, int w, int h, const std::string& fill) {
    std::fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" %s/>\n", x, y, w, h,
                 fill.c_str());
  };
  const auto text = [&](int x, int y, const char* s) {
    std::fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", x, y, s);
  };

  // The mask: each query row's keys [begin, end).
  const attn::visibility rule({.causal = true}, n, n);
  for (attn::index_t i = 0; i < n; ++i) {
    const attn::key_range keys = rule.row(i);
    rect(x_mask + int(keys.begin) * cell, top + int(i) * cell, int(keys.size()) * cell, cell,
         "fill=\"#555\"");
  }
  // The probabilities: one cell per visible (query, key) pair.
  for (attn::index_t i = 0; i < n; ++i)
    for (attn::index_t j = rule.begin(i); j < rule.end(i); ++j) {
      const double t = (std::log10(std::max(double(p(0, 0, i, j)), 1e-3)) + 3) / 3;
      rect(x_prob + int(j) * cell, top + int(i) * cell, cell, cell, "fill=\"" + ramp(t) + "\"");
    }
  // Colour bar, 1 at the top and 1e-3 at the bottom.
  for (int k = 0; k < 60; ++k)
    rect(x_bar, top + k * size / 60, 14, size / 60 + 1,
         "fill=\"" + ramp(1 - (k + 0.5) / 60) + "\"");
  const char* ticks[4] = {"1", "0.1", "0.01", "0.001"};
  for (int k = 0; k < 4; ++k) text(x_bar + 20, top + 5 + k * size / 3, ticks[k]);

  // Frames, titles and axes.
  text(x_mask, top - 12, "causal mask: query i sees keys j &lt;= i (dark)");
  text(x_prob, top - 12, "head 0: softmax(Q K^T / 8), log scale");
  for (int x0 : {x_mask, x_prob}) {
    rect(x0, top, size, size, "fill=\"none\" stroke=\"#999\"");
    std::fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">key j (0..%td)</text>\n",
                 x0 + size / 2, top + size + 20, n - 1);
    std::fprintf(f,
                 "<text transform=\"translate(%d %d) rotate(-90)\" text-anchor=\"middle\">"
                 "query i (0..%td)</text>\n",
                 x0 - 12, top + size / 2, n - 1);
  }
  std::fprintf(f, "</svg>\n");
  return std::fclose(f) == 0;
}

}  // namespace

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
  if (argc > 2) {
    const attn::index_t m = std::min<attn::index_t>(T, 64);
    if (!write_heatmap(argv[2], p, m)) {
      std::fprintf(stderr, "andrea_forward: cannot write %s\n", argv[2]);
      return 1;
    }
    std::printf("head 0 probabilities, first %tdx%td, and the mask: %s\n", m, m, argv[2]);
  }
  return std::isfinite(checksum) ? 0 : 1;
}
