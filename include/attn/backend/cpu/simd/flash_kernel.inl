// The float flash-attention micro-kernel, written once against a vector type `vec` and
// compiled once per instruction set by flash_simd.hpp (which includes this file inside a
// namespace and a target region, so it has no include guard and includes nothing).
//
// Everything is transposed so that one vector lane is one query and the online softmax needs
// no horizontal reduction:
//   qt (D, BQ)   = (Q * scale * log2 e)^T, packed once per query tile
//   st (BK, BQ)  = K_blk qt: scores in log2 units, then probabilities P^T
//   ot (Dv, BQ)  = O^T accumulator, rescaled by alpha = 2^(m_old - m_new) per key block
// with BQ = vec::nq * vec::lanes queries per tile (a work item has several tiles, which
// share each chunk of K and V while it is in L2: flash_item). Both products are register-blocked
// R rows x nq vectors (R <= vec::rk): one broadcast scalar feeds up to nq FMAs.
//
// Visibility (attn/core/visibility.hpp) per key block: in a block every row sees entirely (the
// common case) nothing is masked. In an edge block, lane i of vector n sees the block's keys
// [lo_i, hi_i); lim[n] (the last lane's hi) bounds what vector n computes at all, full[n]
// (the first lane's hi) what all its lanes see. Keys at or past lim[n] are never computed,
// exponentiated or accumulated for vector n, so a block that the causal diagonal crosses costs
// about half a full one. Keys some lanes of a vector do not see are masked to -inf in the
// scores, so their p is exactly 0 there and plain FMAs add exact zeros for their values; only
// a block where such a value is NaN or Inf leaves them out by masked FMAs, so a NaN or Inf
// stored at a hidden key or value never reaches a row (0 x NaN would).
//
// Sums over long key ranges are hierarchical: each key block's P V and row sums start from
// zero and are added into the running ot and l with a compensated (Kahan) addition, so 2^26
// keys sum as accurately as 128.

using reg = typename vec::reg;
using mask = typename vec::mask;
inline constexpr int nq = vec::nq, lanes = vec::lanes;
inline constexpr index_t bq = index_t(nq) * lanes, bk = vec::bk;

/// Per-item scratch, 64-byte aligned segments of one buffer of flash_scratch_floats(bq, bk, D,
/// Dv, tiles) floats: what the query tiles of an item share, then each tile's state.
struct flash_scratch {
  float* st;     // (BK, BQ)
  float* alpha;  // (BQ) rescale of the current key block
  float* lo;     // (BQ) first key of the block each lane sees (block-relative)
  float* hi;     // (BQ) one past its last
  float* end;    // (BQ) scratch for the finish
  float* kv;     // (BK, D + Dv) K and V blocks, packed when their rows are not dense
  float* tiles;  // flash_tile_floats(bq, D, Dv) per tile

  ATTN_SIMD_INLINE flash_scratch(float* p, index_t D, index_t Dv, index_t n_tiles) {
    st = p, p += bk * bq;
    for (float** v : {&alpha, &lo, &hi, &end}) *v = p, p += bq;
    tiles = p, p += n_tiles * flash_tile_floats(bq, D, Dv);
    kv = p;
  }
};

/// One query tile of an item: queries [i0, i0 + rows) (rows <= BQ), the keys they see, the
/// first key of the next block to compute, and the tile's running state.
struct flash_tile {
  index_t i0, rows;
  key_range span;
  index_t next;
  float* qt;     // (D, BQ)
  float* ot;     // (Dv, BQ) running output, and its compensation
  float* ot_lo;  // (Dv, BQ)
  float* m;      // (BQ) running max, log2 units
  float* l;      // (BQ) running sum, and its compensation
  float* l_lo;   // (BQ)

  /// Places the state at p (flash_tile_floats(bq, D, Dv) floats).
  ATTN_SIMD_INLINE void place(float* p, index_t D, index_t Dv) {
    float** segments[] = {&qt, &ot, &ot_lo};
    const index_t sizes[] = {D * bq, Dv * bq, Dv * bq};
    for (int s = 0; s < 3; ++s) *segments[s] = p, p += sizes[s];
    for (float** v : {&m, &l, &l_lo}) *v = p, p += bq;
  }
};

