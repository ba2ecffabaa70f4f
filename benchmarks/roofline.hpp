#pragma once
/// \file
/// The roof every benchmark figure is read against: the machine's fp32 FMA throughput,
/// measured in the same run with the vector unit the CPU backend's kernels use (the widest the
/// CPU has, AVX-512, else AVX2+FMA, else scalar, lowered by ATTN_CPU_ISA as the kernels are),
/// on 1 or n threads at once.

#include <algorithm>
#include <barrier>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "attn/backend/cpu/simd/isa.hpp"
#include "attn/core/host_tensor.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace attn::bench {

namespace detail {

/// `iters` rounds of 12 independent FMA chains; returns FLOPs done. The chains must be fully
/// unrolled into registers (GCC does not do it by itself at -O2, and the roof then reads a
/// third of the truth), and must start from different values: inlined with identical starts,
/// GCC merges the twelve identical chains into one, which then reads 1.5x the machine's peak.
#if defined(__x86_64__)
__attribute__((target("avx512f"), noinline)) inline double fma_avx512(long iters, float* sink) {
  __m512 acc[12];
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-3f * float(i));
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (auto& x : acc) x = _mm512_fmadd_ps(x, a, b);
  }
  for (auto& x : acc) *sink += _mm512_reduce_add_ps(x);
  return 2.0 * 16 * 12 * double(iters);
}
__attribute__((target("avx2,fma"), noinline)) inline double fma_avx2(long iters, float* sink) {
  __m256 acc[12];
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(1.0f + 1e-3f * float(i));
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (auto& x : acc) x = _mm256_fmadd_ps(x, a, b);
  }
  float out[8];
  for (auto& x : acc) {
    _mm256_storeu_ps(out, x);
    *sink += out[0];
  }
  return 2.0 * 8 * 12 * double(iters);
}
#endif

/// Sums n floats (n a multiple of 64) with four independent vector accumulators: a load-bound
/// loop, so it reads at the memory system's rate.
#if defined(__x86_64__)
__attribute__((target("avx512f"), noinline)) inline float sum_avx512(const float* p,
                                                                     std::size_t n) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  for (std::size_t i = 0; i < n; i += 64)
    for (int j = 0; j < 4; ++j) a[j] = _mm512_add_ps(a[j], _mm512_loadu_ps(p + i + 16 * j));
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}
__attribute__((target("avx2"), noinline)) inline float sum_avx2(const float* p, std::size_t n) {
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  for (std::size_t i = 0; i < n; i += 32)
    for (int j = 0; j < 4; ++j) a[j] = _mm256_add_ps(a[j], _mm256_loadu_ps(p + i + 8 * j));
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}
#endif

inline float stream_sum(const float* p, std::size_t n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return sum_avx512(p, n);
  if (__builtin_cpu_supports("avx2")) return sum_avx2(p, n);
#endif
  float a[4] = {};
  for (std::size_t i = 0; i < n; i += 4)
    for (int j = 0; j < 4; ++j) a[j] += p[i + j];
  return a[0] + a[1] + a[2] + a[3];
}

inline double fma_loop(long iters, float* sink) {
#if defined(__x86_64__)
  if (cpu_detail::active_isa() == cpu_detail::isa::avx512) return fma_avx512(iters, sink);
  if (cpu_detail::active_isa() == cpu_detail::isa::avx2) return fma_avx2(iters, sink);
#endif
  float acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = 1e-3f * float(i);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (float& x : acc) x = x * 0.999f + 1e-7f;
  }
  for (float x : acc) *sink += x;
  return 2.0 * 12 * double(iters);
}

inline const char* isa_name() {
  switch (cpu_detail::active_isa()) {
    case cpu_detail::isa::avx512:
      return "avx512";
    case cpu_detail::isa::avx2:
      return "avx2";
    default:
      return "scalar";
  }
}

}  // namespace detail

