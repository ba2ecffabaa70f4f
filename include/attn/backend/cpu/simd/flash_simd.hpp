#pragma once
/// \file
/// The float flash-attention kernel of flash_kernel.inl, compiled for AVX2+FMA and for
/// AVX-512 from one source, and the run-time choice between them. Nothing here needs the
/// translation unit to be compiled with -mavx2 or -march: each copy carries its own target.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "attn/backend/cpu/simd/isa.hpp"
#include "attn/core/tensor_view.hpp"
#include "attn/core/visibility.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTN_CPU_SIMD 1
#include <immintrin.h>
#else
#define ATTN_CPU_SIMD 0
#endif

// GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized inside themselves once inlined (GCC
// bug 105593, fixed in GCC 13); keep it quiet here so that users' -Wall -Werror builds pass.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace attn::cpu_detail {

/// One (batch, head) of a float attention as the kernel sees it: row pointers and strides of
/// its q [Tq, D], k [Tk, D], v [Tk, Dv] and o [Tq, Dv] (columns contiguous except o's) and
/// lse [Tq] (null: not written), and the visibility rule of its batch row.
struct flash_head {
  const float* q;
  index_t qs;
  const float* k;
  index_t ks;
  const float* v;
  index_t vs;
  float* o;
  index_t os, o_cs;
  float* lse;
  index_t lse_s;
  index_t D, Dv;
  visibility vis;
  float scale_log2;  ///< scale * log2(e): scores in log2 units
};

/// One (batch, key head) of a float attention backward as the kernel sees it: the group's
/// query heads are `group` heads apart by the *_hs head strides; rows by the row strides
/// (columns of inputs contiguous, of outputs at the *_cs strides); dq (null: not computed)
/// may be a contiguous partial buffer when key blocks are split across items.
struct flash_backward_head {
  const float *q, *o, *d_o, *lse;
  index_t q_hs, qs, o_hs, os, d_o_hs, d_os, lse_hs, lse_s;
  const float *k, *v;
  index_t ks, vs;
  float* dq;
  index_t dq_hs, dqs, dq_cs;
  float *dk, *dv;
  index_t dks, dk_cs, dvs, dv_cs;
  index_t D, Dv, group;
  visibility vis;
  float scale;
};

/// The query rows of a decode item: row r (head g = r / Tq, query i = r % Tq) at
/// q + g q_hs + i qs, rows = group * Tq (see flash_decode.inl).
struct decode_rows {
  const float* q;
  index_t q_hs, qs;
  index_t Tq, rows;
};

/// Keys per block of the decode kernel, and per chunk of a split-KV decode.
inline constexpr index_t decode_block = 32, decode_chunk = 1024;

/// Floats of per-thread scratch of the decode kernel for `rows` rows.
constexpr index_t flash_decode_scratch_floats(index_t lanes, index_t rows, index_t D, index_t Dv) {
  const auto pad = [&](index_t n) { return (n + lanes - 1) / lanes * lanes; };
  const index_t r16 = (rows + 15) / 16 * 16;
  return rows * pad(D) + rows * pad(Dv) + 8 * r16 + r16 * decode_block + D * r16 +
         decode_block * pad(Dv) + 64;
}

/// Floats that a buffer of n floats takes in the backward kernel's scratch: whole 64-byte lines,
/// so that every buffer starts on one.
constexpr index_t backward_segment(index_t n) { return (n + 15) / 16 * 16; }

/// Floats of per-thread scratch of the backward kernel for an item of `keys` keys (see
/// flash_backward_item in flash_backward.inl).
constexpr index_t flash_backward_scratch_floats(index_t lanes, index_t bq, index_t bk, index_t Tq,
                                                index_t keys, index_t D, index_t Dv) {
  const auto pad = [&](index_t n) { return (n + lanes - 1) / lanes * lanes; };
  const auto seg = backward_segment;
  const index_t Dp = pad(D), Dvp = pad(Dv);
  return 2 * seg(Tq * Dp) + seg(Tq * Dvp) + 2 * seg(Tq) + seg((Tq + bq - 1) / bq) + seg(keys * Dp) +
         seg(keys * Dvp) + seg(bk * Dp) + seg(Dp * bk) + seg(Dvp * bk) + 2 * seg(bq * bk);
}

/// Floats of one query tile's state in the kernel (flash_tile in flash_kernel.inl) for tiles
/// of bq queries and head dims D, Dv.
constexpr index_t flash_tile_floats(index_t bq, index_t D, index_t Dv) {
  return bq * (D + 2 * Dv + 3);
}

