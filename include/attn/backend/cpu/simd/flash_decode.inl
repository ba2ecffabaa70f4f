// The float decode kernel (a few queries against many keys), written once against `vec` and
// compiled per instruction set by flash_simd.hpp after flash_kernel.inl, whose helpers it uses
// (no include guard, includes nothing).
//
// One call is one chunk of keys (decode_chunk) of one (batch, key head) and every query
// row of its group (G query heads x Tq queries): the chunk's K and V are read from memory once,
// a block of decode_block keys at a time, and every row works on the block while it is in L1
// (32 keys: 8 KiB of K and of V at D 64, measured best against 64 and 128, which let the two
// streams drift apart). Vector lanes run along the head dimension: a row's scores for 8 (16)
// keys are 8 (16) dot products, reduced with one transposing tree of adds; its output row
// accumulates p_j V_j with one broadcast per key (with AVX-512 at Dv 64, up to 4 rows that see
// the same keys share each value row loaded). Each row sees the keys of
// attn/core/visibility.hpp only (hidden keys are never read). Key blocks are summed on their
// own and added into the running sums plainly: a chunk has at most decode_chunk / decode_block
// = 32 blocks, so a running sum takes at most 32 additions (relative error within 32 units in
// the last place, where compensating cost a quarter of the time at 12 rows); chunks are then
// combined as merge_attention does.

/// Rows (query heads of a group x queries) from which the decode kernel computes the key
/// blocks that every row sees in register tiles rather than row by row.
inline constexpr index_t decode_tile_rows = 8;

/// How many blocks ahead of the one in use a tiled block fetches keys and values.
inline constexpr index_t decode_fetch_ahead = 1;

/// Every how many k steps of a gemm in a tiled block a fetch step is taken.
inline constexpr index_t decode_fetch_every = 2;

/// The fetch steps that gemm (M, N, K) takes (see gemm_tile, gemm).
ATTN_SIMD_INLINE index_t gemm_fetch_steps(index_t M, index_t N, index_t K) {
  constexpr index_t wide = index_t(nq) * lanes, tall = 2 * vec::rk;
  const index_t tiles =
      (M + vec::rk - 1) / vec::rk * (N / wide) + (M + tall - 1) / tall * ((N % wide) / lanes);
  return tiles * ((K + decode_fetch_every - 1) / decode_fetch_every);
}

/// s[r Rp + x] (r < R keys, x < NV lanes) = sum_d k[r ks + d] qt[d Rp + x] over d < D, the
/// d's dealt round-robin to P sets of sums added at the end (P R NV independent FMA chains,
/// enough to cover the FMA latency with a single vector of rows); `step` as in stepped.
/// KS > 0 fixes the key stride at compile time (ks must equal it): the R keys are then
/// addressed from one pointer, where R pointers of their own leave too few general registers.
template <int R, int NV, int P, index_t KS = 0, class Step>
ATTN_SIMD_NOINLINE void decode_scores(const float* k, index_t ks, const float* qt, index_t Rp,
                                      float* s, index_t D, Step&& step) {
  if constexpr (KS > 0) ks = KS;
  const float* krow[R];
  ATTN_SIMD_UNROLL
  for (int r = 0; r < R; ++r) krow[r] = k + r * ks;
  reg acc[P][R][NV];
  ATTN_SIMD_UNROLL
  for (int p = 0; p < P; ++p) {
    ATTN_SIMD_UNROLL
    for (int r = 0; r < R; ++r) {
      ATTN_SIMD_UNROLL
      for (int x = 0; x < NV; ++x) acc[p][r][x] = vec::zero();
    }
  }
  const auto one = [&]<int p>(index_t dd) ATTN_SIMD_LAMBDA {
    reg q[NV];
    ATTN_SIMD_UNROLL
    for (int x = 0; x < NV; ++x) q[x] = vec::load(qt + dd * Rp + x * lanes);
    ATTN_SIMD_UNROLL
    for (int r = 0; r < R; ++r) {
      const reg kb = vec::set1(krow[r][dd]);
      ATTN_SIMD_UNROLL
      for (int x = 0; x < NV; ++x) acc[p][r][x] = vec::fmadd(kb, q[x], acc[p][r][x]);
    }
  };
  stepped<P>(D, step, [&](index_t d) ATTN_SIMD_LAMBDA {  // d .. d + P - 1 (the last: below D)
    [&]<int... p>(std::integer_sequence<int, p...>) ATTN_SIMD_LAMBDA {
      ((d + p < D ? one.template operator()<p>(d + p) : void()), ...);
    }
    (std::make_integer_sequence<int, P>{});
  });
  ATTN_SIMD_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTN_SIMD_UNROLL
    for (int x = 0; x < NV; ++x) {
      reg sum = acc[0][r][x];
      ATTN_SIMD_UNROLL
      for (int p = 1; p < P; ++p) sum = vec::add(sum, acc[p][r][x]);
      vec::store(s + r * Rp + x * lanes, sum);
    }
  }
}

