// The float flash-attention backward, written once against `vec` and compiled per instruction
// set by flash_simd.hpp (included inside a namespace and a target region, after
// flash_kernel.inl, whose helpers it uses; no include guard, includes nothing).
//
// FlashAttention-2's form: one work item owns a range of key blocks of one (batch, key head)
// and every query head of its group. Per key block j (outer) and query block i (inner):
//   S  = Q_i K_j^T                 (bq, bk)
//   P  = exp2(S * scale log2 e - lse_i log2 e), 0 where hidden
//   dP = dO_i V_j^T                (bq, bk)
//   dS = scale * P * (dP - D_i),   0 where hidden;  D_i = rowsum(dO_i * O_i)
//   dV_j += P^T dO_i,  dK_j += dS^T Q_i,  dQ_i += dS K_j
// In a block that some row sees only in part, the products would meet the zeros of hidden pairs
// with that row's dO and Q (and the hidden keys' K): where any of those holds a NaN or Inf, the
// block is summed pair by visible pair instead, so a value no gradient depends on reaches none.
// Otherwise such a block's products are banded (gemm_banded): each query tile computes scores
// only up to the last key its rows see, each key tile sums only the rows that see one of its
// keys, so a block the causal diagonal crosses costs about half a full one.
// In a whole block that every row sees, P and dS are computed as S and dP leave the registers.
// dK_j and dV_j stay in scratch for the whole inner loop and are written once; dQ accumulates
// in the item's own buffer. All five products go through one register-blocked tile
// C[R x NV lanes] (+)= A(r, k) B[k, :]: A read by broadcasts at any strides, B and C rows
// contiguous, so every operand is packed once into that form (Q, dO per item; K, K^T, V^T per
// key block), with head dims padded to whole vectors; Q, dO and K are read in place where they
// are in that form already (dense rows of whole vectors, as in a [B, H, T, 64] tensor).

/// A step that does nothing (gemm_tile's default).
struct no_step {
  ATTN_SIMD_INLINE void operator()(index_t) const {}
};

/// f(k) for k = 0, S, 2S, ... below n, in order; unless `step` is a no_step, step(k) first at
/// k = 0, e, 2e, ... with e = Step::every (a multiple of S), outside the loop over a run of e.
/// That run is unrolled: as a loop of its own, with the step's state beside it, GCC kept the
/// counters of an AVX2 tile in memory (16 registers), and a 12-row decode step with K and V
/// in cache took a fifth longer (Sapphire Rapids class Xeon, x86-64-v3 build).
template <index_t S = 1, class Step, class F>
ATTN_SIMD_INLINE void stepped(index_t n, Step&& step, F&& f) {
  using step_t = std::remove_cvref_t<Step>;
  index_t k = 0;
  if constexpr (!std::is_same_v<step_t, no_step>) {
    static_assert(step_t::every % S == 0);
    for (; k + step_t::every <= n; k += step_t::every) {
      step(k);
      ATTN_SIMD_UNROLL
      for (index_t u = 0; u < step_t::every; u += S) f(k + u);
    }
    if (k < n) step(k);
  }
  for (; k < n; k += S) f(k);
}

/// Stores a tile's sums as they are (gemm_tile's default).
struct plain_store {
  ATTN_SIMD_INLINE void operator()(float* p, int, reg x) const { vec::store(p, x); }
};

