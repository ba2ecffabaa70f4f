#pragma once
/// \file
/// What every attn benchmark shares: ANDREA-120M's shape, random inputs, the timing loop with
/// its roof samples, FLOP counts and names.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <attn/attn.hpp>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "roofline.hpp"

namespace attn::bench {

using attn::index_t;
inline constexpr index_t H = 12, d = 64, d_model = 768;

/// Uniform values in [-amp, amp]; every call its own seed, so q, k and v differ.
template <class T, int R>
attn::host_tensor<T, R> random_tensor(const attn::dims<R>& e, double amp = 1.0) {
  static std::uint32_t seed = 42;  // (one sequence for the whole binary)
  attn::host_tensor<T, R> t(e);
  std::mt19937 gen(seed++);
  std::uniform_real_distribution<double> u(-amp, amp);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = T(u(gen));
  return t;
}

/// Runs body() once per benchmark iteration, timing real (wall-clock) time itself, and sets
///   GFLOP/s        the mean rate over all iterations;
///   roof           the fp32 FMA roof for `threads` threads (GFLOP/s), sampled before and after
///                  every window of back-to-back iterations (outside the benchmark's timing),
///                  median;
///   pct_peak       the median over windows of 100 * (the window's rate) / (its roof);
///   pct_peak_best  100 * (the fastest window's rate) / (the highest roof sample).
/// The host is shared and its speed drifts by tens of percent over seconds, so the roof is
/// sampled next to the kernel; but a call timed right after a roof sample (5-20 ms away from
/// its data, its pool's workers asleep) read up to 30 % slow: T 256 causal took 1.66 ms there
/// against 1.20 ms back to back (Zen 4), and the benchmark then disagreed with direct timing.
/// So iterations run back to back in windows of about `window` seconds between roof samples,
/// and a window of short calls starts with one untimed call. flops == 0 reports only the time.
template <class F>
void timed(benchmark::State& st, double flops, int threads, F&& body) {
  constexpr double window = 0.1, short_call = 0.05;  // seconds
  double seconds = 0, best_rate = 0, before = 0, span = 0, last = 0;
  long calls = 0;  // in the open window
  std::vector<double> roofs, ratios;
  const auto close_window = [&] {
    const double roof = (before + attn::bench::roof_sample(threads)) / 2,
                 rate = flops * calls / span;
    roofs.push_back(roof);
    ratios.push_back(rate / roof);
    best_rate = std::max(best_rate, rate);
    calls = 0, span = 0;
  };
  for (auto _ : st) {
    if (flops > 0 && calls == 0) {
      st.PauseTiming();
      before = attn::bench::roof_sample(threads);
      if (last < short_call) body();  // warms caches and workers; untimed
      st.ResumeTiming();
    }
    const auto t0 = std::chrono::steady_clock::now();
    body();
    last = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += last, span += last, ++calls;
    if (flops > 0 && span >= window) {
      st.PauseTiming();
      close_window();
      st.ResumeTiming();
    }
  }
  if (flops == 0 || seconds == 0) return;
  if (calls > 0) close_window();  // (the benchmark's timing has stopped)
  const auto median = [](std::vector<double> x) {
    std::nth_element(x.begin(), x.begin() + std::ptrdiff_t(x.size() / 2), x.end());
    return x[x.size() / 2];
  };
  st.counters["GFLOP/s"] = flops * double(st.iterations()) / seconds / 1e9;
  st.counters["roof"] = median(roofs) / 1e9;
  st.counters["pct_peak"] = 100.0 * median(ratios);
  st.counters["pct_peak_best"] = 100.0 * best_rate / *std::max_element(roofs.begin(), roofs.end());
}

/// FLOPs of one forward: 4 B H Tq Tk d, halved when causal (FlashAttention's convention; a
/// backward counts 2.5 times this).
inline double attention_flops(index_t B, index_t T, bool causal) {
  return 4.0 * double(B * H) * double(T) * double(T) * double(d) / (causal ? 2.0 : 1.0);
}

/// "/B:1/T:1024/causal:0/threads:1"
inline std::string shape_name(index_t B, index_t T_, bool causal, int threads) {
  return "/B:" + std::to_string(B) + "/T:" + std::to_string(T_) +
         "/causal:" + std::to_string(int(causal)) + "/threads:" + std::to_string(threads);
}

/// The thread counts every family is run at: 1 and 2 (or 1 where the machine has one).
inline std::vector<int> thread_counts() {
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  return hw > 1 ? std::vector<int>{1, 2} : std::vector<int>{1};
}

/// Registers a real-time benchmark in milliseconds.
template <class... Args>
benchmark::internal::Benchmark* add(const std::string& name, Args&&... args) {
  return benchmark::RegisterBenchmark(name.c_str(), std::forward<Args>(args)...)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

void register_forward();
void register_backward();
void register_decode();

}  // namespace attn::bench