/// body(i) for i in [begin, end), the loop unrolled 4 times where `unrolled`: the full register
/// tiles of the two products, where GCC at -O2 keeps one step per iteration, its counting and
/// addressing beside 24 FMAs (unrolled, the T 1024 forward ran 1-3 % faster with AVX-512 and
/// 7-10 % with AVX2 on a Sapphire Rapids class Xeon). The other tiles stay rolled (code size:
/// unrolling them too timed the same).
template <bool unrolled, class F>
ATTN_SIMD_INLINE void steps(index_t begin, index_t end, F&& body) {
  if constexpr (unrolled) {
    ATTN_SIMD_UNROLL_BY4
    for (index_t i = begin; i < end; ++i) body(i);
  } else {
    for (index_t i = begin; i < end; ++i) body(i);
  }
}

/// st[r] = sum_d krow[r][d] * qt[d] for R key rows, query vectors N0..nq-1; with `mx`, also
/// mx[n] = max(mx[n], st[r] lanes of vector n) (blocks where every lane sees every key).
template <int R, int N0>
ATTN_SIMD_INLINE void score_rows(const float* const* krow, index_t D, const float* qt, float* st,
                                 reg* mx = nullptr) {
  reg acc[R][nq];
  ATTN_SIMD_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTN_SIMD_UNROLL
    for (int n = N0; n < nq; ++n) acc[r][n] = vec::zero();
  }
  steps<R == vec::rk && N0 == 0>(0, D, [&](index_t d) ATTN_SIMD_LAMBDA {
    reg q[nq];
    ATTN_SIMD_UNROLL
    for (int n = N0; n < nq; ++n) q[n] = vec::load(qt + d * bq + n * lanes);
    ATTN_SIMD_UNROLL
    for (int r = 0; r < R; ++r) {
      const reg kb = vec::set1(krow[r][d]);
      ATTN_SIMD_UNROLL
      for (int n = N0; n < nq; ++n) acc[r][n] = vec::fmadd(kb, q[n], acc[r][n]);
    }
  });
  ATTN_SIMD_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTN_SIMD_UNROLL
    for (int n = N0; n < nq; ++n) {
      vec::store(st + r * bq + n * lanes, acc[r][n]);
      if (mx != nullptr) mx[n] = vec::max(mx[n], acc[r][n]);
    }
  }
}

/// Calls f.template operator()<N0>(begin, end) for each run of keys [begin, end) of a block
/// that exactly the query vectors N0..nq-1 see: vector n sees keys [0, lim[n]), and lim is
/// nondecreasing in n.
template <class F>
ATTN_SIMD_INLINE void by_visibility(const index_t* lim, F&& f) {
  index_t j = 0;
  [&]<int... N0>(std::integer_sequence<int, N0...>) ATTN_SIMD_LAMBDA {
    ((f.template operator()<N0>(j, lim[N0]), j = std::max(j, lim[N0])), ...);
  }
  (std::make_integer_sequence<int, nq>{});
}

/// The visibility of one key block for the vectors of an item (see the file comment).
struct block_view {
  index_t lim[nq], full[nq];  // full[n] <= lim[n], both nondecreasing in n
  bool edge;                  // some lane does not see some key [0, lim)
  bool lower;                 // some lane does not see the block's first keys
  bool masked;                // P V needs masked FMAs (an edge block with a non-finite value)
  reg lo[nq], hi[nq];         // per lane, block-relative (edge blocks only)
};

/// Masked P V for the keys [begin, end) of vector n only: key j feeds lane i iff lo_i <= j < hi_i.
template <int R, int N>
ATTN_SIMD_INLINE void value_masked(const float* v, index_t vs, const block_view& bv, index_t begin,
                                   index_t end, const float* st, reg (&acc)[R][nq]) {
  for (index_t j = begin; j < end; ++j) {
    const mask vis = vec::between(float(j), bv.lo[N], bv.hi[N]);
    const reg p = vec::load(st + j * bq + N * lanes);
    const float* vj = v + j * vs;
    ATTN_SIMD_UNROLL
    for (int r = 0; r < R; ++r) acc[r][N] = vec::fmadd_where(vis, vec::set1(vj[r]), p, acc[r][N]);
  }
}

/// value_masked for every vector N: keys [0, lim) with a lower edge, else [full, lim).
template <int R, int... N>
ATTN_SIMD_INLINE void value_masked_all(const float* v, index_t vs, const block_view& bv,
                                       const float* st, reg (&acc)[R][nq],
                                       std::integer_sequence<int, N...>) {
  (value_masked<R, N>(v, vs, bv, bv.lower ? 0 : bv.full[N], bv.lim[N], st, acc), ...);
}

