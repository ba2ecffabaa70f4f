// The float decode kernel (a few queries against many keys), written once against `vec` and
// compiled per instruction set by flash_simd.hpp after flash_kernel.inl, whose helpers it uses
// (no include guard, includes nothing).
//
// One work item is one chunk of keys of one (batch, key head) and every query row of its
// group (G query heads x Tq queries): the chunk's K and V are read from memory once, a block of
// decode_block keys at a time, and every row works on the block while it is in L1 (32 keys:
// 8 KiB of K and of V at D 64, measured best against 64 and 128, which let the two streams
// drift apart). Vector lanes run
// along the head dimension: a row's scores for 8 (16) keys are 8 (16) dot products, reduced
// with one register transpose; its output row accumulates p_j V_j with one broadcast per key.
// Each row sees the keys of attn/core/visibility.hpp only (hidden keys are never read). Key
// blocks are summed on their own and added into the running sums with compensation, as in the
// forward kernel.

/// Writes for row r: o_out[r * o_rs + d] (d < Dv) = the chunk's normalised output, lse_out[r]
/// its log-sum-exp (-inf and zeros when the row sees none of the chunk's keys).
ATTN_SIMD_NOINLINE inline void flash_decode_item(const decode_rows& rq, const float* k, index_t ks,
                                                 const float* v, index_t vs, index_t D, index_t Dv,
                                                 const visibility& vis, key_range chunk,
                                                 float scale_log2, float* o_out, index_t o_rs,
                                                 float* lse_out, float* scratch) {
  constexpr index_t block = decode_block;
  const index_t Dp = (D + lanes - 1) / lanes * lanes, Dvp = (Dv + lanes - 1) / lanes * lanes;
  const index_t nvd = Dp / lanes, nvv = Dvp / lanes;
  // Scratch: q rows (rows, Dp) scaled to log2 units, running output and its compensation
  // (rows, Dvp) each, m, l, l_lo (rows), and one block of scores (block).
  float* qp = scratch;
  float* acc = qp + rq.rows * Dp;
  float* acc_lo = acc + rq.rows * Dvp;
  float* m = acc_lo + rq.rows * Dvp;
  float* l = m + (rq.rows + 15) / 16 * 16;
  float* l_lo = l + (rq.rows + 15) / 16 * 16;
  float* s = l_lo + (rq.rows + 15) / 16 * 16;
  for (index_t r = 0; r < rq.rows; ++r) {
    const float* src = rq.q + (r / rq.Tq) * rq.q_hs + (r % rq.Tq) * rq.qs;
    for (index_t d = 0; d < Dp; ++d) qp[r * Dp + d] = d < D ? src[d] * scale_log2 : 0.0f;
  }
  std::fill_n(acc, 2 * rq.rows * Dvp, 0.0f);
  std::fill_n(m, rq.rows, -__builtin_inff());
  std::fill_n(l, rq.rows, 0.0f);
  std::fill_n(l_lo, rq.rows, 0.0f);

  const auto row_keys = [&](index_t r) {  // the chunk's keys row r sees
    const key_range keys = vis.row(r % rq.Tq);
    return key_range{std::max(keys.begin, chunk.begin), std::min(keys.end, chunk.end)};
  };
  for (index_t j0 = chunk.begin; j0 < chunk.end; j0 += block) {
    const index_t j1 = std::min(j0 + block, chunk.end);
    for (index_t r = 0; r < rq.rows; ++r) {
      const key_range keys = row_keys(r);
      const index_t b0 = std::max(keys.begin, j0), b1 = std::min(keys.end, j1);
      if (b1 <= b0) continue;
      // Scores, `lanes` keys at a time: lane d of t[kk] holds partial sums of key kk's dot
      // product; a transpose turns the lanes x lanes partial sums into one vector of scores
      // (lanes past the block's last key -inf).
      const float* qr = qp + r * Dp;
      reg mx = vec::set1(-__builtin_inff());
      for (index_t jj = b0; jj < b1; jj += lanes) {
        const int n = int(std::min<index_t>(lanes, b1 - jj));
        // The keys' dot products side by side: `lanes` independent FMA chains per step.
        reg t[lanes];
        ATTN_SIMD_UNROLL
        for (int kk = 0; kk < lanes; ++kk) t[kk] = vec::zero();
        const float* kr = k + jj * ks;
        // The values of these keys come next: their rows are fetched meanwhile.
        for (int kk = 0; r == 0 && kk < n; ++kk)
          for (index_t d = 0; d < Dv; d += 16) prefetch(v + (jj + kk) * vs + d, false);
        if (n == lanes && D % lanes == 0) {
          for (index_t dv = 0; dv < nvd; ++dv) {
            const reg qv = vec::load(qr + dv * lanes);
            ATTN_SIMD_UNROLL
            for (int kk = 0; kk < lanes; ++kk)
              t[kk] = vec::fmadd(qv, vec::loadu(kr + kk * ks + dv * lanes), t[kk]);
          }
        } else {
          for (index_t dv = 0; dv < nvd; ++dv) {
            const reg qv = vec::load(qr + dv * lanes);
            const int cols = int(std::min<index_t>(lanes, D - dv * lanes));
            ATTN_SIMD_UNROLL
            for (int kk = 0; kk < lanes; ++kk)
              if (kk < n)
                t[kk] = vec::fmadd(qv, vec::load_n(kr + kk * ks + dv * lanes, cols), t[kk]);
          }
        }
        vec::transpose(t);
        reg sc = t[0];
        ATTN_SIMD_UNROLL
        for (int kk = 1; kk < lanes; ++kk) sc = vec::add(sc, t[kk]);
        sc = vec::first_or(sc, n, -__builtin_inff());
        vec::store(s + (jj - b0), sc);
        mx = vec::max(mx, sc);
      }
      alignas(64) float mxs[lanes];
      vec::store(mxs, mx);
      float m_block = mxs[0];
      for (int x = 1; x < lanes; ++x) m_block = std::max(m_block, mxs[x]);
      const float m_old = m[r], m_new = std::max(m_old, m_block);
      const float m_use = max_used(m_new);
      // p = 2^(s - m) (0 in the padding lanes); the block's sum and P V start from zero.
      reg sum = vec::zero();
      for (index_t jj = b0; jj < b1; jj += lanes) {
        const reg p = vec::exp2(vec::sub(vec::load(s + (jj - b0)), vec::set1(m_use)));
        vec::store(s + (jj - b0), p);
        sum = vec::add(sum, p);
      }
      alignas(64) float sums[lanes];
      vec::store(sums, sum);
      float block_sum = 0;
      for (int x = 0; x < lanes; ++x) block_sum += sums[x];
      const float alpha = std::exp2(m_old - m_use);  // 0 on the first block the row sees
      m[r] = m_new;
      {  // compensated l = alpha l + block_sum
        const float h = alpha * l[r], c = alpha * l_lo[r], y = block_sum - c, t = h + y;
        l_lo[r] = (t - h) - y;
        l[r] = t;
      }
      float* ar = acc + r * Dvp;
      float* ar_lo = acc_lo + r * Dvp;
      // P V, value row by value row (sequential), into registers of up to 8 vectors at a
      // time; then added into the running output with compensation.
      for (index_t dv0 = 0; dv0 < nvv; dv0 += 8) {
        const index_t nv = std::min<index_t>(8, nvv - dv0);
        reg o[8];
        ATTN_SIMD_UNROLL
        for (int x = 0; x < 8; ++x) o[x] = vec::zero();
        const bool whole = Dv % lanes == 0;
        for (index_t j = b0; j < b1; ++j) {
          const reg p = vec::set1(s[j - b0]);
          const float* vr = v + j * vs + dv0 * lanes;
          // And the next block's keys while these values are summed.
          if (r == 0 && dv0 == 0 && j + block < chunk.end)
            for (index_t d = 0; d < D; d += 16) prefetch(k + (j + block) * ks + d, false);
          ATTN_SIMD_UNROLL
          for (int x = 0; x < 8; ++x)
            if (x < nv)
              o[x] = vec::fmadd(
                  p,
                  whole ? vec::loadu(vr + x * lanes)
                        : vec::load_n(vr + x * lanes,
                                      int(std::min<index_t>(lanes, Dv - (dv0 + x) * lanes))),
                  o[x]);
        }
        const reg a = vec::set1(alpha);
        ATTN_SIMD_UNROLL
        for (int x = 0; x < 8; ++x) {
          if (x >= nv) break;
          float* hi = ar + (dv0 + x) * lanes;
          float* lo = ar_lo + (dv0 + x) * lanes;
          const reg h = vec::mul(a, vec::load(hi)), c = vec::mul(a, vec::load(lo));
          const reg y = vec::sub(o[x], c), t = vec::add(h, y);
          vec::store(lo, vec::sub(vec::sub(t, h), y));
          vec::store(hi, t);
        }
      }
    }
  }
  for (index_t r = 0; r < rq.rows; ++r) {
    const softmax_end<float> end = finish_softmax_log2(!row_keys(r).empty(), m[r], l[r] - l_lo[r]);
    lse_out[r] = end.lse;
    for (index_t d = 0; d < Dv; ++d)
      o_out[r * o_rs + d] = (acc[r * Dvp + d] - acc_lo[r * Dvp + d]) * end.scale;
  }
}
