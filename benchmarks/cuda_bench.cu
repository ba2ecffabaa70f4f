// attn::cuda benchmarks at the ANDREA-120M shape (B 8, H 12, d 64, T 1024 and 4096): the fused
// flash attention in float, half and bfloat16, causal and not, the four unfused stages in float
// (T 1024), cuBLAS anchors that do the same FLOPs as the non-causal attention (the two batched
// GEMMs S = Q K^T and O = P V, 4 B H T^2 d FLOPs), and decode steps (one query per sequence
// against Tk 4096 or 16384 keys, Hkv 12 or 4: the split-KV kernel). Every time is measured with
// CUDA events around one call (manual time); counters: TFLOP/s (FLOPs: 4 B H Tq Tk d, halved
// when causal with Tq = Tk), and for decode GB/s of K and V read. The names are the keys that
// benchmarks/peers/torch_sdpa_cuda.py uses for PyTorch's figures at the same shapes.
//   OUTDIR/build/benchmarks/cuda_bench --benchmark_min_time=0.2   (scripts/gpu-check OUTDIR)
// Without a usable GPU it prints that it skips and exits 0.

#include <benchmark/benchmark.h>
#include <cublas_v2.h>

#include <attn/cuda.cuh>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

using attn::index_t;
constexpr index_t B = 8, H = 12, d = 64;

/// 4 B H Tq Tk d, halved for a causal square problem (a decode step sees every key).
double attention_flops(index_t Tq, index_t Tk, bool causal) {
  return 4.0 * double(B * H) * double(Tq) * double(Tk) * double(d) /
         (causal && Tq == Tk ? 2.0 : 1.0);
}

/// A device tensor of uniform values in [-1, 1].
template <class T, int R>
attn::device_tensor<T, R> random_device(const attn::dims<R>& e) {
  attn::host_tensor<T, R> h(e);
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = attn::cuda_detail::from_float<T>(u(gen));
  attn::device_tensor<T, R> t(e);
  attn::copy(h.view(), t.view());
  return t;
}

/// Times body() with CUDA events per iteration (manual time) and sets TFLOP/s.
template <class F>
void timed(benchmark::State& st, double flops, F&& body) {
  cudaEvent_t start, stop;
  ATTN_CUDA_CHECK(cudaEventCreate(&start));
  ATTN_CUDA_CHECK(cudaEventCreate(&stop));
  body();  // warm-up
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
  double seconds = 0;
  for (auto _ : st) {
    ATTN_CUDA_CHECK(cudaEventRecord(start));
    body();
    ATTN_CUDA_CHECK(cudaEventRecord(stop));
    ATTN_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    st.SetIterationTime(ms * 1e-3);
    seconds += ms * 1e-3;
  }
  ATTN_CUDA_CHECK(cudaEventDestroy(start));
  ATTN_CUDA_CHECK(cudaEventDestroy(stop));
  if (seconds > 0) st.counters["TFLOP/s"] = flops * double(st.iterations()) / seconds / 1e12;
}

template <class E>
void attention(benchmark::State& st, index_t T, bool causal) {
  const auto q = random_device<E, 4>({B, H, T, d}), k = random_device<E, 4>({B, H, T, d}),
             v = random_device<E, 4>({B, H, T, d});
  attn::device_tensor<E, 4> o({B, H, T, d});
  timed(st, attention_flops(T, T, causal), [&] {
    attn::attention(attn::cuda, q.view(), k.view(), v.view(), o.view(), {.causal = causal});
  });
}

/// A decode step: q [B, H, 1, d] against k, v [B, Hkv, Tk, d] (grouped-query when Hkv < H).
template <class E>
void decode(benchmark::State& st, index_t Hkv, index_t Tk) {
  const auto q = random_device<E, 4>({B, H, 1, d}), k = random_device<E, 4>({B, Hkv, Tk, d}),
             v = random_device<E, 4>({B, Hkv, Tk, d});
  attn::device_tensor<E, 4> o({B, H, 1, d});
  timed(st, attention_flops(1, Tk, true), [&] {
    attn::attention(attn::cuda, q.view(), k.view(), v.view(), o.view(), {.causal = true});
  });
  const double bytes = 2.0 * double(B * Hkv * Tk * d) * sizeof(E);
  if (st.counters.count("TFLOP/s"))  // the same seconds: GB/s = bytes / FLOPs * FLOP/s
    st.counters["GB/s"] = st.counters["TFLOP/s"] * 1e3 * bytes / attention_flops(1, Tk, true);
}

