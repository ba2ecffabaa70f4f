// Decode benchmarks: one step of generation (Tq 1 or 4 queries per sequence against a cache of
// Tk keys), B 1 and 8, H 12 with Hkv 12 and 4, d 64, 1 and 2 threads. Every iteration first
// reads a 256 MiB buffer (outside the timing): that is the memory roof measured in the same run
// (stream_roof, GB/s), and it leaves K and V out of every cache, as in a real decode loop.
// Counters: us per step, GB/s of K + V read, pct_stream = that over the roof (median of
// per-iteration ratios). decode_cached: the same step with K and V in cache, against the FMA
// roof (pct_peak), to tell the arithmetic's share from the memory's.
//   build/release/benchmarks/attn_bench --benchmark_filter=decode/

#include "bench.hpp"

namespace attn::bench {
namespace {

/// A cache of B rows of Hkv heads, each full: Tk keys and values of a fixed pattern.
kv_cache<float> full_cache(index_t B, index_t Hkv, index_t Tk) {
  kv_cache<float> cache({.batch = B, .kv_heads = Hkv, .capacity = Tk, .head_dim = d});
  for (index_t i = 0; i < cache.keys().size(); ++i) {
    cache.keys().data()[i] = float(i % 97) / 97.0f - 0.5f;
    cache.values().data()[i] = float(i % 89) / 89.0f - 0.5f;
  }
  for (index_t b = 0; b < B; ++b) cache.set_length(b, Tk);
  return cache;
}

void decode(benchmark::State& st, index_t B, index_t Hkv, index_t Tq, index_t Tk, int threads) {
  const auto q = random_tensor<float, 4>({B, H, Tq, d});
  const kv_cache<float> cache = full_cache(B, Hkv, Tk);
  host_tensor<float, 4> o({B, H, Tq, d});
  const cpu_policy p{.threads = threads};
  const double bytes = 2.0 * double(B * Hkv * Tk * d) * sizeof(float);
  double seconds = 0;
  std::vector<double> roofs, ratios;
  for (auto _ : st) {
    st.PauseTiming();
    roofs.push_back(stream_read(threads));
    st.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    attn::attention(p, q.view(), cache, o.view(), {.causal = true});
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(o.data());
    seconds += t;
    ratios.push_back(bytes / t / roofs.back());
  }
  const auto median = [](std::vector<double> x) {
    std::nth_element(x.begin(), x.begin() + std::ptrdiff_t(x.size() / 2), x.end());
    return x[x.size() / 2];
  };
  st.counters["us"] = 1e6 * seconds / double(st.iterations());
  st.counters["GB/s"] = bytes * double(st.iterations()) / seconds / 1e9;
  st.counters["stream_roof"] = median(roofs) / 1e9;
  st.counters["pct_stream"] = 100.0 * median(ratios);
}

/// The same step with K and V left in the caches by the previous call (B 1, Tk 1024: 2 MiB of
/// K and V at Hkv 4, 6 MiB at Hkv 12): what the arithmetic alone costs, against the FMA roof
/// (pct_peak, as the forward's; FLOPs 4 d per visible (query row, key) pair).
void decode_cached(benchmark::State& st, index_t Hkv, index_t Tq, index_t Tk, int threads) {
  const auto q = random_tensor<float, 4>({1, H, Tq, d});
  const kv_cache<float> cache = full_cache(1, Hkv, Tk);
  host_tensor<float, 4> o({1, H, Tq, d});
  const cpu_policy p{.threads = threads};
  // query i (of Tq) sees keys [0, Tk - Tq + i]
  const double pairs = double(Tq) * double(Tk - Tq + 1) + double(Tq * (Tq - 1)) / 2;
  timed(st, 4.0 * double(H) * pairs * double(d), threads, [&] {
    attn::attention(p, q.view(), cache, o.view(), {.causal = true});
    benchmark::DoNotOptimize(o.data());
  });
}

}  // namespace

void register_decode() {
  for (index_t Hkv : {12, 4})
    for (index_t Tq : {1, 4})
      for (int t : thread_counts())
        benchmark::RegisterBenchmark(
            ("decode_cached/cpu_float/B:1/Hkv:" + std::to_string(Hkv) +
             "/Tq:" + std::to_string(Tq) + "/Tk:1024/threads:" + std::to_string(t))
                .c_str(),
            decode_cached, Hkv, Tq, index_t(1024), t)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
  for (index_t B : {1, 8})
    for (index_t Hkv : {12, 4})
      for (index_t Tq : {1, 4})
        for (index_t Tk : {1024, 4096, 16384, 65536})
          for (int t : thread_counts()) {
            if (B == 8 && Tk == 65536) continue;  // 3 GiB of K and V
            benchmark::RegisterBenchmark(
                ("decode/cpu_float/B:" + std::to_string(B) + "/Hkv:" + std::to_string(Hkv) +
                 "/Tq:" + std::to_string(Tq) + "/Tk:" + std::to_string(Tk) +
                 "/threads:" + std::to_string(t))
                    .c_str(),
                decode, B, Hkv, Tq, Tk, t)
                ->UseRealTime()
                ->Unit(benchmark::kMicrosecond);
          }
}

}  // namespace attn::bench