/// The block's P V for R value columns, added into ot (first rescaled by alpha unless null)
/// by a compensated addition; on the tile's first block (`first`), stored as ot.
template <int R>
ATTN_SIMD_INLINE void value_rows(const float* v, index_t vs, const block_view& bv, const float* st,
                                 const float* alpha, bool first, float* ot, float* ot_lo) {
  reg acc[R][nq];
  ATTN_SIMD_UNROLL
  for (int n = 0; n < nq; ++n) {
    ATTN_SIMD_UNROLL
    for (int r = 0; r < R; ++r) acc[r][n] = vec::zero();
  }
  // Keys that vectors N0.. compute (or, with masked FMAs to come, that all their lanes see):
  // plain FMAs.
  const index_t* plain = bv.masked ? bv.full : bv.lim;
  if (!bv.masked || !bv.lower)
    by_visibility(plain, [&]<int N0>(index_t begin, index_t end) ATTN_SIMD_LAMBDA {
      steps<R == vec::rk && N0 == 0>(begin, end, [&](index_t j) ATTN_SIMD_LAMBDA {
        reg p[nq];
        ATTN_SIMD_UNROLL
        for (int n = N0; n < nq; ++n) p[n] = vec::load(st + j * bq + n * lanes);
        const float* vj = v + j * vs;
        ATTN_SIMD_UNROLL
        for (int r = 0; r < R; ++r) {
          const reg vb = vec::set1(vj[r]);
          ATTN_SIMD_UNROLL
          for (int n = N0; n < nq; ++n) acc[r][n] = vec::fmadd(vb, p[n], acc[r][n]);
        }
      });
    });
  // Keys only some lanes see: masked FMAs, vector by vector.
  if (bv.masked) value_masked_all<R>(v, vs, bv, st, acc, std::make_integer_sequence<int, nq>{});
  ATTN_SIMD_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTN_SIMD_UNROLL
    for (int n = 0; n < nq; ++n) {
      float* hi = ot + r * bq + n * lanes;
      float* lo = ot_lo + r * bq + n * lanes;
      if (first) {
        vec::store(hi, acc[r][n]);
        vec::store(lo, vec::zero());
        continue;
      }
      reg h = vec::load(hi), c = vec::load(lo);
      if (alpha != nullptr) {
        const reg a = vec::load(alpha + n * lanes);
        h = vec::mul(a, h);
        c = vec::mul(a, c);
      }
      const reg y = vec::sub(acc[r][n], c), t = vec::add(h, y);
      vec::store(lo, vec::sub(vec::sub(t, h), y));
      vec::store(hi, t);
    }
  }
}

/// Calls f.template operator()<R>(start) over [0, count) in groups of G, then one group of
/// the remainder.
template <int G = vec::rk, class F>
ATTN_SIMD_INLINE void in_groups(index_t count, F&& f) {
  index_t i = 0;
  for (; i + G <= count; i += G) f.template operator()<G>(i);
  [&]<int... R>(std::integer_sequence<int, R...>) ATTN_SIMD_LAMBDA {
    ((count - i == R + 1 ? f.template operator()<R + 1>(i) : void()), ...);
  }
  (std::make_integer_sequence<int, G - 1>{});
}

/// Adds x * 0 for the n contiguous floats at p into acc: 0 for finite x, NaN for NaN and Inf.
/// Four independent sums, so that the adds do not wait on one another.
ATTN_SIMD_INLINE void add_times_zero(const float* p, index_t n, reg (&acc)[4]) {
  index_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    ATTN_SIMD_UNROLL
    for (int c = 0; c < 4; ++c)
      acc[c] = vec::add(acc[c], vec::mul(vec::loadu(p + i + c * lanes), vec::zero()));
  }
  for (; i < n; i += lanes) {
    const reg x = i + lanes <= n ? vec::loadu(p + i) : vec::load_n(p + i, int(n - i));
    acc[0] = vec::add(acc[0], vec::mul(x, vec::zero()));
  }
}

/// Whether rows [begin, end) of V (Dv floats each, vs apart) hold only finite values.
ATTN_SIMD_INLINE bool rows_finite(const float* v, index_t vs, index_t Dv, index_t begin,
                                  index_t end) {
  reg acc[4] = {vec::zero(), vec::zero(), vec::zero(), vec::zero()};
  for (index_t j = begin; j < end; ++j) add_times_zero(v + j * vs, Dv, acc);
  return vec::all_equal(vec::add(vec::add(acc[0], acc[1]), vec::add(acc[2], acc[3])), 0.0f);
}