/// C rows [0, R) x columns [0, NV lanes) (+)= sum_k A(r, k) B[k, :], A(r, k) = a[r ars + k acs],
/// B row k at b + k bs (any alignment), C row r at c + r cs (whole vectors); `step` as in
/// stepped (the decode kernel's prefetches ride on it); store(p, r, x) puts row r's sums x at
/// p (an elementwise step can ride on it).
template <int R, int NV, class Step = no_step, class Store = plain_store>
ATTN_SIMD_INLINE void gemm_tile(const float* a, index_t ars, index_t acs, const float* b,
                                index_t bs, float* c, index_t cs, index_t K, bool accumulate,
                                Step&& step = {}, Store&& store = {}) {
  reg acc[R][NV];
  ATTN_SIMD_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTN_SIMD_UNROLL
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? vec::load(c + r * cs + v * lanes) : vec::zero();
  }
  const auto at = [&](index_t k) ATTN_SIMD_LAMBDA {
    reg bv[NV];
    ATTN_SIMD_UNROLL
    for (int v = 0; v < NV; ++v) bv[v] = vec::loadu(b + k * bs + v * lanes);
    ATTN_SIMD_UNROLL
    for (int r = 0; r < R; ++r) {
      const reg av = vec::set1(a[r * ars + k * acs]);
      ATTN_SIMD_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = vec::fmadd(av, bv[v], acc[r][v]);
    }
  };
  stepped(K, step, at);
  ATTN_SIMD_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTN_SIMD_UNROLL
    for (int v = 0; v < NV; ++v) store(c + r * cs + v * lanes, r, acc[r][v]);
  }
}

/// C (M, N) (+)= A (M, K) B (K, N), N a multiple of lanes (see gemm_tile): tiles nq vectors
/// across and vec::rk rows down, or one vector across and twice the rows (so that either has
/// enough independent sums to cover the FMA latency). Every element of C is summed over k in
/// order whatever its tile.
template <class Step = no_step>
ATTN_SIMD_INLINE void gemm(const float* a, index_t ars, index_t acs, const float* b, index_t bs,
                           float* c, index_t cs, index_t M, index_t N, index_t K, bool accumulate,
                           Step&& step = {}) {
  constexpr index_t wide = index_t(nq) * lanes;
  index_t n0 = 0;
  for (; n0 + wide <= N; n0 += wide)
    in_groups(M, [&]<int R>(index_t r0) ATTN_SIMD_LAMBDA {
      gemm_tile<R, nq>(a + r0 * ars, ars, acs, b + n0, bs, c + r0 * cs + n0, cs, K, accumulate,
                       step);
    });
  for (; n0 < N; n0 += lanes)
    in_groups<2 * vec::rk>(M, [&]<int R>(index_t r0) ATTN_SIMD_LAMBDA {
      gemm_tile<R, 1>(a + r0 * ars, ars, acs, b + n0, bs, c + r0 * cs + n0, cs, K, accumulate,
                      step);
    });
}

/// P = exp2(S scale log2 e - lse log2 e) for a vector of scores S (one row's lse2 = lse log2 e).
ATTN_SIMD_INLINE reg probability(reg s, reg scale_log2, reg lse2) {
  return vec::exp2(vec::sub(vec::mul(s, scale_log2), lse2));
}

/// dS = scale P (dP - D) for a vector of P and dP (one row's D = rowsum(dO O)).
ATTN_SIMD_INLINE reg score_grad(reg p, reg dp, reg drow, reg scale) {
  return vec::mul(scale, vec::mul(p, vec::sub(dp, drow)));
}

