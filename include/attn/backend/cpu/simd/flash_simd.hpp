#pragma once
/// \file
/// The float flash-attention kernel of flash_kernel.inl, compiled for AVX2+FMA and for
/// AVX-512 from one source, and the run-time choice between them. Nothing here needs the
/// translation unit to be compiled with -mavx2 or -march: each copy carries its own target.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "attn/backend/cpu/parallel.hpp"
#include "attn/backend/cpu/simd/isa.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/tensor_view.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTN_CPU_SIMD 1
#include <immintrin.h>
#else
#define ATTN_CPU_SIMD 0
#endif

#if ATTN_CPU_SIMD
#define ATTN_SIMD_INLINE inline __attribute__((always_inline))
#define ATTN_SIMD_NOINLINE __attribute__((noinline))
/// The same for the lambdas that pass register tiles around by reference.
#define ATTN_SIMD_LAMBDA __attribute__((always_inline))
/// Fully unrolls a loop over register tiles at every optimisation level: at -O2 GCC keeps
/// such loops rolled, and the tiles then live on the stack instead of in registers (3-4x
/// slower).
#define ATTN_UNROLL _Pragma("GCC unroll 32")

// 2^f on [0, 1): a degree-5 polynomial fitted for relative error; with float Horner steps
// the exp2 below stays within 1.5e-7 of the true value (checked on 4e7 points of [-30, 0]).
#define ATTN_EXP2_POLY(V, f)                                                                      \
  V::fmadd(                                                                                       \
      V::fmadd(                                                                                   \
          V::fmadd(V::fmadd(V::fmadd(V::set1(1.8775747515e-3f), f, V::set1(8.9893454550e-3f)), f, \
                            V::set1(5.5826312790e-2f)),                                           \
                   f, V::set1(2.4015361920e-1f)),                                                 \
          f, V::set1(6.9315307286e-1f)),                                                          \
      f, V::set1(9.9999992508e-1f))

