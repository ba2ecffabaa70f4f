// The float flash-attention micro-kernel, written once against a vector type `vec` and
// compiled once per instruction set by flash_simd.hpp (which includes this file inside a
// namespace and a target region, so it has no include guard and includes nothing).
//
// Everything is transposed so that one vector lane is one query and the online softmax needs
// no horizontal reduction:
//   qt (D, BQ)   = (Q * scale * log2 e)^T, packed once per work item
//   st (BK, BQ)  = K_blk qt: scores in log2 units, then probabilities P^T
//   ot (Dv, BQ)  = O^T accumulator, rescaled by alpha = 2^(m_old - m_new) per key block
// with BQ = vec::nq * vec::lanes queries per item. Both products are register-blocked
// R rows x nq vectors (R <= vec::rk): one broadcast scalar feeds up to nq FMAs.
//
// Causal blocks: lim[n] is how many keys of the block query vector n can see at all. Keys at
// or past lim[n] are never computed, exponentiated or accumulated for vector n, so a block
// that the diagonal crosses costs about half a full one.

using reg = typename vec::reg;
inline constexpr int nq = vec::nq, lanes = vec::lanes;
inline constexpr index_t bq = index_t(nq) * lanes;

/// Per-item scratch, 64-byte aligned.
struct flash_scratch {
  static constexpr index_t bq = ::attn::cpu_detail::ATTN_SIMD_NS::bq;
  float* qt;     // (D, BQ)
  float* st;     // (BK, BQ)
  float* ot;     // (Dv, BQ)
  float* m;      // (BQ) running max, log2 units
  float* l;      // (BQ) running sum
  float* alpha;  // (BQ) rescale of the current key block
  float* kv;     // (BK, D + Dv) K and V blocks, packed when their rows are not dense
};

/// st[r] = sum_d krow[r][d] * qt[d] for R key rows, query vectors N0..nq-1.
template <int R, int N0>
ATTN_SIMD_INLINE void score_rows(const float* const* krow, index_t D, const float* qt, float* st) {
  reg acc[R][nq];
  ATTN_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTN_UNROLL
    for (int n = N0; n < nq; ++n) acc[r][n] = vec::zero();
  }
  for (index_t d = 0; d < D; ++d) {
    reg q[nq];
    ATTN_UNROLL
    for (int n = N0; n < nq; ++n) q[n] = vec::load(qt + d * bq + n * lanes);
    ATTN_UNROLL
    for (int r = 0; r < R; ++r) {
      const reg kb = vec::set1(krow[r][d]);
      ATTN_UNROLL
      for (int n = N0; n < nq; ++n) acc[r][n] = vec::fmadd(kb, q[n], acc[r][n]);
    }
  }
  ATTN_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTN_UNROLL
    for (int n = N0; n < nq; ++n) vec::store(st + r * bq + n * lanes, acc[r][n]);
  }
}

/// Calls f.template operator()<N0>(begin, end) for each run of keys [begin, end) of a block
/// that exactly the query vectors N0..nq-1 see: vector n sees keys [0, lim[n]), and lim is
/// nondecreasing in n (all equal without a causal mask).
template <class F>
ATTN_SIMD_INLINE void by_visibility(const index_t* lim, F&& f) {
  index_t j = 0;
  [&]<int... N0>(std::integer_sequence<int, N0...>) ATTN_SIMD_LAMBDA {
    ((f.template operator()<N0>(j, lim[N0]), j = std::max(j, lim[N0])), ...);
  }
  (std::make_integer_sequence<int, nq>{});
}