/// Most query tiles in one work item of the kernel.
inline constexpr index_t flash_max_tiles = 8;

/// Query tiles per work item of the kernel: about 128 queries, their state within 128 KiB
/// (a quarter of a 512 KiB L2, beside a K/V chunk of the same size), at least one.
constexpr index_t flash_item_tiles(index_t bq, index_t D, index_t Dv) {
  const index_t fit =
      (index_t(128) << 10) / (index_t(sizeof(float)) * flash_tile_floats(bq, D, Dv));
  return std::clamp<index_t>(std::min(128 / bq, fit), 1, flash_max_tiles);
}

/// Floats of per-thread scratch of the kernel for query tiles of bq, key blocks of bk, head
/// dims D, Dv and `tiles` tiles per item (the layout is flash_scratch's, in flash_kernel.inl).
constexpr index_t flash_scratch_floats(index_t bq, index_t bk, index_t D, index_t Dv,
                                       index_t tiles) {
  return bq * (bk + 4) + tiles * flash_tile_floats(bq, D, Dv) + bk * (D + Dv);
}

/// Probabilities below 2^-100 of the row maximum are flushed to exactly 0: they cannot change
/// a float sum, and it keeps denormals (and their ~100-cycle microcode assists) out of the
/// kernels, masked entries (-inf) included.
inline constexpr float exp2_cutoff = -100.0f;

}  // namespace attn::cpu_detail

#if ATTN_CPU_SIMD
#define ATTN_SIMD_INLINE inline __attribute__((always_inline))
#define ATTN_SIMD_NOINLINE __attribute__((noinline))
/// The same for the lambdas that pass register tiles around by reference.
#define ATTN_SIMD_LAMBDA __attribute__((always_inline))
/// Fully unrolls a loop over register tiles at every optimisation level: at -O2 GCC keeps
/// such loops rolled, and the tiles then live on the stack instead of in registers (3-4x
/// slower).
#define ATTN_SIMD_UNROLL _Pragma("GCC unroll 32")
/// Unrolls a long loop 4 times (see `steps`, flash_kernel.inl).
#define ATTN_SIMD_UNROLL_BY4 _Pragma("GCC unroll 4")

