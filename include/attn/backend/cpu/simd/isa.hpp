#pragma once
/// \file
/// Which vector instruction set the CPU backend's kernels use, chosen at run time.

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

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

/// The instruction set named `want`: "generic", "avx2" or "avx512"; none for a null pointer or
/// any other name.
inline std::optional<isa> parse_isa(const char* want) {
  if (want == nullptr) return std::nullopt;
  for (const auto& [name, set] : {std::pair{"generic", isa::generic}, std::pair{"avx2", isa::avx2},
                                  std::pair{"avx512", isa::avx512}})
    if (std::strcmp(want, name) == 0) return set;
  return std::nullopt;
}

/// The instruction set the environment variable ATTN_CPU_ISA=generic|avx2|avx512 asks for (for
/// testing every path on one machine), or `fallback` where it is unset or names none of those
/// (a mistyped or empty value must not drop the kernels to scalar code).
inline isa requested_isa(isa fallback) {
  return parse_isa(std::getenv("ATTN_CPU_ISA")).value_or(fallback);
}

/// The widest instruction set this CPU supports, lowered by ATTN_CPU_ISA. Read once; a value
/// that names no instruction set is reported on stderr, once, and ignored.
inline isa active_isa() {
  static const isa chosen = [] {
    const char* want = std::getenv("ATTN_CPU_ISA");
    if (want != nullptr && *want != '\0' && !parse_isa(want))
      std::fprintf(stderr, "attn: ATTN_CPU_ISA=%s names none of generic, avx2, avx512: ignored\n",
                   want);
    const isa best = widest_isa(), asked = requested_isa(best);
    return asked < best ? asked : best;
  }();
  return chosen;
}

/// Whether software prefetches of data streamed from memory should fill L1 (prefetcht0) rather
/// than stop at L2 (prefetcht1): true on AMD processors of family 26 (Zen 5) and later. Measured
/// with the decode kernel (Tk 65536, K and V far beyond the last-level cache): on an AMD EPYC
/// Zen 5, prefetcht0 read K and V at 84 % of the one-thread streaming roof against 68 % with
/// prefetcht1; on an AMD EPYC Zen 4 (family 25) and on an Intel Xeon (Emerald Rapids),
/// prefetcht0 was the slower on every shape (Zen 4, one thread: 32-56 % against 40-60 %).
/// Zen 3, also family 25, was not measured and takes the Zen 4 choice. Only the timing depends
/// on it. Read once.
inline bool streaming_prefetch_to_l1() {
  static const bool to_l1 = [] {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (!__builtin_cpu_is("amd")) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const unsigned base = (eax >> 8) & 0xf,
                   family = base == 0xf ? base + ((eax >> 20) & 0xff) : base;
    return family >= 26;
#else
    return false;
#endif
  }();
  return to_l1;
}

}  // namespace attn::cpu_detail