/// Whether n contiguous floats are all finite.
ATTN_SIMD_INLINE bool all_finite(const float* p, index_t n) { return rows_finite(p, n, n, 0, 1); }

/// Prefetches the line at p into L1 (`to_l1`) or L2.
ATTN_SIMD_INLINE void prefetch(const float* p, bool to_l1) {
  if (to_l1)
    __builtin_prefetch(p, 0, 3);
  else
    __builtin_prefetch(p, 0, 2);
}

/// The visibility of the key block [j0, j0 + n_keys) for queries [i0, i0 + rows) of `h`.
ATTN_SIMD_INLINE block_view view_block(const flash_head& h, index_t i0, index_t rows, index_t j0,
                                       index_t n_keys, const flash_scratch& w) {
  block_view bv;
  const key_range common = h.vis.common(i0, i0 + rows);
  bv.edge = !(common.begin <= j0 && j0 + n_keys <= common.end);
  bv.lower = false;
  if (!bv.edge) {
    for (int n = 0; n < nq; ++n) bv.lim[n] = bv.full[n] = n_keys;
    return bv;
  }
  const auto rel = [&](index_t key) { return std::clamp<index_t>(key - j0, 0, n_keys); };
  for (index_t l = 0; l < bq; ++l) {  // lanes past `rows` repeat the last row
    const key_range keys = h.vis.row(i0 + std::min(l, rows - 1));
    w.lo[l] = float(rel(keys.begin));
    w.hi[l] = float(std::max(rel(keys.begin), rel(keys.end)));
  }
  for (int n = 0; n < nq; ++n) {
    const index_t first = n * lanes, last = first + lanes - 1;
    bv.lim[n] = index_t(w.hi[last]);
    bv.full[n] = index_t(w.hi[first]);
    bv.lower = bv.lower || w.lo[last] > 0.0f;
    bv.lo[n] = vec::load(w.lo + first);
    bv.hi[n] = vec::load(w.hi + first);
  }
  return bv;
}

/// x[c] <- column c of the lanes x lanes tile at `src` (row stride rs), its rows times `scale`:
/// rows past `valid` and columns past `cols` read as zeros.
ATTN_SIMD_INLINE void load_transposed(const float* src, index_t rs, int valid, int cols, reg scale,
                                      reg (&x)[lanes]) {
  ATTN_SIMD_UNROLL
  for (int i = 0; i < lanes; ++i)
    x[i] = i < valid && cols > 0 ? vec::mul(scale, vec::load_n(src + i * rs, cols)) : vec::zero();
  vec::transpose(x);
}

/// Starts tile t: packs qt, one lanes x lanes transpose at a time (lanes past `rows` hold
/// zeros and are never written out), and clears its running state.
ATTN_SIMD_INLINE void tile_start(const flash_head& h, const flash_tile& t) {
  constexpr float inf = __builtin_inff();
  const index_t D = h.D, Dv = h.Dv, i0 = t.i0, rows = t.rows;
  const reg scale = vec::set1(h.scale_log2);
  for (int n = 0; n < nq; ++n) {
    const index_t first = n * lanes;
    const int valid = int(std::clamp<index_t>(rows - first, 0, lanes));
    for (index_t d0 = 0; d0 < D; d0 += lanes) {
      const int cols = int(std::min<index_t>(lanes, D - d0));
      reg x[lanes];
      load_transposed(h.q + (i0 + first) * h.qs + d0, h.qs, valid, cols, scale, x);
      ATTN_SIMD_UNROLL
      for (int c = 0; c < lanes; ++c)
        if (c < cols) vec::store(t.qt + (d0 + c) * bq + first, x[c]);
    }
  }
  if (t.span.empty()) std::fill_n(t.ot, 2 * Dv * bq, 0.0f);  // (else the first block stores)
  std::fill_n(t.m, bq, -inf);
  std::fill_n(t.l, 2 * bq, 0.0f);  // l and l_lo
}