/// ot[r] = alpha * ot[r] + sum_j v[j][r] * st[j] for R value columns, where key j feeds only
/// the query vectors n with j < lim[n] (alpha == nullptr: 1 in every lane).
template <int R>
ATTN_SIMD_INLINE void value_rows(const float* v, index_t vs, const index_t* lim, const float* st,
                                 const float* alpha, float* ot) {
  reg acc[R][nq];
  ATTN_UNROLL
  for (int n = 0; n < nq; ++n) {
    ATTN_UNROLL
    for (int r = 0; r < R; ++r) {
      acc[r][n] = vec::load(ot + r * bq + n * lanes);
      if (alpha != nullptr) acc[r][n] = vec::mul(vec::load(alpha + n * lanes), acc[r][n]);
    }
  }
  by_visibility(lim, [&]<int N0>(index_t begin, index_t end) ATTN_SIMD_LAMBDA {
    for (index_t j = begin; j < end; ++j) {
      reg p[nq];
      ATTN_UNROLL
      for (int n = N0; n < nq; ++n) p[n] = vec::load(st + j * bq + n * lanes);
      const float* vj = v + j * vs;
      ATTN_UNROLL
      for (int r = 0; r < R; ++r) {
        const reg vb = vec::set1(vj[r]);
        ATTN_UNROLL
        for (int n = N0; n < nq; ++n) acc[r][n] = vec::fmadd(vb, p[n], acc[r][n]);
      }
    }
  });
  ATTN_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTN_UNROLL
    for (int n = 0; n < nq; ++n) vec::store(ot + r * bq + n * lanes, acc[r][n]);
  }
}

/// Calls f.template operator()<R>(start) over [0, count) in groups of vec::rk, then one
/// group of the remainder.
template <class F>
ATTN_SIMD_INLINE void in_groups(index_t count, F&& f) {
  index_t i = 0;
  for (; i + vec::rk <= count; i += vec::rk) f.template operator()<vec::rk>(i);
  [&]<int... R>(std::integer_sequence<int, R...>) ATTN_SIMD_LAMBDA {
    ((count - i == R + 1 ? f.template operator()<R + 1>(i) : void()), ...);
  }
  (std::make_integer_sequence<int, vec::rk - 1>{});
}

/// Prefetches the line at p into L1 (`to_l1`) or L2.
ATTN_SIMD_INLINE void prefetch(const float* p, bool to_l1) {
  if (to_l1)
    __builtin_prefetch(p, 0, 3);
  else
    __builtin_prefetch(p, 0, 2);
}

