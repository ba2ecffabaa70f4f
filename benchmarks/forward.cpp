// Forward benchmarks: every stage, the fused attention and multi-head attention on the CPU
// backend, with the baselines they should be read against, all measured in one run:
//   - roof:  fp32 FMA throughput of this machine on 1 and 2 threads (pct_peak's denominator),
//     and the kernels' own register tile on operands in L1 (a ceiling for their pct_peak);
//   - eigen_gemm: an Eigen GEMM of the same shape / same FLOPs as the stage next to it;
//   - unfused: the textbook composition scaled_scores -> causal_mask -> softmax_rows ->
//     weighted_values, which materialises [T, T].
// Default shapes are ANDREA-120M's: H 12, d 64, d_model 768. Run:
//   build/release/benchmarks/attn_bench --benchmark_filter=attention/ --benchmark_min_time=0.5

#include <Eigen/Core>

#include "bench.hpp"

namespace attn::bench {
namespace {

void roof(benchmark::State& st, int threads) {
  double flops = 0;
  for (auto _ : st) flops = attn::bench::measure_peak(threads);
  st.counters["GFLOP/s"] = flops / 1e9;
}

#if ATTN_CPU_SIMD
/// C (64 x 64) += A (64 x 64) B (64 x 64) through the kernels' float GEMM of one instruction set
/// (compiled for it, as the kernels are, whatever the flags of this file).
__attribute__((target("avx512f,avx512dq,avx2,fma"))) void tile_gemm_avx512(const float* a,
                                                                           const float* b,
                                                                           float* c) {
  attn::cpu_detail::avx512::gemm(a, 64, 1, b, 64, c, 64, 64, 64, 64, true);
}
__attribute__((target("avx2,fma"))) void tile_gemm_avx2(const float* a, const float* b, float* c) {
  attn::cpu_detail::avx2::gemm(a, 64, 1, b, 64, c, 64, 64, 64, 64, true);
}
#endif

/// The fused kernels' register tile on operands that never leave L1: C (64 x 64) += A (64 x 64)
/// B (64 x 64) through the float GEMM of the instruction set the kernels use (the backward's
/// products; the forward's two products are register tiles of the same shape, rk rows x nq
/// vectors), on one thread. Its pct_peak is what that tile reaches with nothing else to do: a
/// ceiling for the kernels' pct_peak, beside the roof of a loop of FMAs alone.
void tile(benchmark::State& st) {
  constexpr index_t n = 64, calls = 2000;
  alignas(64) static float a[n * n], b[n * n], c[n * n];
  for (index_t i = 0; i < n * n; ++i) a[i] = b[i] = 1e-3f * float(i % 17), c[i] = 0;
  void (*gemm)(const float*, const float*, float*) = nullptr;
#if ATTN_CPU_SIMD
  namespace cd = attn::cpu_detail;
  if (cd::active_isa() == cd::isa::avx512) gemm = tile_gemm_avx512;
  if (cd::active_isa() == cd::isa::avx2) gemm = tile_gemm_avx2;
#endif
  if (gemm == nullptr) {
    st.SkipWithError("no SIMD kernel on this machine (or ATTN_CPU_ISA=generic)");
    return;
  }
  timed(st, 2.0 * double(n * n * n * calls), 1, [&] {
    for (index_t i = 0; i < calls; ++i) gemm(a, b, c);
    benchmark::DoNotOptimize(c);
  });
}

template <class Policy, class T>
void attention(benchmark::State& st, Policy policy, int threads, index_t B, index_t T_,
               bool causal) {
  const auto q = random_tensor<T, 4>({B, H, T_, d}), k = random_tensor<T, 4>({B, H, T_, d}),
             v = random_tensor<T, 4>({B, H, T_, d});
  attn::host_tensor<T, 4> o({B, H, T_, d});
  timed(st, attention_flops(B, T_, causal), threads, [&] {
    attn::attention(policy, q.view(), k.view(), v.view(), o.view(), {.causal = causal});
    benchmark::DoNotOptimize(o.data());
  });
}

/// The four stages one after another, with the [B, H, T, T] score matrix in memory.
void unfused(benchmark::State& st, int threads, index_t B, index_t T_, bool causal) {
  const attn::cpu_policy policy{.threads = threads};
  const auto q = random_tensor<float, 4>({B, H, T_, d}), k = random_tensor<float, 4>({B, H, T_, d}),
             v = random_tensor<float, 4>({B, H, T_, d});
  attn::host_tensor<float, 4> s({B, H, T_, T_}), o({B, H, T_, d});
  timed(st, attention_flops(B, T_, causal), threads, [&] {
    attn::scaled_scores(policy, q.view(), k.view(), s.view());
    if (causal) attn::causal_mask(policy, s.view());
    attn::softmax_rows(policy, s.view());
    attn::weighted_values(policy, s.view(), v.view(), o.view());
    benchmark::DoNotOptimize(o.data());
  });
}

using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// `count` Eigen GEMMs (m x k) * (k x n), each on its own operands (as a stage touches `count`
/// heads' worth of memory), single-threaded: the anchor for a stage of that shape.
void eigen_gemm(benchmark::State& st, index_t m, index_t k, index_t n, index_t count) {
  std::vector<matrix> a, b, c;
  for (index_t i = 0; i < count; ++i) {
    a.push_back(matrix::Random(m, k));
    b.push_back(matrix::Random(k, n));
    c.emplace_back(m, n);
  }
  timed(st, 2.0 * double(m * k * n * count), 1, [&] {
    for (index_t i = 0; i < count; ++i) {
      c[i].noalias() = a[i] * b[i];
      benchmark::DoNotOptimize(c[i].data());
    }
  });
}

/// Eigen GEMMs of the FLOPs of non-causal attention: per head S = Q K^T, O = S V.
void eigen_gemm_attention(benchmark::State& st, index_t B, index_t T_) {
  const matrix q = matrix::Random(T_, d), k = matrix::Random(T_, d), v = matrix::Random(T_, d);
  matrix s(T_, T_), o(T_, d);
  timed(st, attention_flops(B, T_, false), 1, [&] {
    for (index_t i = 0; i < B * H; ++i) {
      s.noalias() = q * k.transpose();
      o.noalias() = s * v;
      benchmark::DoNotOptimize(o.data());
    }
  });
}

// The stages on their own, one thread, ANDREA shapes (B = 1, T = 1024).
void project(benchmark::State& st) {
  const attn::cpu_policy one{.threads = 1};
  const auto x = random_tensor<float, 3>({1, 1024, d_model});
  const auto w = random_tensor<float, 2>({d_model, d_model}, 0.036);
  attn::host_tensor<float, 3> y({1, 1024, d_model});
  timed(st, 2.0 * 1024 * d_model * d_model, 1,
        [&] { attn::project(one, x.view(), w.view(), y.view()); });
}

void project_qkv(benchmark::State& st) {
  const attn::cpu_policy one{.threads = 1};
  const auto x = random_tensor<float, 3>({1, 1024, d_model});
  const auto w = random_tensor<float, 2>({d_model, d_model}, 0.036);
  attn::host_tensor<float, 3> q({1, 1024, d_model}), k({1, 1024, d_model}), v({1, 1024, d_model});
  timed(st, 3 * 2.0 * 1024 * d_model * d_model, 1, [&] {
    attn::project_qkv(one, x.view(), w.view(), w.view(), w.view(), q.view(), k.view(), v.view());
  });
}

template <class F>
void score_stage(benchmark::State& st, double flops, F&& f) {
  const auto q = random_tensor<float, 4>({1, H, 1024, d}),
             k = random_tensor<float, 4>({1, H, 1024, d});
  attn::host_tensor<float, 4> s({1, H, 1024, 1024}), o({1, H, 1024, d});
  attn::scaled_scores(attn::cpu, q.view(), k.view(), s.view());
  timed(st, flops, 1, [&] { f(q, k, s, o); });
}

void multi_head(benchmark::State& st, int threads, index_t B, bool causal) {
  const attn::cpu_policy policy{.threads = threads};
  const auto x = random_tensor<float, 3>({B, 1024, d_model});
  const auto w = random_tensor<float, 2>({d_model, d_model}, 0.036);
  attn::host_tensor<float, 3> out({B, 1024, d_model});
  const attn::mha_weights<float> weights{w.view(), w.view(), w.view(), w.view(), {}, {}, {}, {}, H};
  timed(st, 4 * 2.0 * double(B) * 1024 * d_model * d_model + attention_flops(B, 1024, causal),
        threads, [&] {
          attn::multi_head_attention(policy, x.view(), weights, out.view(), {.causal = causal});
        });
}

}  // namespace

void register_forward() {
  using benchmark::RegisterBenchmark;
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int t : {1, 2})
    RegisterBenchmark(("roof/fp32_fma/threads:" + std::to_string(t)).c_str(), roof, t)
        ->Iterations(1);
  RegisterBenchmark("roof/fp32_tile/threads:1", tile)->UseRealTime();