/// P and dS of a whole block (bk_backward keys) that every row of the query block sees, rows
/// [0, m), from the registers of their products (S and dP are never stored):
///   ps  = P  = exp2(S scale log2 e - lse_i log2 e),  S  = Q_i K_j^T
///   dss = dS = scale P (dP - D_i),                   dP = dO_i V_j^T
/// (probability and score_grad, as in the elementwise pass that the other blocks take).
/// kt, vt: K_j^T and V_j^T (Dp and Dvp rows of bk_backward); lse2 = lse_i log2 e, drow = D_i.
/// A function of its own: inlined into the item, GCC left the products' B rows in memory.
ATTN_SIMD_NOINLINE inline void whole_block_grads(const float* qi, index_t Dp, index_t D,
                                                 const float* doi, index_t Dvp, index_t Dv,
                                                 const float* kt, const float* vt,
                                                 const float* lse2, const float* drow, float scale,
                                                 float scale_log2, index_t m, float* ps,
                                                 float* dss) {
  constexpr index_t bkb = vec::bk_backward, wide = index_t(nq) * lanes;
  static_assert(bkb % wide == 0);
  const reg sc = vec::set1(scale), sl = vec::set1(scale_log2);
  in_groups(m, [&]<int R>(index_t r0) ATTN_SIMD_LAMBDA {
    for (index_t n0 = 0; n0 < bkb; n0 += wide) {
      float* pt = ps + r0 * bkb + n0;
      float* dt = dss + r0 * bkb + n0;
      gemm_tile<R, nq>(qi + r0 * Dp, Dp, 1, kt + n0, bkb, pt, bkb, D, false, no_step{},
                       [&](float* p, int r, reg s) ATTN_SIMD_LAMBDA {
                         vec::store(p, probability(s, sl, vec::set1(lse2[r0 + r])));
                       });
      gemm_tile<R, nq>(doi + r0 * Dvp, Dvp, 1, vt + n0, bkb, dt, bkb, Dv, false, no_step{},
                       [&](float* p, int r, reg dp) ATTN_SIMD_LAMBDA {
                         const reg pv = vec::load(pt + (p - dt));
                         vec::store(p, score_grad(pv, dp, vec::set1(drow[r0 + r]), sc));
                       });
    }
  });
}

/// What one row tile [r0, r1) of a banded product needs: k in [k0, k1), columns [0, n).
struct tile_bounds {
  index_t k0, k1, n;
};

/// C (M, *) (+)= A B like gemm, row tile by row tile, where bounds(r0, r1) (a tile_bounds)
/// limits each tile's sum to k in [k0, k1) and its columns to [0, n) (a multiple of lanes;
/// the other columns of those rows are left as they are). For the blocks a mask crosses: the
/// terms left out are exact zeros, and each element is still summed over k in order.
template <class Bounds>
ATTN_SIMD_INLINE void gemm_banded(const float* a, index_t ars, index_t acs, const float* b,
                                  index_t bs, float* c, index_t cs, index_t M, bool accumulate,
                                  Bounds&& bounds) {
  constexpr index_t wide = index_t(nq) * lanes;
  in_groups(M, [&]<int R>(index_t r0) ATTN_SIMD_LAMBDA {
    const tile_bounds t = bounds(r0, r0 + R);
    const index_t K = std::max<index_t>(0, t.k1 - t.k0);
    const float* at = a + r0 * ars + t.k0 * acs;
    const float* bt = b + t.k0 * bs;
    float* ct = c + r0 * cs;
    index_t n0 = 0;
    for (; n0 + wide <= t.n; n0 += wide)
      gemm_tile<R, nq>(at, ars, acs, bt + n0, bs, ct + n0, cs, K, accumulate);
    // The rest in one tile as wide as it is (as single-vector tiles, each broadcast fed only one
    // FMA).
    const index_t rest = (t.n - n0) / lanes;
    [&]<int... V>(std::integer_sequence<int, V...>) ATTN_SIMD_LAMBDA {
      ((rest == V + 1 ? gemm_tile<R, V + 1>(at, ars, acs, bt + n0, bs, ct + n0, cs, K, accumulate)
                      : void()),
       ...);
    }
    (std::make_integer_sequence<int, nq - 1>{});
  });
}

/// Rounds n up to whole vectors.
ATTN_SIMD_INLINE index_t padded(index_t n) { return (n + lanes - 1) / lanes * lanes; }