/// Rows [at, end) of K and V, prefetched while a block computes (the next block's), a few with
/// each group of keys scored, so that the fetches overlap the arithmetic instead of filling the
/// core's miss buffers in one burst.
struct row_prefetch {
  const flash_head* h;
  index_t first, at, end;
  bool to_l1;
  /// Prefetches the rows before first + n.
  ATTN_SIMD_INLINE void upto(index_t n) {
    for (const index_t until = std::min(first + n, end); at < until; ++at) {
      for (index_t d = 0; d < h->D; d += 16) prefetch(h->k + at * h->ks + d, to_l1);
      for (index_t d = 0; d < h->Dv; d += 16) prefetch(h->v + at * h->vs + d, to_l1);
    }
  }
};

/// The key block [j0, j0 + n_keys) for tile t: scores, online softmax, P V. K and V rows of
/// the block at kb, vb with row strides kbs, vbs; `next` is fetched as the scores go.
ATTN_SIMD_INLINE void tile_block(const flash_head& h, const flash_tile& t, index_t j0,
                                 index_t n_keys, const float* kb, index_t kbs, const float* vb,
                                 index_t vbs, const flash_scratch& w, row_prefetch& next) {
  constexpr float inf = __builtin_inff();
  const index_t Dv = h.Dv;
  const index_t D = h.D;
  block_view bv = view_block(h, t.i0, t.rows, j0, n_keys, w);
  // A key that some lanes of a vector do not see has p = 0 in those lanes, so plain FMAs add
  // exact zeros unless its value is NaN or Inf (0 x Inf = NaN must not reach a row that does
  // not see it): those blocks alone take the masked FMAs.
  bv.masked = bv.edge && !rows_finite(vb, vbs, Dv, bv.lower ? 0 : bv.full[0], bv.lim[nq - 1]);
  reg mx[nq], m_use[nq], sum[nq];
  ATTN_SIMD_UNROLL
  for (int n = 0; n < nq; ++n) mx[n] = vec::load(t.m + n * lanes);
  // Keys [0, fused) that every lane sees take their maxima as the scores leave the registers:
  // a whole block, or the groups of keys before an edge block's first hidden key. (Two loops:
  // one branch inside a single loop costs the AVX2 tiles their registers.)
  const index_t fused = !bv.edge ? n_keys : bv.lower ? 0 : bv.full[0] / vec::rk * vec::rk;
  in_groups(fused, [&]<int R>(index_t jj) ATTN_SIMD_LAMBDA {
    const float* krow[R];
    ATTN_SIMD_UNROLL
    for (int r = 0; r < R; ++r) krow[r] = kb + (jj + r) * kbs;
    next.upto(jj + R);
    score_rows<R, 0>(krow, D, t.qt, w.st + jj * bq, mx);
  });
  in_groups(n_keys - fused, [&]<int R>(index_t j) ATTN_SIMD_LAMBDA {
    const index_t jj = fused + j;
    const float* krow[R];
    ATTN_SIMD_UNROLL
    for (int r = 0; r < R; ++r) krow[r] = kb + (jj + r) * kbs;
    next.upto(jj + R);
    int n0 = 0;  // vectors that see none of these keys are skipped
    while (n0 < nq - 1 && bv.lim[n0] <= jj) ++n0;
    [&]<int... N0>(std::integer_sequence<int, N0...>) ATTN_SIMD_LAMBDA {
      ((n0 == N0 ? score_rows<R, N0>(krow, D, t.qt, w.st + jj * bq) : void()), ...);
    }
    (std::make_integer_sequence<int, nq>{});
  });

  // Online softmax, lane-wise; keys past lim[n] do not exist for vector n, and keys some of
  // its lanes do not see are -inf in those lanes. All vectors go through each key together:
  // nq independent chains per step. Once the running maxima settle, alpha is 1 everywhere
  // and the rescale of ot is skipped.
  if (bv.edge)
    for (int n = 0; n < nq; ++n)
      for (index_t jj = bv.lower ? 0 : bv.full[n]; jj < bv.lim[n]; ++jj) {
        float* s = w.st + jj * bq + n * lanes;
        vec::store(s, vec::select(vec::between(float(jj), bv.lo[n], bv.hi[n]), vec::load(s),
                                  vec::set1(-inf)));
      }
  if (bv.edge)
    by_visibility(bv.lim, [&]<int N0>(index_t begin, index_t end) ATTN_SIMD_LAMBDA {
      for (index_t jj = std::max(begin, fused); jj < end; ++jj) {
        ATTN_SIMD_UNROLL
        for (int n = N0; n < nq; ++n)
          mx[n] = vec::max(mx[n], vec::load(w.st + jj * bq + n * lanes));
      }
    });
  ATTN_SIMD_UNROLL
  for (int n = 0; n < nq; ++n) {
    m_use[n] = vec::replace_neg_inf(mx[n], 0.0f);  // all masked so far
    sum[n] = vec::zero();
  }
  by_visibility(bv.lim, [&]<int N0>(index_t begin, index_t end) ATTN_SIMD_LAMBDA {
    for (index_t jj = begin; jj < end; ++jj) {
      ATTN_SIMD_UNROLL
      for (int n = N0; n < nq; ++n) {
        float* s = w.st + jj * bq + n * lanes;
        const reg p = vec::exp2(vec::sub(vec::load(s), m_use[n]));
        vec::store(s, p);
        sum[n] = vec::add(sum[n], p);
      }
    }
  });
  bool rescale = false;
  ATTN_SIMD_UNROLL
  for (int n = 0; n < nq; ++n) {
    const index_t c = n * lanes;
    const reg alpha = vec::exp2(vec::sub(vec::load(t.m + c), m_use[n]));
    vec::store(w.alpha + c, alpha);
    rescale = rescale || !vec::all_equal(alpha, 1.0f);
    const reg l = vec::mul(alpha, vec::load(t.l + c)), lo = vec::mul(alpha, vec::load(t.l_lo + c));
    const reg y = vec::sub(sum[n], lo), l_new = vec::add(l, y);  // compensated l += sum
    vec::store(t.l_lo + c, vec::sub(vec::sub(l_new, l), y));
    vec::store(t.l + c, l_new);
    vec::store(t.m + c, mx[n]);
  }
  in_groups(Dv, [&]<int R>(index_t dv) ATTN_SIMD_LAMBDA {
    value_rows<R>(vb + dv, vbs, bv, w.st, rescale ? w.alpha : nullptr, j0 == t.span.begin,
                  t.ot + dv * bq, t.ot_lo + dv * bq);
  });
}