// 2^f on [0, 1): 1 + f q(f) with q of degree 4 fitted for relative error, so 2^0 is exactly 1
// (a long sum of exp2(0) must not drift); with fused float Horner steps exp2 below stays
// within 1.6e-7 of the true value (checked on 4e6 points of [-30, 0]).
#define ATTN_SIMD_EXP2_POLY(V, f)                                                                 \
  V::fmadd(                                                                                       \
      V::fmadd(                                                                                   \
          V::fmadd(V::fmadd(V::fmadd(V::set1(1.8671444850e-3f), f, V::set1(9.0169999748e-3f)), f, \
                            V::set1(5.5799935013e-2f)),                                           \
                   f, V::set1(2.4016444385e-1f)),                                                 \
          f, V::set1(6.9315129519e-1f)),                                                          \
      f, V::set1(1.0f))

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
  using mask = __m256;  ///< all ones in selected lanes
  static constexpr int lanes = 8, nq = 2, rk = 6;
  static constexpr index_t bk = 512, bq_backward = 64, bk_backward = 64;
  static reg load(const float* p) { return _mm256_load_ps(p); }
  static reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg x) { _mm256_store_ps(p, x); }
  static void storeu(float* p, reg x) { _mm256_storeu_ps(p, x); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg zero() { return _mm256_setzero_ps(); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  /// Lanes with lo <= j < hi.
  static mask between(float j, reg lo, reg hi) {
    const reg jj = set1(j);
    return _mm256_and_ps(_mm256_cmp_ps(jj, lo, _CMP_GE_OQ), _mm256_cmp_ps(jj, hi, _CMP_LT_OQ));
  }
  /// Lanes with lo <= j < hi.
  static mask between_lanes(reg j, reg lo, reg hi) {
    return _mm256_and_ps(_mm256_cmp_ps(j, lo, _CMP_GE_OQ), _mm256_cmp_ps(j, hi, _CMP_LT_OQ));
  }
  /// a where m, else b.
  static reg select(mask m, reg a, reg b) { return _mm256_blendv_ps(b, a, m); }
  /// x in the first n lanes, `fill` in the others.
  static reg first_or(reg x, int n, float fill) {
    return n == lanes ? x : select(_mm256_castsi256_ps(below(n)), x, set1(fill));
  }
  /// a * b + c where m, else c (c's lanes outside m are never combined with a or b).
  static reg fmadd_where(mask m, reg a, reg b, reg c) { return select(m, fmadd(a, b, c), c); }
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
  /// r[i][j] <- r[j][i]: 32-bit pairs, then 64-bit pairs, then 128-bit halves.
  ATTN_SIMD_INLINE static void transpose(reg (&r)[lanes]) {
    reg a[lanes], b[lanes];
    ATTN_SIMD_UNROLL
    for (int i = 0; i < lanes; i += 2) {
      a[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      a[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    ATTN_SIMD_UNROLL
    for (int i = 0; i < lanes; i += 4) {
      ATTN_SIMD_UNROLL
      for (int c = 0; c < 2; ++c) {
        const __m256d x = _mm256_castps_pd(a[i + c]), y = _mm256_castps_pd(a[i + c + 2]);
        b[i + 2 * c] = _mm256_castpd_ps(_mm256_unpacklo_pd(x, y));
        b[i + 2 * c + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(x, y));
      }
    }
    ATTN_SIMD_UNROLL
    for (int c = 0; c < 4; ++c) {  // b[c] and b[4 + c] hold column c (low) and 4 + c (high)
      r[c] = _mm256_permute2f128_ps(b[c], b[4 + c], 0x20);
      r[4 + c] = _mm256_permute2f128_ps(b[c], b[4 + c], 0x31);
    }
  }
  /// Lane i <- the sum of r[i]'s lanes, as a tree: neighbours, then pairs, then halves (14
  /// shuffles and 7 adds, 3 deep, where a transpose and a chain of adds take 24 and 7 deep).
  ATTN_SIMD_INLINE static reg transpose_sum(const reg (&r)[lanes]) {
    reg a[4], b[2];
    ATTN_SIMD_UNROLL
    for (int i = 0; i < 4; ++i)  // a[i], each half: r[2i]'s pair sums, r[2i+1]'s, interleaved
      a[i] = add(_mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]),
                 _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]));
    ATTN_SIMD_UNROLL
    for (int i = 0; i < 2; ++i) {  // b[i], each half: the half sums of r[4i .. 4i+3]
      const __m256d x = _mm256_castps_pd(a[2 * i]), y = _mm256_castps_pd(a[2 * i + 1]);
      b[i] = add(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)),
                 _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    }
    return add(_mm256_permute2f128_ps(b[0], b[1], 0x20), _mm256_permute2f128_ps(b[0], b[1], 0x31));
  }
  static reg bcast4(const float* p) {  // (one vbroadcastf128; p need not be aligned)
    const __m128 x = _mm_loadu_ps(p);
    return _mm256_set_m128(x, x);
  }
  /// Block b (a 128-bit half), lane i <- the sum of r[i]'s lanes in block b (as AVX-512's).
  ATTN_SIMD_INLINE static reg quad_sums(reg a, reg b, reg c, reg d) {
    const reg x = add(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
    const reg y = add(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
    return add(_mm256_shuffle_ps(x, y, 0x44), _mm256_shuffle_ps(x, y, 0xee));
  }
  /// x's lanes as 2 columns by blocks: lane i of each block to p + i * stride, the low block's
  /// first (p need not be aligned).
  static void store_columns(float* p, index_t stride, reg x) {
    const reg t = _mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m128 lo = _mm256_castps256_ps128(t), hi = _mm256_extractf128_ps(t, 1);
    _mm_storel_pi(reinterpret_cast<__m64*>(p), lo);
    _mm_storeh_pi(reinterpret_cast<__m64*>(p + stride), lo);
    _mm_storel_pi(reinterpret_cast<__m64*>(p + 2 * stride), hi);
    _mm_storeh_pi(reinterpret_cast<__m64*>(p + 3 * stride), hi);
  }
  /// The largest lane (NaN lanes as max_ps orders them) and the sum of the lanes, in a fixed
  /// order: halves, then pairs, then neighbours.
  ATTN_SIMD_INLINE static float hmax(reg x) {
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_max_ss(a, _mm_movehdup_ps(a)));
  }
  ATTN_SIMD_INLINE static float hsum(reg x) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
  }
  static bool all_equal(reg x, float value) {
    return _mm256_movemask_ps(_mm256_cmp_ps(x, set1(value), _CMP_EQ_OQ)) == 0xff;
  }
  static reg replace_neg_inf(reg x, float value) {
    return _mm256_blendv_ps(x, set1(value), _mm256_cmp_ps(x, set1(-__builtin_inff()), _CMP_EQ_OQ));
  }
  /// 2^x for x <= 0: exactly 0 for x < -100 (-inf included), NaN for NaN. 2^floor(x) is
  /// added to the exponent of 2^f in [1, 2) as an integer (exact, as a product would be, for
  /// x >= -100); lanes below are flushed whatever they computed. A NaN converts to the integer
  /// 0x80000000, whose shifted value 0 leaves the NaN a NaN.
  static reg exp2(reg x) {
    const reg flush = _mm256_cmp_ps(x, set1(exp2_cutoff), _CMP_LT_OQ);  // false for NaN
    const reg n = _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const reg f = sub(x, n);
    const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    const __m256i p = _mm256_castps_si256(ATTN_SIMD_EXP2_POLY(vec, f));
    return _mm256_andnot_ps(flush, _mm256_castsi256_ps(_mm256_add_epi32(p, e)));
  }
};
#define ATTN_SIMD_NS avx2
#include "attn/backend/cpu/simd/flash_kernel.inl"
// (after the forward kernel, whose helpers they use)
#include "attn/backend/cpu/simd/flash_backward.inl"
#include "attn/backend/cpu/simd/flash_decode.inl"
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
  using mask = __mmask16;
  static constexpr int lanes = 16, nq = 4, rk = 6;
  static constexpr index_t bk = 512, bq_backward = 64, bk_backward = 64;
  static reg load(const float* p) { return _mm512_load_ps(p); }
  static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg x) { _mm512_store_ps(p, x); }
  static void storeu(float* p, reg x) { _mm512_storeu_ps(p, x); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static mask between(float j, reg lo, reg hi) {
    const reg jj = set1(j);
    return _mm512_cmp_ps_mask(jj, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(jj, hi, _CMP_LT_OQ);
  }
  static mask between_lanes(reg j, reg lo, reg hi) {
    return _mm512_cmp_ps_mask(j, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(j, hi, _CMP_LT_OQ);
  }
  static reg select(mask m, reg a, reg b) { return _mm512_mask_blend_ps(m, b, a); }
  static reg first_or(reg x, int n, float fill) {
    return _mm512_mask_blend_ps(__mmask16((1u << n) - 1), set1(fill), x);
  }
  static reg fmadd_where(mask m, reg a, reg b, reg c) { return _mm512_mask3_fmadd_ps(a, b, c, m); }
  /// p[0..count) in the first lanes, zeros after; p need not be aligned.
  static reg load_n(const float* p, int count) {
    return _mm512_maskz_loadu_ps(__mmask16((1u << count) - 1), p);
  }
  /// Stores the first `count` lanes to p[0..count); p need not be aligned.
  static void store_n(float* p, reg x, int count) {
    _mm512_mask_storeu_ps(p, __mmask16((1u << count) - 1), x);
  }
  /// r[i][j] <- r[j][i]: 32-bit pairs, then 64-bit pairs, then a 4 x 4 transpose of the
  /// 128-bit blocks in two rounds of block shuffles.
  ATTN_SIMD_INLINE static void transpose(reg (&r)[lanes]) {
    reg a[lanes], b[lanes];
    ATTN_SIMD_UNROLL
    for (int i = 0; i < lanes; i += 2) {
      a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // b[4i + c], block L: rows 4i..4i+3 of column 4L + c.
    ATTN_SIMD_UNROLL
    for (int i = 0; i < lanes; i += 4) {
      ATTN_SIMD_UNROLL
      for (int c = 0; c < 2; ++c) {
        const __m512d x = _mm512_castps_pd(a[i + c]), y = _mm512_castps_pd(a[i + c + 2]);
        b[i + 2 * c] = _mm512_castpd_ps(_mm512_unpacklo_pd(x, y));
        b[i + 2 * c + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x, y));
      }
    }
    ATTN_SIMD_UNROLL
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
  /// Lane i <- the sum of r[i]'s lanes: a transpose, then a tree of adds.
  ATTN_SIMD_INLINE static reg transpose_sum(const reg (&r)[lanes]) {
    reg t[lanes];
    ATTN_SIMD_UNROLL
    for (int i = 0; i < lanes; ++i) t[i] = r[i];
    transpose(t);
    ATTN_SIMD_UNROLL
    for (int w = lanes / 2; w > 0; w /= 2) {
      ATTN_SIMD_UNROLL
      for (int i = 0; i < w; ++i) t[i] = add(t[i], t[i + w]);
    }
    return t[0];
  }
  /// Four floats from p in every 128-bit block.
  static reg bcast4(const float* p) { return _mm512_broadcast_f32x4(_mm_loadu_ps(p)); }
  /// Block b, lane i <- the sum of r[i]'s lanes in block b (pairs, then halves of each block).
  ATTN_SIMD_INLINE static reg quad_sums(reg a, reg b, reg c, reg d) {
    const reg x = add(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const reg y = add(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    return add(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xee));
  }
  /// x's lanes as 4 columns by blocks: lane i of every block to p + i * stride, block after
  /// block (p need not be aligned).
  static void store_columns(float* p, index_t stride, reg x) {
    const reg t = _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), x);
    _mm_storeu_ps(p, _mm512_castps512_ps128(t));
    _mm_storeu_ps(p + stride, _mm512_extractf32x4_ps(t, 1));
    _mm_storeu_ps(p + 2 * stride, _mm512_extractf32x4_ps(t, 2));
    _mm_storeu_ps(p + 3 * stride, _mm512_extractf32x4_ps(t, 3));
  }
  ATTN_SIMD_INLINE static float hmax(reg x) { return _mm512_reduce_max_ps(x); }
  ATTN_SIMD_INLINE static float hsum(reg x) { return _mm512_reduce_add_ps(x); }
  static bool all_equal(reg x, float value) {
    return _mm512_cmp_ps_mask(x, set1(value), _CMP_EQ_OQ) == 0xffff;
  }
  static reg replace_neg_inf(reg x, float value) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, set1(-__builtin_inff()), _CMP_EQ_OQ), x,
                                set1(value));
  }
  /// 2^x for x <= 0: exactly 0 for x < -100 (-inf included), NaN for NaN.
  static reg exp2(reg x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, set1(exp2_cutoff), _CMP_NLT_UQ);  // NaN kept
    const reg f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);  // x - floor x
    return _mm512_maskz_scalef_ps(keep, ATTN_SIMD_EXP2_POLY(vec, f), x);  // times 2^floor(x)
  }
};
#define ATTN_SIMD_NS avx512
#include "attn/backend/cpu/simd/flash_kernel.inl"
// (after the forward kernel, whose helpers they use)
#include "attn/backend/cpu/simd/flash_backward.inl"
#include "attn/backend/cpu/simd/flash_decode.inl"
#undef ATTN_SIMD_NS
}  // namespace attn::cpu_detail::avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef ATTN_SIMD_EXP2_POLY
#undef ATTN_SIMD_UNROLL
#endif  // ATTN_CPU_SIMD