/// Copies rows [0, rows) x [0, cols) of a (row stride rs, unit columns) into dst rows of
/// `pitch` floats, zeros in columns [cols, pitch); with `transpose`, dst[c * pitch + r] for
/// transposed_rows rows of pitch, zeros past a's rows and columns.
ATTN_SIMD_INLINE void pack(const float* src, index_t rs, index_t rows, index_t cols, float* dst,
                           index_t pitch, bool transpose, index_t transposed_rows = 0) {
  if (!transpose) {  // pitch is whole vectors here
    for (index_t r = 0; r < rows; ++r) {
      const float* from = src + r * rs;
      float* to = dst + r * pitch;
      index_t c = 0;
      for (; c + lanes <= cols; c += lanes) vec::store(to + c, vec::loadu(from + c));
      for (; c < pitch; c += lanes)
        vec::store(to + c, c < cols ? vec::load_n(from + c, int(cols - c)) : vec::zero());
    }
    return;
  }
  // Transposed (pitch and transposed_rows are whole vectors here): square tiles of lanes,
  // through registers; the rows past `rows` and the columns past `cols` read as zeros.
  for (index_t r0 = 0; r0 < pitch; r0 += lanes)
    for (index_t c0 = 0; c0 < transposed_rows; c0 += lanes) {
      reg t[lanes];
      load_transposed(src + r0 * rs + c0, rs, int(std::clamp<index_t>(rows - r0, 0, lanes)),
                      int(std::clamp<index_t>(cols - c0, 0, lanes)), vec::set1(1.0f), t);
      ATTN_SIMD_UNROLL
      for (int l = 0; l < lanes; ++l) vec::store(dst + (c0 + l) * pitch + r0, t[l]);
    }
}

/// sum_d a[d] b[d] over n contiguous floats, in one fixed order.
ATTN_SIMD_INLINE float dot(const float* a, const float* b, index_t n) {
  reg acc = vec::zero();
  index_t i = 0;
  for (; i + lanes <= n; i += lanes) acc = vec::fmadd(vec::loadu(a + i), vec::loadu(b + i), acc);
  if (i < n) acc = vec::fmadd(vec::load_n(a + i, int(n - i)), vec::load_n(b + i, int(n - i)), acc);
  return vec::hsum(acc);
}

/// The products of one block pair by visible pair (the slow path of a non-finite edge block):
/// row r of the m query rows sees the block's keys [lo_r, hi_r).
ATTN_SIMD_INLINE void visible_products(const flash_backward_head& h, index_t i0, index_t m,
                                       index_t j0, index_t nk, const float* ps, const float* dss,
                                       const float* qi, const float* doi, const float* kj,
                                       float* dkj, float* dvj, float* dqi, index_t Dp,
                                       index_t Dvp) {
  constexpr index_t bkb = vec::bk_backward;
  for (index_t r = 0; r < m; ++r) {
    const key_range row = h.vis.row(i0 + r);
    const index_t lo = std::clamp<index_t>(row.begin - j0, 0, nk);
    const index_t hi = std::max(lo, std::clamp<index_t>(row.end - j0, 0, nk));
    for (index_t c = lo; c < hi; ++c) {
      const float p = ps[r * bkb + c], ds = dss[r * bkb + c];
      for (index_t d = 0; d < Dvp; ++d) dvj[c * Dvp + d] += p * doi[r * Dvp + d];
      for (index_t d = 0; d < Dp; ++d) {
        dkj[c * Dp + d] += ds * qi[r * Dp + d];
        dqi[r * Dp + d] += ds * kj[c * Dp + d];
      }
    }
  }
}

/// dst[c * cs] = src[c] for c < n; src is whole vectors (a padded scratch row). Unit strides
/// copy by vectors in place: a library call per row of 64 floats cost 3 % of a T 1024 backward.
ATTN_SIMD_INLINE void write_row(const float* src, index_t n, float* dst, index_t cs) {
  if (cs == 1) {
    index_t c = 0;
    for (; c + lanes <= n; c += lanes) vec::storeu(dst + c, vec::load(src + c));
    if (c < n) vec::store_n(dst + c, vec::load(src + c), int(n - c));
    return;
  }
  for (index_t c = 0; c < n; ++c) dst[c * cs] = src[c];
}