/// S^T (decode_block, Rp) = K Q^T over a whole block for `per` C rows, per = V::lanes / 4 rows
/// to a vector (4 with AVX-512, 2 with AVX2), where rows across the lanes would leave lanes idle
/// (a quarter of them at 12 rows, half at 8 with AVX-512; a quarter at 12 with AVX2): block b
/// (128 bits) of vector c holds row per c + b over four consecutive d (q4: Q so packed, the
/// vectors of each four d in turn, qs floats apart, C of them from q4 on), each key's four d's
/// are broadcast to every block, and quad_sums turns four keys' partial sums into their scores,
/// stored as `per` columns of S^T from s on. Other columns are left as they are. KEYS keys at a
/// time (a multiple of 4), from one pointer at a key stride KS > 0; `step` at every eight d (at
/// every four, with Q's rows addressed by a multiplication each time, the loop's bookkeeping
/// took issue slots from its 12 FMAs with AVX2: a 12-row step from memory read K and V at
/// 66.7-67.8 % of the streaming roof, 68.3-70.0 % now; with AVX-512 86.4-87.9 %, 89.9-91.6 %).
/// With AVX-512, the key rows 2 KEYS further on are brought into L1 meanwhile, a few lines every
/// four d (rows below `fetch_rows` from k only; 0: none). Each group of keys reads its rows a
/// quarter line at a time, all KEYS rows side by side, which the hardware prefetchers do not
/// follow: the misses to L2 stalled the arithmetic, and with K and V streamed from memory a
/// 12-row step read them at 78-79 % of the streaming roof against 85-87 % with these fetches
/// (Sapphire Rapids class Xeon, AVX-512, 2 threads; one group ahead: 82-83 %, a whole block
/// ahead, where the rows may still be on their way from memory: 81-83 %).
template <class V, int C, int KEYS, index_t KS = 0, class Step>
ATTN_SIMD_NOINLINE void decode_quad_scores(const float* q4, index_t qs, const float* k, index_t ks,
                                           index_t fetch_rows, float* s, index_t Rp, index_t D,
                                           Step&& step) {
  if constexpr (KS > 0) ks = KS;
  if constexpr (V::lanes == 16) qs = C * V::lanes;  // (one pass: the stride known to the compiler)
  constexpr int per = V::lanes / 4;
  static_assert(KEYS % 4 == 0 && decode_block % KEYS == 0);
  using reg = typename V::reg;
  // (With AVX2 the step is bound by its arithmetic: at 12 rows these fetches made it slower,
  // 61-63 % of the streaming roof against 65-66 %, x86-64-v3 build.)
  constexpr bool near_fetches = V::lanes == 16;
  // The lines of a row, and how many of the group's KEYS rows' lines each four d fetch (a
  // row_fetch, a whole row every other four d, read K and V at 84.0-85.8 % against 87.4-89.7).
  const index_t lines = (D + 15) / 16, each = (KEYS * lines + D / 4 - 1) / (D / 4);
  for (index_t j = 0; j < decode_block; j += KEYS) {
    // The next line fetched: line `col` of row `row` (rows [j + 2 KEYS, j + 3 KEYS) in turn).
    index_t row = j + 2 * KEYS, col = 0;
    const index_t rows_end = std::min<index_t>(row + KEYS, fetch_rows);
    const float* line = k + row * ks;
    reg acc[C][KEYS];
    ATTN_SIMD_UNROLL
    for (int c = 0; c < C; ++c) {
      ATTN_SIMD_UNROLL
      for (int kk = 0; kk < KEYS; ++kk) acc[c][kk] = V::zero();
    }
    const float* kr = k + j * ks;
    const float* qd = q4;  // Q's rows packed for these four d
    for (index_t d = 0; d < D; d += 4, qd += qs) {
      if (d % 8 == 0) step(d);
      if constexpr (near_fetches)
        for (index_t e = 0; e < each && row < rows_end; ++e) {
          prefetch(line + col * 16, true);
          if (++col == lines) col = 0, ++row, line += ks;
        }
      reg q[C];
      ATTN_SIMD_UNROLL
      for (int c = 0; c < C; ++c) q[c] = V::load(qd + c * V::lanes);
      ATTN_SIMD_UNROLL
      for (int kk = 0; kk < KEYS; ++kk) {
        const reg kb = V::bcast4(kr + kk * ks + d);
        ATTN_SIMD_UNROLL
        for (int c = 0; c < C; ++c) acc[c][kk] = V::fmadd(q[c], kb, acc[c][kk]);
      }
    }
    ATTN_SIMD_UNROLL
    for (int c = 0; c < C; ++c) {
      ATTN_SIMD_UNROLL
      for (int h = 0; h < KEYS; h += 4)
        V::store_columns(s + (j + h) * Rp + c * per, Rp,
                         V::quad_sums(acc[c][h], acc[c][h + 1], acc[c][h + 2], acc[c][h + 3]));
    }
  }
}