  for (index_t B : {1, 8})
    for (index_t T_ : {256, 1024, 4096, 16384})
      for (bool causal : {false, true})
        for (int t : {1, std::min(hw, 2)}) {
          if (B == 8 && T_ == 4096 && t == 1) continue;     // minutes per run; threads:2 stands in
          if (T_ == 16384 && (B == 8 || t == 1)) continue;  // (seconds per call: the peers' shape)
          RegisterBenchmark(("attention/cpu_float" + shape_name(B, T_, causal, t)).c_str(),
                            attention<attn::cpu_policy, float>, attn::cpu_policy{.threads = t}, t,
                            B, T_, causal)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
  for (index_t T_ : {256, 1024})
    for (bool causal : {false, true}) {
      RegisterBenchmark(("attention/cpu_double" + shape_name(1, T_, causal, 1)).c_str(),
                        attention<attn::cpu_policy, double>, attn::cpu_policy{.threads = 1}, 1, 1,
                        T_, causal)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      RegisterBenchmark(("unfused/cpu_float" + shape_name(1, T_, causal, 1)).c_str(), unfused, 1, 1,
                        T_, causal)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  RegisterBenchmark(("attention/reference_float" + shape_name(1, 256, true, 1)).c_str(),
                    attention<attn::reference_policy, float>, attn::reference, 1, 1, 256, true)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  for (index_t T_ : {256, 1024})
    RegisterBenchmark(("eigen_gemm/attention_flops" + shape_name(1, T_, false, 1)).c_str(),
                      eigen_gemm_attention, 1, T_)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);

  // Stages, B = 1, T = 1024, one thread, each beside its Eigen GEMM anchor.
  const attn::cpu_policy one{.threads = 1};
  RegisterBenchmark("stage/project/T:1024/C:768/E:768", project)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  RegisterBenchmark("eigen_gemm/project/1024x768x768", eigen_gemm, 1024, d_model, d_model, 1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  RegisterBenchmark("stage/project_qkv/T:1024/C:768/E:768", project_qkv)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  const double qk_flops = 2.0 * H * 1024 * 1024 * d;
  RegisterBenchmark("stage/scaled_scores/H:12/T:1024",
                    [=](benchmark::State& st) {
                      score_stage(st, qk_flops, [&](auto& q, auto& k, auto& s, auto&) {
                        attn::scaled_scores(one, q.view(), k.view(), s.view());
                      });
                    })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  RegisterBenchmark("eigen_gemm/scores/12x1024x64x1024", eigen_gemm, 1024, d, 1024, H)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  RegisterBenchmark(
      "stage/causal_mask/H:12/T:1024",
      [=](benchmark::State& st) {
        score_stage(st, 0, [&](auto&, auto&, auto& s, auto&) { attn::causal_mask(one, s.view()); });
      })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  RegisterBenchmark("stage/softmax_rows/H:12/T:1024",
                    [=](benchmark::State& st) {
                      score_stage(st, 0, [&](auto&, auto&, auto& s, auto&) {
                        attn::softmax_rows(one, s.view());
                      });
                    })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  RegisterBenchmark("stage/weighted_values/H:12/T:1024",
                    [=](benchmark::State& st) {
                      score_stage(st, qk_flops, [&](auto& q, auto&, auto& s, auto& o) {
                        attn::weighted_values(one, s.view(), q.view(), o.view());
                      });
                    })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  RegisterBenchmark("eigen_gemm/weighted_values/12x1024x1024x64", eigen_gemm, 1024, 1024, d, H)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  for (bool causal : {false, true})
    for (int t : {1, std::min(hw, 2)})
      RegisterBenchmark(("multi_head_attention/cpu_float" + shape_name(1, 1024, causal, t)).c_str(),
                        multi_head, t, 1, causal)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
}

}  // namespace attn::bench
