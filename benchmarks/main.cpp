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
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