/// Vectors of packed rows that decode_quad_scores takes in one pass, and keys at a time: with
/// AVX-512 every vector (up to 3: 12 rows) and 8 keys; with AVX2 up to 3 vectors (6 rows) and
/// 4 keys a pass (12 sums, 3 rows of Q and a broadcast: the 16 registers).
inline constexpr int quad_pass = 3, quad_keys = lanes == 16 ? 8 : 4;

/// The step() calls of quad_block_scores over a block, for `vectors` vectors of packed rows.
ATTN_SIMD_INLINE index_t quad_steps(index_t vectors, index_t D) {
  return (vectors + quad_pass - 1) / quad_pass * (decode_block / quad_keys) * ((D + 7) / 8);
}

/// decode_quad_scores for the `vectors` vectors of packed rows at q4 (per 4 d, `vectors`
/// vectors) over the block of keys at k: with AVX-512 up to 3 vectors (12 rows) in one pass,
/// with AVX2 up to 6 (12 rows) in passes of 3; `fetch_rows` as decode_quad_scores takes it.
template <class V = vec, class Step>
ATTN_SIMD_INLINE void quad_block_scores(index_t vectors, const float* q4, const float* k,
                                        index_t ks, index_t fetch_rows, float* s, index_t Rp,
                                        index_t D, Step step) {
  const index_t qs = vectors * V::lanes;
  for (index_t c0 = 0; c0 < vectors; c0 += quad_pass) {  // (2 or 3 vectors a pass)
    const float* q = q4 + c0 * V::lanes;
    float* sc = s + c0 * (V::lanes / 4);
    if (vectors - c0 >= 3)
      ks == 64 ? decode_quad_scores<V, 3, quad_keys, 64>(q, qs, k, ks, fetch_rows, sc, Rp, D, step)
               : decode_quad_scores<V, 3, quad_keys>(q, qs, k, ks, fetch_rows, sc, Rp, D, step);
    else
      ks == 64 ? decode_quad_scores<V, 2, quad_keys, 64>(q, qs, k, ks, fetch_rows, sc, Rp, D, step)
               : decode_quad_scores<V, 2, quad_keys>(q, qs, k, ks, fetch_rows, sc, Rp, D, step);
  }
}

/// Prefetches rows of K or V a few at a time, spread evenly over the calls to step(), so
/// that a block's fetches overlap all of the work before its use (a burst fills the core's
/// miss buffers and stalls the arithmetic behind it, then leaves memory idle). Every line is
/// fetched: on a Sapphire Rapids class Xeon (12 rows, 2 threads, AVX-512) the hardware
/// prefetchers alone read K and V at 48-54 % of the streaming roof where these fetches reach
/// 64-77 %, and fetching every other line (leaving its neighbour to the adjacent-line
/// prefetcher) read them at 52-55 %, no better than none.
struct row_fetch {
  bool to_l1 = false;  // prefetcht0 rather than prefetcht1 (see streaming_prefetch_to_l1)
  const float* row = nullptr;
  index_t stride = 0, lines = 0, rows = 0, left = 0, steps = 1, credit = 0;
  /// `n` rows from `first`, `stride` floats apart, each of `width` floats; over `steps_` steps.
  ATTN_SIMD_INLINE void start(const float* first, index_t stride_, index_t width, index_t n,
                              index_t steps_) {
    row = first, stride = stride_, lines = (width + 15) / 16, rows = left = std::max<index_t>(n, 0);
    steps = std::max<index_t>(steps_, 1), credit = 0;
  }
  ATTN_SIMD_INLINE void step(index_t times = 1) {
    for (credit += rows * times; credit >= steps && left > 0; credit -= steps) next();
  }
  /// Prefetches the next row, if any is left.
  ATTN_SIMD_INLINE void next() {
    if (left <= 0) return;
    if (lines == 4) {  // (d 64: straight-line code, no loop around each line)
      ATTN_SIMD_UNROLL
      for (int x = 0; x < 4; ++x) prefetch(row + 16 * x, to_l1);
    } else {
      for (index_t x = 0; x < lines; ++x) prefetch(row + 16 * x, to_l1);
    }
    row += stride, --left;
  }
};

