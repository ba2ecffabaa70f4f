// Times ggml's CPU flash_attn_ext (f32 q, k, v) at one shape and prints the median
// milliseconds. Built by benchmarks/peers/run.py against a ggml checkout outside this tree
// (never committed here); not part of the test suite.
//
//   ggml_flash B H Hkv Tq Tk D causal threads reps [cold]
//
// With cold 1 (decode), every call first reads a 256 MiB buffer (outside the timing), as attn's
// decode benchmark does, so K and V come from memory.
// Causal masks are aligned bottom-right (query i sees keys j <= i + Tk - Tq), as in attn.

#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 10 && argc != 11) {
    std::fprintf(stderr, "usage: ggml_flash B H Hkv Tq Tk D causal threads reps [cold]\n");
    return 2;
  }
  const int B = std::atoi(argv[1]), H = std::atoi(argv[2]), Hkv = std::atoi(argv[3]);
  const int Tq = std::atoi(argv[4]), Tk = std::atoi(argv[5]), D = std::atoi(argv[6]);
  const bool causal = std::atoi(argv[7]) != 0;
  const int threads = std::atoi(argv[8]), reps = std::atoi(argv[9]);
  const bool cold = argc == 11 && std::atoi(argv[10]) != 0;
  std::vector<float> flush(cold ? std::size_t(64) << 20 : 0, 1.0f);
  volatile float sink = 0;

  const std::size_t bytes = sizeof(float) * std::size_t(B) *
                                (std::size_t(H) * Tq * D * 2 + std::size_t(Hkv) * Tk * D * 2) +
                            sizeof(short) * std::size_t(Tk) * Tq + (64u << 20);
  ggml_init_params params{bytes, nullptr, false};
  ggml_context* ctx = ggml_init(params);
  // ggml's order: innermost dimension first. q [D, Tq, H, B], k and v [D, Tk, Hkv, B].
  ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, Tq, H, B);
  ggml_tensor* k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, Tk, Hkv, B);
  ggml_tensor* v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, Tk, Hkv, B);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (ggml_tensor* t : {q, k, v}) {
    float* p = static_cast<float*>(t->data);
    for (int64_t i = 0; i < ggml_nelements(t); ++i) p[i] = u(gen);
  }
  ggml_tensor* mask = nullptr;
  if (causal) {
    mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, Tk, Tq);
    auto* m = static_cast<ggml_fp16_t*>(mask->data);
    for (int i = 0; i < Tq; ++i)
      for (int j = 0; j < Tk; ++j)
        m[i * Tk + j] = ggml_fp32_to_fp16(j <= i + Tk - Tq ? 0.0f : -INFINITY);
  }
  ggml_tensor* out =
      ggml_flash_attn_ext(ctx, q, k, v, mask, 1.0f / std::sqrt(float(D)), 0.0f, 0.0f);
  ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);

  std::vector<double> times;
  for (int rep = 0; rep < reps + 2; ++rep) {  // two warm-up calls
    if (cold) {
      float sum = 0;
      for (float x : flush) sum += x;
      sink = sink + sum;
    }
    const auto t0 = std::chrono::steady_clock::now();
    ggml_graph_compute_with_ctx(ctx, graph, threads);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (rep >= 2) times.push_back(ms);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  std::printf("%.6f\n", times[times.size() / 2]);
  ggml_free(ctx);
  return 0;
}
