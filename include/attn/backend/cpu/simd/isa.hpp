#pragma once
/// \file
/// Which vector instruction set the CPU backend's kernels use, chosen at run time.

#include <cstdlib>
#include <cstring>

namespace attn::cpu_detail {

enum class isa { generic, avx2, avx512 };

/// The widest instruction set this CPU supports.
inline isa widest_isa() {
  isa best = isa::generic;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = isa::avx2;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) best = isa::avx512;
#endif
  return best;
}

/// The instruction set the environment variable ATTN_CPU_ISA=generic|avx2|avx512 asks for (for
/// testing every path on one machine), or `fallback` where it is not set.
inline isa requested_isa(isa fallback) {
  const char* want = std::getenv("ATTN_CPU_ISA");
  if (want == nullptr) return fallback;
  return std::strcmp(want, "avx512") == 0 ? isa::avx512
         : std::strcmp(want, "avx2") == 0 ? isa::avx2
                                          : isa::generic;
}

/// The widest instruction set this CPU supports, lowered by ATTN_CPU_ISA. Read once.
inline isa active_isa() {
  static const isa chosen = [] {
    const isa best = widest_isa(), asked = requested_isa(best);
    return asked < best ? asked : best;
  }();
  return chosen;
}

}  // namespace attn::cpu_detail