/// scaled_scores -> causal_mask -> softmax_rows -> weighted_values with [B, H, T, T] in memory.
void unfused(benchmark::State& st, index_t T, bool causal) {
  const auto q = random_device<float, 4>({B, H, T, d}), k = random_device<float, 4>({B, H, T, d}),
             v = random_device<float, 4>({B, H, T, d});
  attn::device_tensor<float, 4> s({B, H, T, T}), o({B, H, T, d});
  timed(st, attention_flops(T, T, causal), [&] {
    attn::scaled_scores(attn::cuda, q.view(), k.view(), s.view());
    if (causal) attn::causal_mask(attn::cuda, s.view());
    attn::softmax_rows(attn::cuda, s.view());
    attn::weighted_values(attn::cuda, s.view(), v.view(), o.view());
  });
}

/// cuBLAS: S = Q K^T and O = P V as strided-batched GEMMs (fp32 accumulation), the FLOPs of a
/// non-causal attention.
template <class E>
void cublas_anchor(benchmark::State& st, index_t T) {
  const auto q = random_device<E, 4>({B, H, T, d}), k = random_device<E, 4>({B, H, T, d}),
             v = random_device<E, 4>({B, H, T, d});
  attn::device_tensor<E, 4> s({B, H, T, T}), o({B, H, T, d});
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    st.SkipWithError("cublasCreate failed");
    return;
  }
  const cudaDataType_t type = std::is_same_v<E, float>    ? CUDA_R_32F
                              : std::is_same_v<E, __half> ? CUDA_R_16F
                                                          : CUDA_R_16BF;
  const float one = 1.0f, zero = 0.0f;
  const int n = int(T), dd = int(d), batch = int(B * H);
  bool ok = true;
  timed(st, attention_flops(T, T, false), [&] {
    // Column-major view of row-major data: S^T (T x T) = K (T x d as d x T col-major)^T ...
    ok &= cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, n, dd, &one, k.data(),
                                     type, dd, n * dd, q.data(), type, dd, n * dd, &zero, s.data(),
                                     type, n, n * n, batch, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
    ok &= cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, dd, n, n, &one, v.data(),
                                     type, dd, n * dd, s.data(), type, n, n * n, &zero, o.data(),
                                     type, dd, n * dd, batch, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  });
  cublasDestroy(handle);
  if (!ok) st.SkipWithError("cublasGemmStridedBatchedEx failed");
}

void register_all() {
  auto add = [](const std::string& name, auto fn, auto... args) {
    benchmark::RegisterBenchmark(name.c_str(), fn, args...)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  };
  for (index_t T : {1024, 4096}) {
    const std::string t = "/T:" + std::to_string(T);
    for (bool causal : {false, true}) {
      const std::string c = t + (causal ? "/causal:1" : "/causal:0");
      add("attention/float" + c, attention<float>, T, causal);
      add("attention/half" + c, attention<__half>, T, causal);
      add("attention/bf16" + c, attention<__nv_bfloat16>, T, causal);
      if (T == 1024) add("unfused/float" + c, unfused, T, causal);
    }
    add("cublas_anchor/float" + t, cublas_anchor<float>, T);
    add("cublas_anchor/half" + t, cublas_anchor<__half>, T);
    add("cublas_anchor/bf16" + t, cublas_anchor<__nv_bfloat16>, T);
  }
  for (index_t Hkv : {12, 4})
    for (index_t Tk : {4096, 16384}) {
      const std::string s = "/Hkv:" + std::to_string(Hkv) + "/Tk:" + std::to_string(Tk);
      add("decode/float" + s, decode<float>, Hkv, Tk);
      add("decode/half" + s, decode<__half>, Hkv, Tk);
      add("decode/bf16" + s, decode<__nv_bfloat16>, Hkv, Tk);
    }
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    std::printf("cuda_bench: no usable GPU (%s): skipping\n", cudaGetErrorString(error));
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