namespace attn::cpu_detail {
/// Probabilities below 2^-100 of the row maximum are flushed to exactly 0: they cannot change
/// a float sum, and it keeps denormals (and their ~100-cycle microcode assists) out of the
/// kernels, masked entries (-inf) included.
inline constexpr float exp2_cutoff = -100.0f;
}  // namespace attn::cpu_detail

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace attn::cpu_detail::avx2 {
/// 8 float lanes; 2 vectors of queries x up to 6 rows: 12 accumulators of 16 registers.
struct vec {
  using reg = __m256;
  static constexpr int lanes = 8, nq = 2, rk = 6;
  static constexpr index_t bk = 128;
  static reg load(const float* p) { return _mm256_load_ps(p); }
  static void store(float* p, reg x) { _mm256_store_ps(p, x); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg zero() { return _mm256_setzero_ps(); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  /// Lanes whose index is below `bound` become `value`.
  static reg set_below(reg x, float bound, float value) {
    const reg iota = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_blendv_ps(x, set1(value), _mm256_cmp_ps(iota, set1(bound), _CMP_LT_OQ));
  }
  /// p[0..count) in the first lanes, zeros after; p need not be aligned.
  static reg load_n(const float* p, int count) {
    if (count == lanes) return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p, below(count));
  }
  /// Stores the first `count` lanes to p[0..count); p need not be aligned.
  static void store_n(float* p, reg x, int count) {
    if (count == lanes) return _mm256_storeu_ps(p, x);
    _mm256_maskstore_ps(p, below(count), x);
  }
  /// All ones in the lanes below `count`.
  static __m256i below(int count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  /// 1 / x, and 0 where x is 0.
  static reg inverse_or_zero(reg x) {
    const reg nonzero = _mm256_cmp_ps(x, zero(), _CMP_NEQ_OQ);
    return _mm256_and_ps(nonzero, _mm256_div_ps(set1(1.0f), x));
  }
  /// r[i][j] <- r[j][i]: 32-bit pairs, then 64-bit pairs, then 128-bit halves.
  ATTN_SIMD_INLINE static void transpose(reg (&r)[lanes]) {
    reg a[lanes], b[lanes];
    ATTN_UNROLL
    for (int i = 0; i < lanes; i += 2) {
      a[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      a[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    ATTN_UNROLL
    for (int i = 0; i < lanes; i += 4) {
      ATTN_UNROLL
      for (int c = 0; c < 2; ++c) {
        const __m256d x = _mm256_castps_pd(a[i + c]), y = _mm256_castps_pd(a[i + c + 2]);
        b[i + 2 * c] = _mm256_castpd_ps(_mm256_unpacklo_pd(x, y));
        b[i + 2 * c + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(x, y));
      }
    }
    ATTN_UNROLL
    for (int c = 0; c < 4; ++c) {  // b[c] and b[4 + c] hold column c (low) and 4 + c (high)
      r[c] = _mm256_permute2f128_ps(b[c], b[4 + c], 0x20);
      r[4 + c] = _mm256_permute2f128_ps(b[c], b[4 + c], 0x31);
    }
  }
  static bool all_equal(reg x, float value) {
    return _mm256_movemask_ps(_mm256_cmp_ps(x, set1(value), _CMP_EQ_OQ)) == 0xff;
  }
  static reg replace_neg_inf(reg x, float value) {
    return _mm256_blendv_ps(x, set1(value), _mm256_cmp_ps(x, set1(-__builtin_inff()), _CMP_EQ_OQ));
  }
  /// 2^x for x <= 0, and exactly 0 for x < -100 (-inf included).
  static reg exp2(reg x) {
    const reg keep = _mm256_cmp_ps(x, set1(exp2_cutoff), _CMP_GE_OQ);
    x = _mm256_max_ps(x, set1(exp2_cutoff));
    const reg n = _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const reg f = sub(x, n);
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(keep, mul(ATTN_EXP2_POLY(vec, f), _mm256_castsi256_ps(e)));
  }
};
#define ATTN_SIMD_NS avx2
#include "attn/backend/cpu/simd/flash_kernel.inl"
#undef ATTN_SIMD_NS
}  // namespace attn::cpu_detail::avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx2,fma"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma")
#endif
namespace attn::cpu_detail::avx512 {
/// 16 float lanes; 4 vectors of queries x up to 6 rows: 24 accumulators of 32 registers.
struct vec {
  using reg = __m512;
  static constexpr int lanes = 16, nq = 4, rk = 6;
  static constexpr index_t bk = 128;
  static reg load(const float* p) { return _mm512_load_ps(p); }
  static void store(float* p, reg x) { _mm512_store_ps(p, x); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg set_below(reg x, float bound, float value) {
    const reg iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(iota, set1(bound), _CMP_LT_OQ), x, set1(value));
  }
  /// p[0..count) in the first lanes, zeros after; p need not be aligned.
  static reg load_n(const float* p, int count) {
    return _mm512_maskz_loadu_ps(__mmask16((1u << count) - 1), p);
  }
  /// Stores the first `count` lanes to p[0..count); p need not be aligned.
  static void store_n(float* p, reg x, int count) {
    _mm512_mask_storeu_ps(p, __mmask16((1u << count) - 1), x);
  }
  /// 1 / x, and 0 where x is 0.
  static reg inverse_or_zero(reg x) {
    return _mm512_maskz_div_ps(_mm512_cmp_ps_mask(x, zero(), _CMP_NEQ_OQ), set1(1.0f), x);
  }
  /// r[i][j] <- r[j][i]: 32-bit pairs, then 64-bit pairs, then a 4 x 4 transpose of the
  /// 128-bit blocks in two rounds of block shuffles.
  ATTN_SIMD_INLINE static void transpose(reg (&r)[lanes]) {
    reg a[lanes], b[lanes];
    ATTN_UNROLL
    for (int i = 0; i < lanes; i += 2) {
      a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // b[4i + c], block L: rows 4i..4i+3 of column 4L + c.
    ATTN_UNROLL
    for (int i = 0; i < lanes; i += 4) {
      ATTN_UNROLL
      for (int c = 0; c < 2; ++c) {
        const __m512d x = _mm512_castps_pd(a[i + c]), y = _mm512_castps_pd(a[i + c + 2]);
        b[i + 2 * c] = _mm512_castpd_ps(_mm512_unpacklo_pd(x, y));
        b[i + 2 * c + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x, y));
      }
    }
    ATTN_UNROLL
    for (int c = 0; c < 4; ++c) {
      const reg e0 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0x44);
      const reg e1 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0xee);
      const reg e2 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0x44);
      const reg e3 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0xee);
      r[c] = _mm512_shuffle_f32x4(e0, e2, 0x88);
      r[4 + c] = _mm512_shuffle_f32x4(e0, e2, 0xdd);
      r[8 + c] = _mm512_shuffle_f32x4(e1, e3, 0x88);
      r[12 + c] = _mm512_shuffle_f32x4(e1, e3, 0xdd);
    }
  }
  static bool all_equal(reg x, float value) {
    return _mm512_cmp_ps_mask(x, set1(value), _CMP_EQ_OQ) == 0xffff;
  }
  static reg replace_neg_inf(reg x, float value) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, set1(-__builtin_inff()), _CMP_EQ_OQ), x,
                                set1(value));
  }
  /// 2^x for x <= 0, and exactly 0 for x < -100 (-inf included: its NaN lanes are masked).
  static reg exp2(reg x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, set1(exp2_cutoff), _CMP_GE_OQ);
    const reg f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);  // x - floor x
    return _mm512_maskz_scalef_ps(keep, ATTN_EXP2_POLY(vec, f), x);  // times 2^floor(x)
  }
};
#define ATTN_SIMD_NS avx512
#include "attn/backend/cpu/simd/flash_kernel.inl"
#undef ATTN_SIMD_NS
}  // namespace attn::cpu_detail::avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef ATTN_EXP2_POLY
#undef ATTN_UNROLL
#endif  // ATTN_CPU_SIMD