/// A team of threads that run one function together: the caller and `size - 1` persistent
/// helpers, started once. Timing a short FMA loop on freshly created threads reads low (thread
/// start-up, and a new thread's first milliseconds on a vCPU that was idle), so the roof is
/// always sampled on threads that already run.
class team {
 public:
  explicit team(int size) : size_(size), start_(size), done_(size) {
    for (int t = 1; t < size; ++t)
      helpers_.emplace_back([this, t] {
        for (;;) {
          start_.arrive_and_wait();
          if (stop_) return;
          job_(t);
          done_.arrive_and_wait();
        }
      });
  }
  ~team() {
    stop_ = true;
    start_.arrive_and_wait();
  }
  team(const team&) = delete;
  team& operator=(const team&) = delete;

  /// Calls f(t) on thread t of the team for every t in [0, size), all at once.
  template <class F>
  void run(F&& f) {
    job_ = std::ref(f);
    start_.arrive_and_wait();
    f(0);
    done_.arrive_and_wait();
  }
  int size() const { return size_; }

  /// The team of `threads` threads (one per thread count, kept for the process).
  static team& of(int threads) {
    static std::mutex mutex;
    static std::vector<std::unique_ptr<team>> teams;
    const std::lock_guard lock(mutex);
    for (auto& t : teams)
      if (t->size() == threads) return *t;
    return *teams.emplace_back(std::make_unique<team>(threads));
  }

 private:
  int size_;
  std::barrier<> start_, done_;
  std::function<void(int)> job_;
  bool stop_ = false;
  std::vector<std::jthread> helpers_;
};

/// FLOP/s of `threads` threads running `iterations` rounds of the FMA loop at once, best of
/// `rounds` tries. The default is about 50 ms a try at 160 GFLOP/s (AVX-512), long enough for
/// the clock to settle.
inline double measure_peak(int threads, int rounds = 5, long iterations = 20'000'000) {
  team& tm = team::of(threads);
  double best = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<double> flops(std::size_t(threads), 0.0);
    std::vector<float> sinks(std::size_t(threads), 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    tm.run([&](int t) { flops[t] = detail::fma_loop(iterations, &sinks[t]); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double total = 0;
    for (double f : flops) total += f;
    best = std::max(best, total / s);
  }
  return best;
}

/// Bytes per second of `threads` threads reading a buffer of `bytes` (larger than the last-level
/// cache) once, each its own contiguous part, on the persistent team: the memory roof of a
/// decode step. The buffer is kept for the process; reading it also evicts everything else. It
/// is allocated as host tensors are (huge pages where Linux grants them), so the roof is the
/// best plain read of the memory a KV cache lives in.
inline double stream_read(int threads, std::size_t bytes = std::size_t(256) << 20) {
  static std::vector<float, attn::detail::host_allocator<float>> buffer;
  if (buffer.size() * sizeof(float) < bytes) buffer.assign(bytes / sizeof(float), 1.0f);
  const std::size_t n = bytes / sizeof(float), part = n / std::size_t(threads) / 64 * 64;
  std::vector<float> sums(std::size_t(threads), 0.0f);
  const auto t0 = std::chrono::steady_clock::now();
  team::of(threads).run([&](int t) {
    sums[std::size_t(t)] = detail::stream_sum(buffer.data() + std::size_t(t) * part, part);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile float sink = 0;
  for (float x : sums) sink = sink + x;
  return double(part * std::size_t(threads) * sizeof(float)) / s;
}

/// One roof sample for `threads` threads, taken next to a kernel: the best of four 5 ms runs of
/// the FMA loop (about 20 ms). The benchmarks take one before and after every window of timed
/// calls: this machine's speed drifts by tens of percent over seconds (shared hosts), so only a
/// roof measured next to the kernel gives a meaningful ratio. One 5 ms run is not enough: right
/// after a kernel the loop starts below its steady rate and climbs back over 10-15 ms (after a
/// window of backward calls, successive 5 ms runs read about 195, 210, 225 GFLOP/s where the loop
/// holds 230-237; Sapphire Rapids class Xeon, 2026-12-07), so a single run put the roof about
/// 10 % low and every pct_peak as much too high.
inline double roof_sample(int threads) { return measure_peak(threads, 4, 2'000'000); }

}  // namespace attn::bench
