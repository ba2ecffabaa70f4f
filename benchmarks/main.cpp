// attn microbenchmarks, one binary: forward.cpp, backward.cpp and decode.cpp register their
// families.
//   build/release/benchmarks/attn_bench                 # everything
//   build/release/benchmarks/attn_bench --benchmark_filter='^attention/cpu_float/B:1/T:1024/'

#include "bench.hpp"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  attn::bench::register_forward();
  attn::bench::register_backward();
  attn::bench::register_decode();
  benchmark::AddCustomContext("roof ISA", attn::bench::detail::isa_name());
#ifdef __AVX512F__
  // The AVX2 kernel of such a binary may use AVX-512's 32 registers and EVEX encodings, which
  // no AVX2 machine has (on a Zen 4 its P V loop ran 15 % slower than in an AVX2 build): time
  // the AVX2 path in a build of preset `avx2` (-march=x86-64-v3).
  benchmark::AddCustomContext("compiled for", "AVX-512");
#else
  benchmark::AddCustomContext("compiled for", "no AVX-512");
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