/// Finishes tile t: every row's end (zeros and lse -inf for a row that sees no key), then
/// O = (ot - ot_lo)^T * scale, transposed back a lanes x lanes block at a time.
ATTN_SIMD_INLINE void tile_finish(const flash_head& h, const flash_tile& t,
                                  const flash_scratch& w) {
  const index_t Dv = h.Dv, i0 = t.i0, rows = t.rows;
  std::fill_n(w.end, bq, 0.0f);
  for (index_t i = 0; i < rows; ++i) {
    const bool sees = !h.vis.row(i0 + i).empty();
    const float sum = t.l[i] - t.l_lo[i];
    if (h.lse == nullptr) {  // (the log would cost 1 % of a T 256 forward)
      w.end[i] = softmax_scale(sees, sum);
      continue;
    }
    const softmax_end<float> end = finish_softmax_log2(sees, t.m[i], sum);
    w.end[i] = end.scale;
    h.lse[(i0 + i) * h.lse_s] = end.lse;
  }
  for (int n = 0; n < nq; ++n) {
    const index_t first = n * lanes;
    const int valid = int(std::clamp<index_t>(rows - first, 0, lanes));
    const reg inv = vec::load(w.end + first);
    for (index_t dv0 = 0; valid > 0 && dv0 < Dv; dv0 += lanes) {
      const int cols = int(std::min<index_t>(lanes, Dv - dv0));
      reg x[lanes];
      ATTN_SIMD_UNROLL
      for (int c = 0; c < lanes; ++c) {
        const index_t at = (dv0 + c) * bq + first;
        x[c] = c < cols ? vec::mul(inv, vec::sub(vec::load(t.ot + at), vec::load(t.ot_lo + at)))
                        : vec::zero();
      }
      vec::transpose(x);
      float* oi = h.o + (i0 + first) * h.os + dv0 * h.o_cs;
      ATTN_SIMD_UNROLL
      for (int i = 0; i < lanes; ++i) {
        if (i >= valid) break;
        if (h.o_cs == 1) {
          vec::store_n(oi + i * h.os, x[i], cols);
        } else {
          alignas(64) float row[lanes];
          vec::store(row, x[i]);
          for (int c = 0; c < cols; ++c) oi[i * h.os + c * h.o_cs] = row[c];
        }
      }
    }
  }
}

