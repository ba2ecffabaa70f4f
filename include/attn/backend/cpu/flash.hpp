#pragma once
/// \file
/// CPU flash attention: for each (batch, head, query block), walk the key blocks the block's
/// rows see (attn/core/visibility.hpp) with an online softmax. The work items and their order
/// are the same for the SIMD float kernel (simd/flash_simd.hpp) and the Eigen-blocked path
/// below (double, and float where no SIMD kernel applies); only the item differs.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "attn/backend/cpu/eigen_map.hpp"
#include "attn/backend/cpu/parallel.hpp"
#include "attn/backend/cpu/simd/flash_simd.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/visibility.hpp"
#include "attn/ops/attention.hpp"

namespace attn::cpu_detail {

/// Keys of batch row b: its length when lengths are given, else Tk.
template <class Args>
index_t kv_length(const Args& a, index_t b) {
  return a.kv_lengths.empty() ? a.shape.kv_len : index_t(a.kv_lengths(b));
}

/// Calls item(b, h, i0, rows, cold) for every (batch, head, block of `bq` queries) in
/// parallel: one (batch, head) after another, query heads of one key head together, so K and
/// V stay in cache from one block to the next; within a head the largest (causal: last)
/// blocks first. `cold` marks (about) the first item of each head on a thread. The items are
/// fixed by the shape alone, so results do not depend on the thread count.
template <class T, class F>
void for_query_blocks(const cpu_policy& policy, const attention_args<T>& a, index_t bq, F&& item) {
  const attention_shape& s = a.shape;
  const index_t blocks = (s.q_len + bq - 1) / bq, items = s.batch * s.heads * blocks;
  const double flops = 2.0 * double(bq) * double(s.kv_len) * double(s.head_dim + s.value_dim) /
                       (a.mask.causal ? 2 : 1);
  const int workers = worker_count(policy, items, flops);
  parallel_for(workers, items, [&](index_t it) {
    const index_t bh = it / blocks, i0 = (blocks - 1 - it % blocks) * bq;
    item(bh / s.heads, bh % s.heads, i0, std::min(bq, s.q_len - i0), it % blocks < workers);
  });
}

inline constexpr index_t flash_block_q = 64;  ///< query rows per Eigen work item
inline constexpr index_t flash_block_k = 64;  ///< keys per Eigen inner step

/// Rows [i0, i0 + rows) of o[b, h] (and lse[b, h]) on Eigen blocks. In a block that some row
/// sees only in part, each row's P V covers exactly its visible keys (a NaN stored at a hidden
/// value must not meet a zero weight).
template <class T>
void flash_query_block(const attention_args<T>& a, index_t b, index_t h, index_t i0, index_t rows) {
  using array = Eigen::Array<T, Eigen::Dynamic, 1>;
  constexpr T inf = std::numeric_limits<T>::infinity();
  const index_t hk = a.shape.kv_head(h), Dv = a.shape.value_dim;
  const visibility vis(a.mask, a.shape.q_len, kv_length(a, b));
  const key_range span = vis.rows(i0, i0 + rows), common = vis.common(i0, i0 + rows);

  thread_local matrix<T> q_pack, k_pack, v_pack, S, O;
  const auto Q = read(rows_of(a.q, b, h, i0, rows), q_pack);  // (rows, D)
  S.resize(rows, flash_block_k);                              // (rows, BK) scores, then P
  O.setZero(rows, Dv);                                        // (rows, Dv) unnormalised output
  array m = array::Constant(rows, -inf);                      // running row max
  array l = array::Zero(rows);                                // running row sum of exp(s - m)
  const T scale = T(a.scale);

  for (index_t j0 = span.begin; j0 < span.end; j0 += flash_block_k) {
    const index_t cols = std::min(flash_block_k, span.end - j0);
    const auto K = read(rows_of(a.k, b, hk, j0, cols), k_pack);  // (cols, D)
    const auto V = read(rows_of(a.v, b, hk, j0, cols), v_pack);  // (cols, Dv)
    auto Sb = S.leftCols(cols);
    Sb.noalias() = scale * Q * K.transpose();
    const bool edge = !(common.begin <= j0 && j0 + cols <= common.end);
    for (index_t r = 0; r < rows; ++r) {
      const key_range keys = vis.row(i0 + r);
      const index_t lo = std::clamp<index_t>(keys.begin - j0, 0, cols);
      const index_t n = std::clamp<index_t>(keys.end - j0, 0, cols) - lo;
      auto seen = Sb.row(r).segment(lo, std::max<index_t>(n, 0));
      if (n <= 0) {
        Sb.row(r).setZero();
        continue;
      }
      // maxCoeff may skip a NaN; exp(NaN - m) brings it back into l and O.
      const T m_new = std::max(m(r), seen.maxCoeff());
      const T alpha = std::exp(m(r) - max_used(m_new));  // 0 on the first visible block
      // -inf scores get exactly 0 (Eigen's exp gives a denormal, and those make P V crawl
      // through microcode assists), as do hidden keys.
      seen = (seen.array() == -inf).select(T(0), (seen.array() - max_used(m_new)).exp());
      Sb.row(r).head(lo).setZero();
      Sb.row(r).tail(cols - lo - n).setZero();
      l(r) = alpha * l(r) + seen.sum();
      O.row(r) *= alpha;
      m(r) = m_new;
    }
    if (!edge) {
      O.noalias() += Sb * V;
      continue;
    }
    for (index_t r = 0; r < rows; ++r) {
      const key_range keys = vis.row(i0 + r);
      const index_t lo = std::clamp<index_t>(keys.begin - j0, 0, cols);
      const index_t n = std::clamp<index_t>(keys.end - j0, 0, cols) - lo;
      if (n > 0) O.row(r).noalias() += Sb.row(r).segment(lo, n) * V.middleRows(lo, n);
    }
  }

  array inv(rows);
  for (index_t r = 0; r < rows; ++r) {
    const softmax_end<T> end = finish_softmax(!vis.row(i0 + r).empty(), m(r), l(r));
    inv(r) = end.scale;
    if (a.lse.data() != nullptr) a.lse(b, h, i0 + r) = accum_t<T>(end.lse);
  }
  if (Dv > 0)
    write(rows_of(a.o, b, h, i0, rows), [&](auto out) { out = inv.matrix().asDiagonal() * O; });
}

inline constexpr index_t decode_max_queries = 8;  ///< Tq up to this takes the decode kernel

/// Most chunks of one (batch, key head) that one work item of flash_decode takes in a row.
inline constexpr index_t decode_max_run = 8;

/// Split-KV decoding for float (a few queries per head): the keys of each (batch, key head)
/// fall into chunks of decode_chunk, each computing every query row of its group over its keys
/// into a part of (o, lse); the parts of a row are then merged in chunk order. The chunks are
/// fixed by the shape, so results do not depend on the thread count; the parts live in a buffer
/// of the calling thread that grows and is kept, so a decode step allocates nothing once warm.
/// A work item is a run of up to decode_max_run consecutive chunks of one head: while it
/// finishes one chunk it already fetches the next, so its reads flow on as one stream instead
/// of stalling at the start of every chunk.
/// Where a head has one chunk (Tk <= decode_chunk) and the rows of a group are evenly spaced
/// in o (and lse), the chunk writes them in place and nothing is merged: a merge of one part
/// is the part itself (weight exp(0) = 1, scale 1 / 1), so the merge pass is skipped.
inline void flash_decode(const cpu_policy& policy, const attention_args<float>& a,
                         const flash_kernel& kernel) {
  const attention_shape& s = a.shape;
  const index_t G = s.group(), rows = G * s.q_len, Dv = s.value_dim, heads = s.batch * s.kv_heads;
  const index_t chunks = std::max<index_t>(1, (s.kv_len + decode_chunk - 1) / decode_chunk);
  const index_t per_chunk = rows * (Dv + 1);
  float* base = thread_scratch<float, struct decode_parts>(std::size_t(heads * chunks * per_chunk));
  const float scale_log2 = float(a.scale * 1.4426950408889634);
  const auto at = [](const auto& t, index_t i0, index_t i1) {
    return t.empty() ? t.data() : t.data() + i0 * t.stride(0) + i1 * t.stride(1);
  };
  // A chunk streams its K and V from memory (a decode step's cache is cold): one core reads
  // about 10 GB/s where it computes about 80 GFLOP/s, so a byte weighs as 8 FLOPs when deciding
  // how many workers a step is worth (by FLOPs alone, Tk 1024 stayed on one core). Each
  // worker gets about four runs, where the chunks allow.
  const double bytes = double(decode_chunk) * double(s.head_dim + Dv) * sizeof(float);
  const double work =
      std::max(4.0 * double(rows) * double(decode_chunk) * double(s.head_dim), 8.0 * bytes);
  const int workers = worker_count(policy, heads * chunks, work);
  const index_t run =
      std::clamp<index_t>(heads * chunks / (4 * index_t(workers)), 1, decode_max_run);
  const index_t runs = (chunks + run - 1) / run;  // per head
  // Row r = g Tq + i of a group is (query head g, query i): one stride for every row of t (an
  // o or lse [B, H, Tq, ...]), or 0 where there is none.
  const auto row_stride = [&](const auto& t) -> index_t {
    if (rows == 1) return 1;               // (one row: any stride)
    if (s.q_len == 1) return t.stride(1);  // a row per query head
    if (G == 1 || t.stride(1) == s.q_len * t.stride(2)) return t.stride(2);
    return 0;
  };
  const index_t o_rs = a.o.empty() ? 0 : row_stride(a.o);
  const bool direct = chunks == 1 && o_rs != 0 && (a.o.stride(3) == 1 || Dv <= 1) &&
                      (a.lse.empty() || row_stride(a.lse) == 1);
  parallel_for(workers, heads * runs, [&](index_t it) {
    const index_t bh = it / runs, b = bh / s.kv_heads, hk = bh % s.kv_heads;
    const index_t len = kv_length(a, b), c0 = it % runs * run, c1 = std::min(c0 + run, chunks);
    const decode_rows rq{at(a.q, b, hk * G), a.q.stride(1), a.q.stride(2), s.q_len, rows};
    float* scratch = thread_scratch<float>(
        std::size_t(flash_decode_scratch_floats(kernel.lanes, rows, s.head_dim, Dv)));
    for (index_t c = c0; c < c1; ++c) {
      const key_range chunk{std::min(len, c * decode_chunk), std::min(len, (c + 1) * decode_chunk)};
      const index_t fetch_end = c + 1 < c1 ? std::min(len, (c + 2) * decode_chunk) : chunk.end;
      float* part = base + (bh * chunks + c) * per_chunk;  // (rows, Dv) outputs, then (rows) lse
      float* lse_out = direct && !a.lse.empty() ? at(a.lse, b, hk * G) : part + rows * Dv;
      kernel.decode_item(rq, at(a.k, b, hk), a.k.stride(2), at(a.v, b, hk), a.v.stride(2),
                         s.head_dim, Dv, visibility(a.mask, s.q_len, len), chunk, fetch_end,
                         scale_log2, direct ? at(a.o, b, hk * G) : part, direct ? o_rs : Dv,
                         lse_out, !direct, scratch);
    }
  });
  if (direct) return;
  // Merge the chunks of every row in order: the same combination as merge_attention.
  constexpr float inf = std::numeric_limits<float>::infinity();
  parallel_for(worker_count(policy, heads, double(chunks * rows * Dv)), heads, [&](index_t bh) {
    const index_t b = bh / s.kv_heads, hk = bh % s.kv_heads;
    const visibility vis(a.mask, s.q_len, kv_length(a, b));
    const float* first = base + bh * chunks * per_chunk;
    // exp(lse - m) per chunk, then a row's weighted sums (added chunk by chunk,
    // each along the row: the same order per element as chunk after chunk)
    float* w = thread_scratch<float>(std::size_t(chunks + Dv));
    float* x = w + chunks;
    for (index_t r = 0; r < rows; ++r) {
      const index_t h = hk * G + r / s.q_len, i = r % s.q_len;
      float m = -inf;
      for (index_t c = 0; c < chunks; ++c) m = max_nan(m, first[c * per_chunk + rows * Dv + r]);
      float sum = 0;
      for (index_t c = 0; c < chunks; ++c) {
        const float lse = first[c * per_chunk + rows * Dv + r];
        w[c] = lse == -inf ? 0.0f : std::exp(lse - m);
        sum += w[c];
      }
      // A NaN in any chunk reaches sum. m is -inf where no chunk saw a key, and also where
      // every score the row sees is -inf (an infinite q or k): that row ends as one pass over
      // its keys ends it, 0 / 0 = NaN with lse -inf, not with the zeros of a row that sees none.
      const softmax_end<float> end = finish_softmax(!vis.row(i).empty(), m, sum);
      // (every chunk, those of weight 0 too: their parts hold zeros, or NaN where the row saw
      // a NaN or Inf value with a score of -inf, which reaches the row as 0 x NaN would)
      std::fill_n(x, Dv, 0.0f);
      for (index_t c = 0; c < chunks; ++c) {
        const float wc = w[c], *oc = first + c * per_chunk + r * Dv;
        for (index_t d = 0; d < Dv; ++d) x[d] += wc * oc[d];
      }
      // (through a row pointer: a.o(b, h, i, d) per element cost a 64-bit vector multiply per
      // index, a third of the time of a 1024-key step of 12 rows with K and V in L2)
      if (Dv > 0) {
        float* out = &a.o(b, h, i, 0);
        for (index_t d = 0; d < Dv; ++d) out[d * a.o.stride(3)] = x[d] * end.scale;
      }
      if (a.lse.data() != nullptr) a.lse(b, h, i) = end.lse;
    }
  });
}

/// The fused attention over all (batch, head, query block) items: the SIMD kernel for float
/// where it applies (q, k, v columns contiguous), else Eigen blocks; a few queries per head
/// take the split-KV decode kernel.
template <class T>
void flash_attention(const cpu_policy& policy, const attention_args<T>& a) {
  if (a.o.empty() && a.lse.empty()) return;  // (with Dv = 0, lse is still written)
  const auto unit = [](const auto& t) { return t.stride(3) == 1 || t.extent(3) <= 1; };
  if constexpr (std::is_same_v<T, float>) {
    const flash_kernel kernel = simd_flash_kernel(a.shape.head_dim, a.shape.value_dim);
    if (kernel.decode_item != nullptr && unit(a.q) && unit(a.k) && unit(a.v) &&
        a.shape.q_len <= decode_max_queries)
      return flash_decode(policy, a, kernel);
    if (kernel.item != nullptr && unit(a.q) && unit(a.k) && unit(a.v)) {
      const auto at = [](const auto& t, index_t b, index_t h) {
        return t.empty() ? t.data() : t.data() + b * t.stride(0) + h * t.stride(1);
      };
      const float scale_log2 = float(a.scale * 1.4426950408889634);
      for_query_blocks(
          policy, a, kernel.bq, [&](index_t b, index_t h, index_t i0, index_t rows, bool cold) {
            const index_t hk = a.shape.kv_head(h);
            const flash_head head{at(a.q, b, h),
                                  a.q.stride(2),
                                  at(a.k, b, hk),
                                  a.k.stride(2),
                                  at(a.v, b, hk),
                                  a.v.stride(2),
                                  at(a.o, b, h),
                                  a.o.stride(2),
                                  a.o.stride(3),
                                  a.lse.data() != nullptr ? at(a.lse, b, h) : nullptr,
                                  a.lse.data() != nullptr ? a.lse.stride(2) : 0,
                                  a.shape.head_dim,
                                  a.shape.value_dim,
                                  visibility(a.mask, a.shape.q_len, kv_length(a, b)),
                                  scale_log2};
            kernel.item(head, i0, rows, cold, thread_scratch<float>(std::size_t(kernel.scratch)));
          });
      return;
    }
  }
  for_query_blocks(policy, a, flash_block_q,
                   [&](index_t b, index_t h, index_t i0, index_t rows, bool) {
                     flash_query_block<T>(a, b, h, i0, rows);
                   });
}

}  // namespace attn::cpu_detail