/// gemm_tile's step in a tiled decode block (every decode_fetch_every k): every `period` steps,
/// a row of the key fetch and a row of the value fetch, which start() gave the same rows: about
/// the schedule that a step() of each keeps. A step between costs a decrement and a branch: the
/// two credits, kept in memory beside the register tiles, cost an AVX2 12-row step in cache a
/// sixth of its time (x86-64-v3 build, Sapphire Rapids class Xeon).
struct fetch_step {
  static constexpr index_t every = decode_fetch_every;
  row_fetch* keys;
  row_fetch* values;
  index_t* countdown;
  index_t period;
  ATTN_SIMD_INLINE void operator()(index_t) const {
    if (--*countdown > 0) return;
    *countdown = period;
    keys->next(), values->next();
  }
};

/// P V for G rows that see the same n keys of a block, over N whole vectors of each value row:
/// for g < G and d < N lanes, acc[g Dvp + d] = alpha[g] acc[g Dvp + d] + sum over j < n of
/// p[g ps + j] V_j[d]. Each value row is loaded once for all G rows; N G independent FMA chains;
/// a fetch step per key and row. (A function of its own, like decode_row_scores.)
template <int G, int N>
ATTN_SIMD_NOINLINE void decode_pv_rows(const float* p, index_t ps, index_t n, const float* v,
                                       index_t vs, const float* alpha, float* acc, index_t Dvp,
                                       row_fetch& fetch) {
  reg o[G][N];
  ATTN_SIMD_UNROLL
  for (int g = 0; g < G; ++g) {
    ATTN_SIMD_UNROLL
    for (int x = 0; x < N; ++x) o[g][x] = vec::zero();
  }
  for (index_t j = 0; j < n; ++j) {
    const float* vr = v + j * vs;
    fetch.step(G);
    reg vv[N];
    ATTN_SIMD_UNROLL
    for (int x = 0; x < N; ++x) vv[x] = vec::loadu(vr + x * lanes);
    ATTN_SIMD_UNROLL
    for (int g = 0; g < G; ++g) {
      const reg pj = vec::set1(p[g * ps + j]);
      ATTN_SIMD_UNROLL
      for (int x = 0; x < N; ++x) o[g][x] = vec::fmadd(pj, vv[x], o[g][x]);
    }
  }
  ATTN_SIMD_UNROLL
  for (int g = 0; g < G; ++g) {
    const reg a = vec::set1(alpha[g]);
    ATTN_SIMD_UNROLL
    for (int x = 0; x < N; ++x) {
      float* out = acc + g * Dvp + x * lanes;
      vec::store(out, vec::fmadd(a, vec::load(out), o[g][x]));
    }
  }
}

/// Row scores of one block: sr[j - keys.begin] = q . K_j (qr scaled, Dp floats) for the keys
/// j of `keys`, `lanes` keys at a time: lane d of t[kk] holds partial sums of key kk's dot
/// product, and a transposing sum turns the lanes x lanes partial sums into one vector of
/// scores (lanes past the last key -inf). Returns the largest score; a fetch step per `lanes`
/// keys. (A function of its own: inside flash_decode_item the compiler runs short of general
/// registers and keeps the loop's pointers on the stack.)
ATTN_SIMD_NOINLINE inline float decode_row_scores(const float* qr, const float* k, index_t ks,
                                                  key_range keys, float* sr, index_t D,
                                                  row_fetch& fetch_v) {
  const index_t nvd = (D + lanes - 1) / lanes;
  reg mx = vec::set1(-__builtin_inff());
  for (index_t jj = keys.begin; jj < keys.end; jj += lanes) {
    const int n = int(std::min<index_t>(lanes, keys.end - jj));
    // The keys' dot products side by side: `lanes` independent FMA chains per step.
    reg t[lanes];
    ATTN_SIMD_UNROLL
    for (int kk = 0; kk < lanes; ++kk) t[kk] = vec::zero();
    const float* kr = k + jj * ks;
    fetch_v.step();
    // A key stride known at compile time (a cache of d 64) addresses all `lanes` keys from
    // one pointer with constant offsets; a stride in a register needs an address per key.
    const auto full = [&](auto stride) ATTN_SIMD_LAMBDA {
      for (index_t dv = 0; dv < nvd; ++dv) {
        const reg qv = vec::load(qr + dv * lanes);
        ATTN_SIMD_UNROLL
        for (int kk = 0; kk < lanes; ++kk)
          t[kk] = vec::fmadd(qv, vec::loadu(kr + kk * stride + dv * lanes), t[kk]);
      }
    };
    if (n == lanes && D % lanes == 0) {
      if (ks == 64)
        full(std::integral_constant<index_t, 64>{});
      else
        full(ks);
    } else {
      for (index_t dv = 0; dv < nvd; ++dv) {
        const reg qv = vec::load(qr + dv * lanes);
        const int cols = int(std::min<index_t>(lanes, D - dv * lanes));
        ATTN_SIMD_UNROLL
        for (int kk = 0; kk < lanes; ++kk)
          if (kk < n) t[kk] = vec::fmadd(qv, vec::load_n(kr + kk * ks + dv * lanes, cols), t[kk]);
      }
    }
    const reg sc = vec::first_or(vec::transpose_sum(t), n, -__builtin_inff());
    vec::store(sr + (jj - keys.begin), sc);
    mx = vec::max(mx, sc);
  }
  return vec::hmax(mx);
}