namespace attn::cpu_detail {

/// The float kernel of the widest vector unit this CPU has, as a function of (head, first
/// row, rows, cold K/V): null when none applies (another ISA, or ATTN_CPU_ISA=generic).
struct flash_kernel {
  index_t bq = 0;       ///< query rows per work item
  index_t scratch = 0;  ///< floats of per-thread scratch for head dims D, Dv
  void (*item)(const flash_head&, index_t, index_t, bool, float*) = nullptr;
  /// The backward: one item over key blocks [j_begin, j_end); its query and key blocks.
  void (*backward_item)(const flash_backward_head&, index_t, index_t, float*) = nullptr;
  index_t bq_backward = 0, bk_backward = 0, lanes = 0;
  /// The decode kernel (flash_decode.inl).
  void (*decode_item)(const decode_rows&, const float*, index_t, const float*, index_t, index_t,
                      index_t, const visibility&, key_range, index_t, float, float*, index_t,
                      float*, bool, float*) = nullptr;
};

inline flash_kernel simd_flash_kernel(index_t D, index_t Dv) {
#if ATTN_CPU_SIMD
  switch (active_isa()) {
    case isa::avx512:
      return {
          avx512::bq * flash_item_tiles(avx512::bq, D, Dv),
          flash_scratch_floats(avx512::bq, avx512::bk, D, Dv, flash_item_tiles(avx512::bq, D, Dv)),
          avx512::flash_item,
          avx512::flash_backward_item,
          avx512::vec::bq_backward,
          avx512::vec::bk_backward,
          avx512::lanes,
          avx512::flash_decode_item};
    case isa::avx2:
      return {avx2::bq * flash_item_tiles(avx2::bq, D, Dv),
              flash_scratch_floats(avx2::bq, avx2::bk, D, Dv, flash_item_tiles(avx2::bq, D, Dv)),
              avx2::flash_item,
              avx2::flash_backward_item,
              avx2::vec::bq_backward,
              avx2::vec::bk_backward,
              avx2::lanes,
              avx2::flash_decode_item};
    case isa::generic:
      break;
  }
#endif
  (void)D, (void)Dv;
  return {};
}

}  // namespace attn::cpu_detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