/// Keys per chunk of an item: whole blocks of K and V rows, about 128 KiB of them or one block
/// where that is more (512 keys, 256 KiB, at D = Dv = 64).
ATTN_SIMD_INLINE index_t chunk_keys(index_t D, index_t Dv) {
  return std::max(
      bk, (index_t(128) << 10) / (index_t(sizeof(float)) * std::max<index_t>(1, D + Dv)) / bk * bk);
}

/// One work item: queries [i0, i0 + rows) of one (batch, head), in query tiles of BQ rows
/// (rows <= flash_item_tiles(bq, D, Dv) BQ). The tiles go through the keys together, one
/// chunk of K and V rows (chunk_keys) at a time: the first tile brings the chunk into L2
/// (prefetching the next block as it goes) and the others find it there, so each K/V row
/// comes from L3 or memory once per item, not once per tile. Each tile still computes its
/// own blocks in its own order, so its results do not depend on the grouping. `cold_kv`:
/// this is the first item of its head on this thread (prefetch into L1, not L2).
ATTN_SIMD_NOINLINE inline void flash_item(const flash_head& h, index_t i0, index_t rows,
                                          bool cold_kv, float* scratch) {
  const index_t D = h.D, Dv = h.Dv, n_tiles = (rows + bq - 1) / bq;
  const flash_scratch w(scratch, D, Dv, n_tiles);
  flash_tile tiles[flash_max_tiles];
  for (index_t t = 0; t < n_tiles; ++t) {
    flash_tile& tile = tiles[t];
    tile.place(w.tiles + t * flash_tile_floats(bq, D, Dv), D, Dv);
    tile.i0 = i0 + t * bq;
    tile.rows = std::min(bq, i0 + rows - tile.i0);
    tile.span = h.vis.rows(tile.i0, tile.i0 + tile.rows);  // blocks outside: never touched
    tile.next = tile.span.begin;
    tile_start(h, tile);
  }
  const key_range span = h.vis.rows(i0, i0 + rows);
  // Rows further apart than D (Dv) floats are packed per block: strides like the 3 * 768 of
  // a fused QKV buffer map every row to the same few L1 sets.
  const bool pack_k = h.ks != D, pack_v = h.vs != Dv;
  const index_t chunk = chunk_keys(D, Dv);
  // The next block is prefetched while one computes only where K and V come from L3 or
  // memory: on the head's first item on this thread (into L1), or when the head's K and V
  // (over 1 MiB) cannot stay in L2 between items. Otherwise the prefetches only cost (2 % of
  // a T 1024 forward on a Xeon).
  const bool fetch =
      cold_kv || span.size() * (D + Dv) * index_t(sizeof(float)) > (index_t(1) << 20);
  for (index_t c0 = span.begin; c0 < span.end; c0 += chunk) {
    const index_t c1 = std::min(c0 + chunk, span.end);
    bool first = true;  // no tile has computed in this chunk yet
    for (index_t t = 0; t < n_tiles; ++t) {
      flash_tile& tile = tiles[t];
      const index_t until = std::min(c1, tile.span.end), before = tile.next;
      for (; tile.next < until; tile.next += bk) {
        const index_t j0 = tile.next, n_keys = std::min(bk, tile.span.end - j0);
        const float* kb = h.k + j0 * h.ks;
        const float* vb = h.v + j0 * h.vs;
        index_t kbs = h.ks, vbs = h.vs;
        // (the first tile in the chunk fetches the next block: the others find it in L2)
        const index_t f0 = j0 + bk, f1 = fetch && first ? std::min(f0 + bk, span.end) : f0;
        row_prefetch next{&h, f0, f0, f1, cold_kv};
        if (pack_k) {
          for (index_t j = 0; j < n_keys; ++j) std::copy_n(kb + j * h.ks, D, w.kv + j * D);
          kb = w.kv;
          kbs = D;
        }
        if (pack_v) {
          for (index_t j = 0; j < n_keys; ++j)
            std::copy_n(vb + j * h.vs, Dv, w.kv + bk * D + j * Dv);
          vb = w.kv + bk * D;
          vbs = Dv;
        }
        tile_block(h, tile, j0, n_keys, kb, kbs, vb, vbs, w, next);
        next.upto(bk);  // (the rows past a shorter block's)
      }
      first = first && tile.next == before;
    }
  }
  for (index_t t = 0; t < n_tiles; ++t) tile_finish(h, tiles[t], w);
}