/// One backward item: the key blocks [j_begin, j_end) of one (batch, key head), every query
/// head of its group, one after another (see flash_backward_head in flash_simd.hpp). dK and dV
/// of the item's keys accumulate over the group in scratch and are written at the end. Only the
/// query blocks whose rows may see these keys (visibility::rows_seeing) are packed, visited and
/// written to dQ: the other rows' parts of dQ are zero, and the caller accounts for them.
ATTN_SIMD_NOINLINE inline void flash_backward_item(const flash_backward_head& h, index_t j_begin,
                                                   index_t j_end, float* scratch) {
  constexpr index_t bq = vec::bq_backward, bkb = vec::bk_backward;
  constexpr float log2e = 1.4426950408889634f;
  const index_t D = h.D, Dv = h.Dv, Dp = padded(D), Dvp = padded(Dv), Tq = h.vis.q_len;
  const index_t keys = j_end - j_begin;
  // The query blocks [r0, r1) whose rows may see the item's keys (none: r0 = r1).
  const key_range seeing = h.vis.rows_seeing({j_begin, j_end});
  const index_t r0 = seeing.empty() ? 0 : seeing.begin / bq * bq;
  const index_t r1 = seeing.empty() ? 0 : std::min(Tq, (seeing.end + bq - 1) / bq * bq);
  const index_t rows = r1 - r0;
  // Scratch: Q (Tq, Dp) and dO (Tq, Dvp) where packed, dQ (Tq, Dp), D and lse (Tq), a flag per
  // query block of the current query head, of which rows [r0, r1) are used (row i at i - r0); dK
  // (keys, Dp), dV (keys, Dvp) of the item; per key block K (bk, Dp) where packed, K^T (Dp, bk),
  // V^T (Dvp, bk); per step P and dS (bq, bk).
  float* next = scratch;
  const auto take = [&](index_t n) {
    float* p = next;
    next += backward_segment(n);
    return p;
  };
  float* qp = take(Tq * Dp);
  float* dop = take(Tq * Dvp);
  float* dq = take(Tq * Dp);
  float* drow = take(Tq);
  float* lse2 = take(Tq);
  float* q_finite = take((Tq + bq - 1) / bq);  // 1 where a query block's Q and dO are finite
  float* dk = take(keys * Dp);
  float* dv = take(keys * Dvp);
  float* kp = take(bkb * Dp);
  float* kt = take(Dp * bkb);
  float* vt = take(Dvp * bkb);
  float* ps = take(bq * bkb);
  float* dss = take(bq * bkb);
  std::fill_n(dk, keys * Dp, 0.0f);
  std::fill_n(dv, keys * Dvp, 0.0f);
  const reg scale = vec::set1(h.scale), scale_log2 = vec::set1(h.scale * log2e);
  alignas(64) float lane_at[lanes];
  for (int l = 0; l < lanes; ++l) lane_at[l] = float(l);
  const reg lane_index = vec::load(lane_at);  // key c + l of a vector: lane l of lane_index + c
  // Q, K and dO in place where their rows are what a pack would make of them. (Rows further
  // apart stay packed: the multi-head layer's, 9 KiB apart, fall in a quarter of the L1 sets,
  // and reading them in place made its T 1024 forward + backward 6 % slower.)
  const bool q_packed = h.qs != Dp || D != Dp, k_packed = h.ks != Dp || D != Dp;
  const bool do_packed = h.d_os != Dvp || Dv != Dvp;

  for (index_t g = 0; g < h.group; ++g) {
    const float* q = h.q + g * h.q_hs;
    const float* o = h.o + g * h.o_hs;
    const float* d_o = h.d_o + g * h.d_o_hs;
    const float* lse = h.lse + g * h.lse_hs;
    const float* qr = q_packed ? qp : q + r0 * h.qs;  // rows [r0, r1)
    const float* dor = do_packed ? dop : d_o + r0 * h.d_os;
    if (q_packed) pack(q + r0 * h.qs, h.qs, rows, D, qp, Dp, false);
    if (do_packed) pack(d_o + r0 * h.d_os, h.d_os, rows, Dv, dop, Dvp, false);
    std::fill_n(dq, rows * Dp, 0.0f);
    for (index_t i = r0; i < r1; ++i) {
      drow[i - r0] = dot(d_o + i * h.d_os, o + i * h.os, Dv);
      lse2[i - r0] = lse[i * h.lse_s] * log2e;
    }
    for (index_t i0 = 0; i0 < rows; i0 += bq) {
      const index_t m = std::min(bq, rows - i0);
      q_finite[i0 / bq] = all_finite(qr + i0 * Dp, m * Dp) && all_finite(dor + i0 * Dvp, m * Dvp);
    }
    for (index_t j0 = j_begin; j0 < j_end; j0 += bkb) {
      const index_t nk = std::min(bkb, j_end - j0), nkp = padded(nk);
      float* dkj = dk + (j0 - j_begin) * Dp;
      float* dvj = dv + (j0 - j_begin) * Dvp;
      bool packed = false, k_finite = true;
      const float* kj = k_packed ? kp : h.k + j0 * h.ks;
      for (index_t i0 = r0; i0 < r1; i0 += bq) {
        const index_t m = std::min(bq, r1 - i0);
        const key_range seen = h.vis.rows(i0, i0 + m);
        if (seen.empty() || seen.end <= j0 || seen.begin >= j0 + nk) continue;
        if (!packed) {  // K and V of this block, the first time a query block needs them
          if (k_packed) pack(h.k + j0 * h.ks, h.ks, nk, D, kp, Dp, false);
          pack(h.k + j0 * h.ks, h.ks, nk, D, kt, bkb, true, Dp);
          pack(h.v + j0 * h.vs, h.vs, nk, Dv, vt, bkb, true, Dvp);
          packed = true;
          k_finite = all_finite(kj, nk * Dp);
        }
        const key_range common = h.vis.common(i0, i0 + m);
        const bool edge = !(common.begin <= j0 && j0 + nk <= common.end);
        const float* qi = qr + (i0 - r0) * Dp;
        const float* doi = dor + (i0 - r0) * Dvp;
        float* dqi = dq + (i0 - r0) * Dp;
        // Row r sees the block's keys [lo[r], hi[r]), both nondecreasing in r (all of them
        // unless the block is an edge).
        alignas(64) index_t lo[bq], hi[bq];
        for (index_t r = 0; r < m; ++r) {
          if (!edge) {
            lo[r] = 0, hi[r] = nk;
            continue;
          }
          const key_range row = h.vis.row(i0 + r);
          lo[r] = std::clamp<index_t>(row.begin - j0, 0, nk);
          hi[r] = std::max(lo[r], std::clamp<index_t>(row.end - j0, 0, nk));
        }
        const bool whole = !edge && nk == bkb;  // P and dS as the products leave registers
        if (whole) {
          whole_block_grads(qi, Dp, D, doi, Dvp, Dv, kt, vt, lse2 + (i0 - r0), drow + (i0 - r0),
                            h.scale, h.scale * log2e, m, ps, dss);
        } else if (!edge) {
          gemm(qi, Dp, 1, kt, bkb, ps, bkb, m, nkp, D, false);      // S = Q K^T
          gemm(doi, Dvp, 1, vt, bkb, dss, bkb, m, nkp, Dv, false);  // dP = dO V^T
        } else {  // a query tile's scores: the key vectors up to its last row's hi
          gemm_banded(qi, Dp, 1, kt, bkb, ps, bkb, m, false, [&](index_t, index_t r1) {
            return tile_bounds{0, D, padded(hi[r1 - 1])};
          });
          gemm_banded(doi, Dvp, 1, vt, bkb, dss, bkb, m, false, [&](index_t, index_t r1) {
            return tile_bounds{0, Dv, padded(hi[r1 - 1])};
          });
        }
        for (index_t r = 0; r < m && !whole; ++r) {  // P in ps, dS in dss
          const index_t i = i0 - r0 + r;
          const reg l2 = vec::set1(lse2[i]), dr = vec::set1(drow[i]);
          const reg lov = vec::set1(float(lo[r])), hiv = vec::set1(float(hi[r]));
          float* pr = ps + r * bkb;
          float* dsr = dss + r * bkb;
          for (index_t c = 0; c < nkp; c += lanes) {
            if (edge && (c >= hi[r] || c + lanes <= lo[r])) {  // no key of the vector is seen
              vec::store(pr + c, vec::zero());                 // (and its scores may be unset)
              vec::store(dsr + c, vec::zero());
              continue;
            }
            const reg pv = probability(vec::load(pr + c), scale_log2, l2);
            const reg dsv = score_grad(pv, vec::load(dsr + c), dr, scale);
            if (edge || c + lanes > nk) {  // 0, not 0 x NaN, where row i does not see the key
              const mask vis =
                  vec::between_lanes(vec::add(lane_index, vec::set1(float(c))), lov, hiv);
              vec::store(pr + c, vec::select(vis, pv, vec::zero()));
              vec::store(dsr + c, vec::select(vis, dsv, vec::zero()));
            } else {
              vec::store(pr + c, pv);
              vec::store(dsr + c, dsv);
            }
          }
        }
        if (edge && !(k_finite && q_finite[(i0 - r0) / bq] != 0)) {
          visible_products(h, i0, m, j0, nk, ps, dss, qi, doi, kj, dkj, dvj, dqi, Dp, Dvp);
          continue;
        }
        if (!edge) {
          gemm(ps, 1, bkb, doi, Dvp, dvj, Dvp, nk, Dvp, m, true);  // dV += P^T dO
          gemm(dss, 1, bkb, qi, Dp, dkj, Dp, nk, Dp, m, true);     // dK += dS^T Q
          gemm(dss, bkb, 1, kj, Dp, dqi, Dp, m, Dp, nk, true);     // dQ += dS K
          continue;
        }
        // Edge block: P and dS are 0 outside each row's [lo, hi), so a key tile needs only
        // the rows that see one of its keys, and a query tile only the keys its rows see.
        const auto rows_seeing = [&](index_t c0, index_t c1, index_t n) {
          index_t r0 = 0, r1 = m;
          while (r0 < m && hi[r0] <= c0) ++r0;
          while (r1 > r0 && lo[r1 - 1] >= c1) --r1;
          return tile_bounds{r0, r1, n};
        };
        gemm_banded(ps, 1, bkb, doi, Dvp, dvj, Dvp, nk, true,  // dV += P^T dO
                    [&](index_t c0, index_t c1) { return rows_seeing(c0, c1, Dvp); });
        gemm_banded(dss, 1, bkb, qi, Dp, dkj, Dp, nk, true,  // dK += dS^T Q
                    [&](index_t c0, index_t c1) { return rows_seeing(c0, c1, Dp); });
        gemm_banded(dss, bkb, 1, kj, Dp, dqi, Dp, m, true,  // dQ += dS K
                    [&](index_t r0, index_t r1) {
                      return tile_bounds{lo[r0], hi[r1 - 1], Dp};
                    });
      }
    }
    if (h.dq != nullptr)
      for (index_t i = r0; i < r1; ++i)
        write_row(dq + (i - r0) * Dp, D, h.dq + g * h.dq_hs + i * h.dqs, h.dq_cs);
  }
  for (index_t j = 0; j < keys; ++j) {
    if (h.dk != nullptr) write_row(dk + j * Dp, D, h.dk + (j_begin + j) * h.dks, h.dk_cs);
    if (h.dv != nullptr) write_row(dv + j * Dvp, Dv, h.dv + (j_begin + j) * h.dvs, h.dv_cs);
  }
}