namespace attn::cpu_detail {

#if ATTN_CPU_SIMD
/// Runs one ISA's flash_item over every (batch, head, query block).
template <class Scratch, class Item>
void run_flash_items(const cpu_policy& policy, tensor_view<const float, 4> q,
                     tensor_view<const float, 4> k, tensor_view<const float, 4> v,
                     tensor_view<float, 4> o, tensor_view<float, 3> lse, bool causal, double scale,
                     index_t bk, Item item) {
  const index_t B = q.extent(0), H = q.extent(1), Tq = q.extent(2), Tk = k.extent(2);
  const index_t D = q.extent(3), Dv = v.extent(3), bq = Scratch::bq;
  const index_t blocks = (Tq + bq - 1) / bq, items = B * H * blocks;
  const double flops = 2.0 * double(bq) * double(Tk) * double(D + Dv) / (causal ? 2 : 1);
  const auto log2e = 1.4426950408889634;
  const auto at = [](const auto& t, index_t b, index_t h) {
    return t.data() + b * t.stride(0) + h * t.stride(1);
  };
  const int workers = worker_count(policy, items, flops);
  parallel_for(workers, items, [&](index_t it) {
    // One (batch, head) after another, so its K and V stay in L2 from one query block to the
    // next; within it the largest (causal: last) query blocks first.
    const index_t bh = it / blocks, b = bh / H, h = bh % H, i0 = (blocks - 1 - it % blocks) * bq;
    float* base = thread_scratch<float>(std::size_t(bq * (D + bk + Dv + 3) + bk * (D + Dv)));
    const index_t st = bq * D, ot = st + bq * bk, m = ot + bq * Dv;
    const Scratch w{base,          base + st,         base + ot,        base + m,
                    base + m + bq, base + m + 2 * bq, base + m + 3 * bq};
    item(at(q, b, h), q.stride(2), at(k, b, h), k.stride(2), at(v, b, h), v.stride(2), at(o, b, h),
         o.stride(2), o.stride(3), lse.data() ? at(lse, b, h) : nullptr,
         lse.data() ? lse.stride(2) : 0, Tk, D, Dv, i0, std::min(bq, Tq - i0), Tk - Tq, causal,
         float(scale * log2e), it % blocks < workers, w);
  });
}
#endif

/// Float attention on the widest available vector unit. Returns false (having done nothing)
/// when no SIMD kernel applies: another ISA, or q/k/v columns that are not contiguous.
inline bool flash_attention_simd(const cpu_policy& policy, tensor_view<const float, 4> q,
                                 tensor_view<const float, 4> k, tensor_view<const float, 4> v,
                                 tensor_view<float, 4> o, tensor_view<float, 3> lse, bool causal,
                                 double scale) {
#if ATTN_CPU_SIMD
  const auto unit = [](const auto& t) { return t.stride(3) == 1 || t.extent(3) <= 1; };
  if (!unit(q) || !unit(k) || !unit(v)) return false;
  switch (active_isa()) {
    case isa::avx512:
      run_flash_items<avx512::flash_scratch>(policy, q, k, v, o, lse, causal, scale,
                                             avx512::vec::bk, avx512::flash_item);
      return true;
    case isa::avx2:
      run_flash_items<avx2::flash_scratch>(policy, q, k, v, o, lse, causal, scale, avx2::vec::bk,
                                           avx2::flash_item);
      return true;
    case isa::generic:
      return false;
  }
#endif
  (void)policy, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)causal, (void)scale;
  return false;
}

}  // namespace attn::cpu_detail