/// Writes for row r: o_out[r * o_rs + d] (d < Dv) = the chunk's normalised output, lse_out[r]
/// its log-sum-exp (-inf and zeros when the row sees none of the chunk's keys); a `part` (a
/// chunk that the caller merges with others) is scaled by part_scale.
/// The last block's fetches reach into the keys [chunk.end, fetch_end) (the next chunk that
/// the caller's work item goes on with; fetch_end = chunk.end where there is none).
///
/// A block goes through three passes over the rows: every row's scores, then every row's
/// softmax bookkeeping, then every row's P V. A row's passes form one long dependency chain
/// (scores, their maximum, exp2, the sums); passes over all rows leave the processor
/// independent rows to interleave instead of waiting on that chain once per row.
ATTN_SIMD_NOINLINE inline void flash_decode_item(const decode_rows& rq, const float* k, index_t ks,
                                                 const float* v, index_t vs, index_t D, index_t Dv,
                                                 const visibility& vis, key_range chunk,
                                                 index_t fetch_end, float scale_log2, float* o_out,
                                                 index_t o_rs, float* lse_out, bool part,
                                                 float* scratch) {
  constexpr index_t block = decode_block;
  const index_t R = rq.rows, R16 = (R + 15) / 16 * 16, Rp = (R + lanes - 1) / lanes * lanes;
  const index_t Dp = (D + lanes - 1) / lanes * lanes, Dvp = (Dv + lanes - 1) / lanes * lanes;
  const index_t nvv = Dvp / lanes;
  // Scratch: q rows (R, Dp) scaled to log2 units, running output (R, Dvp); m, l, the block's
  // maximum and alpha (R16 each); the block's scores, then probabilities (R, block), or
  // (block, Rp) transposed in a tiled block; each row's keys of the chunk (2 R16 index_t);
  // for tiled blocks Q^T (D, Rp) and a block of padded value rows (block, Dvp).
  float* qp = scratch;
  float* acc = qp + R * Dp;
  float* m = acc + R * Dvp;
  float* l = m + R16;
  float* m_blk = l + R16;
  float* alpha = m_blk + R16;
  float* s = alpha + R16;
  index_t* kb = reinterpret_cast<index_t*>(s + R16 * block);
  index_t* ke = kb + R16;
  float* qt = reinterpret_cast<float*>(ke + R16);
  float* vp = qt + D * Rp;
  const reg q_scale = vec::set1(scale_log2);
  for (index_t r = 0; r < R; ++r) {  // (zeros past D)
    const float* src = rq.q + (r / rq.Tq) * rq.q_hs + (r % rq.Tq) * rq.qs;
    for (index_t d = 0; d < Dp; d += lanes)
      vec::store(qp + r * Dp + d,
                 vec::mul(vec::load_n(src + d, int(std::min<index_t>(lanes, D - d))), q_scale));
  }
  std::fill_n(acc, R * Dvp, 0.0f);
  std::fill_n(m, R16, -__builtin_inff());  // (the padding too: its lanes go through exp2)
  std::fill_n(l, R16, 0.0f);

  index_t all_b = chunk.begin, all_e = chunk.end;  // the chunk's keys that every row sees
  for (index_t r = 0; r < R; ++r) {                // the chunk's keys row r sees
    const key_range keys = vis.row(r % rq.Tq);
    kb[r] = std::max(keys.begin, chunk.begin);
    ke[r] = std::min(keys.end, chunk.end);
    all_b = std::max(all_b, kb[r]), all_e = std::min(all_e, ke[r]);
  }
  const bool tiles = R >= decode_tile_rows;
  // Tiles of up to 12 rows whose S^T would leave lanes idle (8 to 12 rows with AVX-512, 9 to
  // 12 with AVX2) take decode_quad_scores, from Q packed in Q^T's place; S^T's lanes from row
  // per quad_vectors on, which it never writes, are zeroed here.
  constexpr index_t per = lanes / 4;  // rows to a vector in decode_quad_scores
  const index_t quad_vectors = (R + per - 1) / per;
  const bool quads = tiles && R % lanes != 0 && R <= 12 && D % 4 == 0;
  if (quads) {
    // (four d's of a row at a time: as a scatter of single floats, this packing took 2 % of
    // a 1024-key step of 12 rows in cache)
    for (index_t r = 0; r < per * quad_vectors; ++r)
      for (index_t d = 0; d < D; d += 4) {
        float* dst = qt + (d / 4 * quad_vectors + r / per) * lanes + r % per * 4;
        if (r < R)
          std::copy_n(qp + r * Dp + d, 4, dst);
        else
          std::fill_n(dst, 4, 0.0f);
      }
    std::fill_n(s, block * Rp, 0.0f);
  } else if (tiles) {
    for (index_t d = 0; d < D; ++d)
      for (index_t r = 0; r < Rp; ++r) qt[d * Rp + r] = r < R ? qp[r * Dp + d] : 0.0f;
  }
  // This block's values during the scores, the next keys during P V.
  const bool l1 = streaming_prefetch_to_l1();
  row_fetch fetch_v{.to_l1 = l1}, fetch_k{.to_l1 = l1};

  // A whole block that every row sees, with enough rows, goes through register tiles with the
  // rows across the lanes: S^T (block, Rp) = K Q^T (K's elements broadcast straight from the
  // cache, Q^T packed once), the softmax a vector of rows at a time, then O += P V (P's
  // elements broadcast, V's rows loaded as they are). Every K and V element fetched serves all
  // R rows, and nothing is transposed. The next block's keys and values are fetched side by
  // side over the whole block, S^T and P V, a few rows every fetch step: on an Intel Xeon
  // (Sapphire Rapids class, 12 rows, Tk 65536, 2 threads) K and V were read at 77-94 % of the
  // streaming roof over 6 rounds, against 70-78 % with the keys fetched during S^T and the
  // values in bursts of 16 rows during P V (a fetch step every 8 k rather than 2). With AVX-512
  // and 8 to 12 rows, whose S^T would leave a half to a quarter of its lanes idle,
  // decode_quad_scores computes S^T instead, four rows to a vector: with K and V in L2 on a
  // Zen 4, a step took 7 % less time at 12 rows, 21 % less at 8. With AVX2 and 9 to 12 rows
  // (at 12, a quarter of S^T's lanes idle) it takes two rows to a vector, in passes of six:
  // on a Sapphire Rapids class Xeon (x86-64-v3 build, ATTN_CPU_ISA=avx2) a 12-row step of 1024
  // keys in cache took 8 % less time. (Keys across the lanes, from a
  // transposed copy of the block's keys, with the row path's softmax, measured 5 % slower than
  // rows across the lanes at 12 rows: the transposes and per-row reductions cost more.)
  // The fetch steps of a tiled block, and their period for a whole block fetched (a division
  // per block cost 1-2 % of a 12-row step in cache).
  const index_t steps = (quads         ? quad_steps(quad_vectors, D)
                         : Rp == lanes ? block / 8 * ((D + 7) / 8)
                                       : gemm_fetch_steps(block, Rp, D)) +
                        gemm_fetch_steps(R, Dvp, block);
  const index_t block_period = std::max<index_t>(steps / block, 1);
  const auto tiled_block = [&](index_t j0) ATTN_SIMD_LAMBDA {
    const index_t jf = j0 + decode_fetch_ahead * block;  // the block fetched meanwhile
    const index_t next = std::max<index_t>(std::min(jf + block, fetch_end) - jf, 0);
    fetch_k.start(k + jf * ks, ks, D, next, steps);
    fetch_v.start(v + jf * vs, vs, Dv, next, steps);
    const index_t period =
        next == block ? block_period : std::max<index_t>(steps / std::max<index_t>(next, 1), 1);
    index_t countdown = period;
    const fetch_step step{&fetch_k, &fetch_v, &countdown, period};
    if (quads) {
      quad_block_scores(quad_vectors, qt, k + j0 * ks, ks, fetch_end - j0, s, Rp, D, step);
    } else if (Rp == lanes) {  // (one vector of rows: 8 keys x 2 sets of sums)
      for (index_t j = 0; j < block; j += 8)
        if (ks == 64)
          decode_scores<8, 1, 2, 64>(k + (j0 + j) * ks, ks, qt, Rp, s + j * Rp, D, step);
        else
          decode_scores<8, 1, 2>(k + (j0 + j) * ks, ks, qt, Rp, s + j * Rp, D, step);
    } else {
      gemm(k + j0 * ks, ks, 1, qt, Rp, s, Rp, block, Rp, D, false, step);
    }
    bool rescale = false;  // (once the running maxima settle, alpha is 1 in every row)
    for (index_t r = 0; r < Rp; r += lanes) {
      // (four chains of maxima: one waited on each max in turn, 4 cycles a key)
      static_assert(block % 4 == 0);
      reg mq[4];
      ATTN_SIMD_UNROLL
      for (int c = 0; c < 4; ++c) mq[c] = vec::load(s + c * Rp + r);
      for (index_t j = 4; j < block; j += 4) {
        ATTN_SIMD_UNROLL
        for (int c = 0; c < 4; ++c) mq[c] = vec::max(mq[c], vec::load(s + (j + c) * Rp + r));
      }
      const reg mx = vec::max(vec::max(mq[0], mq[1]), vec::max(mq[2], mq[3]));
      const reg m_old = vec::load(m + r), m_new = vec::max(mx, m_old);
      const reg m_use = vec::replace_neg_inf(m_new, 0.0f);
      const reg a = vec::exp2(vec::sub(m_old, m_use));
      vec::store(alpha + r, a);
      rescale = rescale || !vec::all_equal(a, 1.0f);
      vec::store(m + r, m_new);
      reg sum = vec::zero();
      for (index_t j = 0; j < block; ++j) {
        const reg p = vec::exp2(vec::sub(vec::load(s + j * Rp + r), m_use));
        vec::store(s + j * Rp + r, p);
        sum = vec::add(sum, p);
      }
      vec::store(l + r, vec::fmadd(a, vec::load(l + r), sum));
    }
    for (index_t r = 0; r < R && rescale; ++r) {
      const reg a = vec::set1(alpha[r]);
      for (index_t x = 0; x < Dvp; x += lanes)
        vec::store(acc + r * Dvp + x, vec::mul(a, vec::load(acc + r * Dvp + x)));
    }
    if (Dv == Dvp) {
      gemm(s, 1, Rp, v + j0 * vs, vs, acc, Dvp, R, Dvp, block, true, step);
    } else {  // (value rows padded to whole vectors)
      pack(v + j0 * vs, vs, block, Dv, vp, Dvp, false);
      gemm(s, 1, Rp, vp, Dvp, acc, Dvp, R, Dvp, block, true, step);
    }
  };

  for (index_t j0 = chunk.begin; j0 < chunk.end; j0 += block) {
    if (tiles && j0 + block <= chunk.end && all_b <= j0 && j0 + block <= all_e) {
      tiled_block(j0);
      continue;
    }
    std::fill_n(m_blk, R16, -__builtin_inff());
    const index_t j1 = std::min(j0 + block, chunk.end);
    // While the scores are computed, this block's values are fetched; during P V, the next
    // block's keys: at most a block of each beside the one in use.
    fetch_v.start(v + j0 * vs, vs, Dv, j1 - j0, R * ((block + lanes - 1) / lanes));
    fetch_k.start(k + j1 * ks, ks, D, std::min(j1 + block, fetch_end) - j1,
                  R * block * ((nvv + 7) / 8));
    const auto block_keys = [&](index_t r) {  // row r's keys of this block
      return key_range{std::max(kb[r], j0), std::min(ke[r], j1)};
    };
    // Scores, row by row; row r's start at s + r * block.
    for (index_t r = 0; r < R; ++r) {
      const auto [b0, b1] = block_keys(r);
      if (b1 <= b0) continue;
      m_blk[r] =
          decode_row_scores(qp + r * Dp, k, ks, key_range{b0, b1}, s + r * block, D, fetch_v);
    }
    // The softmax: alpha = 2^(m_old - m_new) rescales what came before (0 on a row's first
    // block), `lanes` rows at a time, m_blk becoming the maximum exponentiated against (0 for
    // -inf); then p = 2^(s - m) (0 in the padding lanes) and the block's sum, added into l.
    for (index_t r = 0; r < R; r += lanes) {
      const reg m_old = vec::load(m + r), m_new = vec::max(vec::load(m_blk + r), m_old);
      const reg m_use = vec::replace_neg_inf(m_new, 0.0f);
      vec::store(alpha + r, vec::exp2(vec::sub(m_old, m_use)));
      vec::store(m + r, m_new);
      vec::store(m_blk + r, m_use);
    }
    for (index_t r = 0; r < R; ++r) {
      const auto [b0, b1] = block_keys(r);
      if (b1 <= b0) continue;
      float* sr = s + r * block;
      const float m_use = m_blk[r];
      reg sum = vec::zero();
      for (index_t jj = b0; jj < b1; jj += lanes) {
        const reg p = vec::exp2(vec::sub(vec::load(sr + (jj - b0)), vec::set1(m_use)));
        vec::store(sr + (jj - b0), p);
        sum = vec::add(sum, p);
      }
      const float block_sum = vec::hsum(sum), a = alpha[r];
      l[r] = a * l[r] + block_sum;
    }
    // P V, value row by value row (sequential), into registers of up to 8 vectors at a time;
    // then added into the running output.
    for (index_t r = 0; r < R; ++r) {
      const auto [b0, b1] = block_keys(r);
      if (b1 <= b0) continue;
      const float* sr = s + r * block;
      const float* vb = v + b0 * vs;
      float* ar = acc + r * Dvp;
      if (lanes == 16 && Dv == 4 * lanes) {  // with the next rows that see the same keys
        index_t g = 1;
        for (; g < 4 && r + g < R; ++g) {
          const key_range keys = block_keys(r + g);
          if (keys.begin != b0 || keys.end != b1) break;
        }
        if (g == 4)
          decode_pv_rows<4, 4>(sr, block, b1 - b0, vb, vs, alpha + r, ar, Dvp, fetch_k);
        else if (g == 3)
          decode_pv_rows<3, 4>(sr, block, b1 - b0, vb, vs, alpha + r, ar, Dvp, fetch_k);
        else if (g == 2)
          decode_pv_rows<2, 4>(sr, block, b1 - b0, vb, vs, alpha + r, ar, Dvp, fetch_k);
        else
          decode_pv_rows<1, 4>(sr, block, b1 - b0, vb, vs, alpha + r, ar, Dvp, fetch_k);
        r += g - 1;
        continue;
      }
      for (index_t dv0 = 0; dv0 < nvv; dv0 += 8) {
        const index_t nv = std::min<index_t>(8, nvv - dv0);
        if (Dv % lanes == 0 && nv == 8) {
          decode_pv_rows<1, 8>(sr, block, b1 - b0, vb + dv0 * lanes, vs, alpha + r,
                               ar + dv0 * lanes, Dvp, fetch_k);
          continue;
        }
        if (Dv % lanes == 0 && nv == 4) {
          decode_pv_rows<1, 4>(sr, block, b1 - b0, vb + dv0 * lanes, vs, alpha + r,
                               ar + dv0 * lanes, Dvp, fetch_k);
          continue;
        }
        reg o[8];  // (value rows that end inside a vector)
        ATTN_SIMD_UNROLL
        for (int x = 0; x < 8; ++x) o[x] = vec::zero();
        for (index_t j = b0; j < b1; ++j) {
          const reg p = vec::set1(sr[j - b0]);
          const float* vr = v + j * vs + dv0 * lanes;
          fetch_k.step();
          ATTN_SIMD_UNROLL
          for (int x = 0; x < 8; ++x)
            if (x < nv)
              o[x] = vec::fmadd(p,
                                vec::load_n(vr + x * lanes,
                                            int(std::min<index_t>(lanes, Dv - (dv0 + x) * lanes))),
                                o[x]);
        }
        const reg a = vec::set1(alpha[r]);
        ATTN_SIMD_UNROLL
        for (int x = 0; x < 8; ++x) {
          if (x >= nv) break;
          float* out = ar + (dv0 + x) * lanes;
          vec::store(out, vec::fmadd(a, vec::load(out), o[x]));
        }
      }
    }
  }
  for (index_t r = 0; r < R; ++r) {
    const softmax_end<float> end = finish_softmax_log2(ke[r] > kb[r], m[r], l[r]);
    lse_out[r] = end.lse;
    const reg scale = vec::set1(part ? part_scale(end, l[r]) : end.scale);
    for (index_t d = 0; d < Dv; d += lanes)
      vec::store_n(o_out + r * o_rs + d, vec::mul(vec::load(acc + r * Dvp + d), scale),
                   int(std::min<index_t>(lanes, Dv - d)));
  }
}