/// One work item: queries [i0, i0 + rows) of one (batch, head), rows <= BQ. q, k, v, o point
/// at the (batch, head) matrices; qs, ks, vs, os are their row strides (columns contiguous
/// except o's, o_cs). `offset` = Tk - Tq aligns the causal mask bottom-right.
ATTN_SIMD_NOINLINE inline void flash_item(const float* q, index_t qs, const float* k, index_t ks,
                                          const float* v, index_t vs, float* o, index_t os,
                                          index_t o_cs, float* lse, index_t lse_s, index_t Tk,
                                          index_t D, index_t Dv, index_t i0, index_t rows,
                                          index_t offset, bool causal, float scale_log2,
                                          bool cold_kv, const flash_scratch& w) {
  constexpr index_t bk = vec::bk;
  constexpr float inf = __builtin_inff();
  // Pack qt, one lanes x lanes transpose at a time; lanes past `rows` hold zeros and are
  // never written out.
  const reg scale = vec::set1(scale_log2);
  for (int n = 0; n < nq; ++n) {
    const index_t first = n * lanes;
    const int valid = int(std::clamp<index_t>(rows - first, 0, lanes));
    for (index_t d0 = 0; d0 < D; d0 += lanes) {
      const int cols = int(std::min<index_t>(lanes, D - d0));
      reg t[lanes];
      ATTN_UNROLL
      for (int i = 0; i < lanes; ++i)
        t[i] = i < valid ? vec::mul(scale, vec::load_n(q + (i0 + first + i) * qs + d0, cols))
                         : vec::zero();
      vec::transpose(t);
      ATTN_UNROLL
      for (int c = 0; c < lanes; ++c)
        if (c < cols) vec::store(w.qt + (d0 + c) * bq + first, t[c]);
    }
  }
  std::fill_n(w.ot, Dv * bq, 0.0f);
  std::fill_n(w.m, bq, -inf);
  std::fill_n(w.l, bq, 0.0f);
  // Keys visible to the last row of the item; blocks past it are never touched.
  const index_t k_end = causal ? std::min(Tk, std::max<index_t>(0, i0 + rows + offset)) : Tk;
  // Rows further apart than D (Dv) floats are packed per block: strides like the 3 * 768 of
  // a fused QKV buffer map every row to the same few L1 sets.
  const bool pack_k = ks != D, pack_v = vs != Dv;
  // K and V come from L3 or memory, not L2, when they are too long to stay there, or when
  // this is the first item of their head on this thread (`cold_kv`): then the next block is
  // prefetched while this one computes (into L1 for a cold head: the first pass over a head
  // took 1.5x the time of the others, 1.1x with it). Otherwise the prefetches only cost.
  const bool stream = k_end * (D + Dv) * index_t(sizeof(float)) > (index_t(1) << 20);

  for (index_t j0 = 0; j0 < k_end; j0 += bk) {
    const index_t n_keys = std::min(bk, k_end - j0);
    // Key jj of the block is visible to query lane i of vector n iff jj < see(n) + i, and to
    // some lane of vector n iff jj < lim[n].
    index_t see[nq], first[nq], lim[nq];
    ATTN_UNROLL
    for (int n = 0; n < nq; ++n) {
      see[n] = i0 + n * lanes + offset + 1 - j0;
      first[n] = causal ? std::clamp<index_t>(see[n], 0, n_keys) : n_keys;
      lim[n] = causal ? std::clamp<index_t>(see[n] + lanes - 1, 0, n_keys) : n_keys;
    }
    const float* kb = k + j0 * ks;
    const float* vb = v + j0 * vs;
    index_t kbs = ks, vbs = vs;
    for (index_t j = j0 + bk; (cold_kv || stream) && j < std::min(j0 + 2 * bk, k_end); ++j) {
      for (index_t d = 0; d < D; d += 16) prefetch(k + j * ks + d, cold_kv);
      for (index_t d = 0; d < Dv; d += 16) prefetch(v + j * vs + d, cold_kv);
    }
    if (pack_k) {
      for (index_t j = 0; j < n_keys; ++j) std::copy_n(kb + j * ks, D, w.kv + j * D);
      kb = w.kv;
      kbs = D;
    }
    if (pack_v) {
      for (index_t j = 0; j < n_keys; ++j) std::copy_n(vb + j * vs, Dv, w.kv + bk * D + j * Dv);
      vb = w.kv + bk * D;
      vbs = Dv;
    }

    in_groups(n_keys, [&]<int R>(index_t jj) ATTN_SIMD_LAMBDA {
      const float* krow[R];
      ATTN_UNROLL
      for (int r = 0; r < R; ++r) krow[r] = kb + (jj + r) * kbs;
      int n0 = 0;  // vectors that see none of these keys are skipped
      while (n0 < nq - 1 && lim[n0] <= jj) ++n0;
      [&]<int... N0>(std::integer_sequence<int, N0...>) ATTN_SIMD_LAMBDA {
        ((n0 == N0 ? score_rows<R, N0>(krow, D, w.qt, w.st + jj * bq) : void()), ...);
      }
      (std::make_integer_sequence<int, nq>{});
    });

    // Online softmax, lane-wise; keys past lim[n] do not exist for vector n. All vectors go
    // through each key together: nq independent chains per step. Once the running maxima
    // settle, alpha is 1 everywhere and the rescale of ot is skipped.
    for (int n = 0; n < nq; ++n)
      for (index_t jj = first[n]; jj < lim[n]; ++jj) {  // partly visible keys: mask lanes
        float* s = w.st + jj * bq + n * lanes;
        vec::store(s, vec::set_below(vec::load(s), float(jj - see[n] + 1), -inf));
      }
    reg mx[nq], m_use[nq], sum[nq];
    ATTN_UNROLL
    for (int n = 0; n < nq; ++n) mx[n] = vec::load(w.m + n * lanes);
    by_visibility(lim, [&]<int N0>(index_t begin, index_t end) ATTN_SIMD_LAMBDA {
      for (index_t jj = begin; jj < end; ++jj) {
        ATTN_UNROLL
        for (int n = N0; n < nq; ++n)
          mx[n] = vec::max(mx[n], vec::load(w.st + jj * bq + n * lanes));
      }
    });
    ATTN_UNROLL
    for (int n = 0; n < nq; ++n) {
      m_use[n] = vec::replace_neg_inf(mx[n], 0.0f);  // all masked so far
      sum[n] = vec::zero();
    }
    by_visibility(lim, [&]<int N0>(index_t begin, index_t end) ATTN_SIMD_LAMBDA {
      for (index_t jj = begin; jj < end; ++jj) {
        ATTN_UNROLL
        for (int n = N0; n < nq; ++n) {
          float* s = w.st + jj * bq + n * lanes;
          const reg p = vec::exp2(vec::sub(vec::load(s), m_use[n]));
          vec::store(s, p);
          sum[n] = vec::add(sum[n], p);
        }
      }
    });
    bool rescale = false;
    ATTN_UNROLL
    for (int n = 0; n < nq; ++n) {
      const index_t c = n * lanes;
      const reg alpha = vec::exp2(vec::sub(vec::load(w.m + c), m_use[n]));
      vec::store(w.alpha + c, alpha);
      rescale = rescale || !vec::all_equal(alpha, 1.0f);
      vec::store(w.l + c, vec::fmadd(alpha, vec::load(w.l + c), sum[n]));
      vec::store(w.m + c, mx[n]);
    }
    in_groups(Dv, [&]<int R>(index_t dv) ATTN_SIMD_LAMBDA {
      value_rows<R>(vb + dv, vbs, lim, w.st, rescale ? w.alpha : nullptr, w.ot + dv * bq);
    });
  }

  // O = ot^T / l, transposed back a lanes x lanes block at a time (rows that saw no key at
  // all have l = 0 and get zeros).
  for (int n = 0; n < nq; ++n) {
    const index_t first = n * lanes;
    const int valid = int(std::clamp<index_t>(rows - first, 0, lanes));
    const reg inv = vec::inverse_or_zero(vec::load(w.l + first));
    for (index_t dv0 = 0; valid > 0 && dv0 < Dv; dv0 += lanes) {
      const int cols = int(std::min<index_t>(lanes, Dv - dv0));
      reg t[lanes];
      ATTN_UNROLL
      for (int c = 0; c < lanes; ++c)
        t[c] = c < cols ? vec::mul(inv, vec::load(w.ot + (dv0 + c) * bq + first)) : vec::zero();
      vec::transpose(t);
      float* oi = o + (i0 + first) * os + dv0 * o_cs;
      ATTN_UNROLL
      for (int i = 0; i < lanes; ++i) {
        if (i >= valid) break;
        if (o_cs == 1) {
          vec::store_n(oi + i * os, t[i], cols);
        } else {
          alignas(64) float row[lanes];
          vec::store(row, t[i]);
          for (int c = 0; c < cols; ++c) oi[i * os + c * o_cs] = row[c];
        }
      }
    }
  }
  if (lse == nullptr) return;
  constexpr float ln2 = 0.693147180559945309f;
  for (index_t i = 0; i < rows; ++i) {
    const float l = w.l[i];
    lse[(i0 + i) * lse_s] = l > 0.0f ? (w.m[i] + std::log2(l)) * ln2 : -inf;
  }
}
