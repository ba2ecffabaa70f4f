#pragma once
/// \file
/// CPU flash-attention backward (FlashAttention-2's form, see simd/flash_backward.inl): work
/// items are (batch, key head, chunk of key blocks), each computing dK and dV of its keys over
/// every query head of the group and its part of dQ. The chunks are fixed by the shape alone
/// (enough items for many cores even at B = 1), and where a head's keys are split, the first
/// chunk writes its part of dQ into dq and each other chunk into a buffer of its own, added in
/// chunk order afterwards: no atomics, the same bits for every thread count. Memory beyond the
/// inputs and outputs is O(T) per thread (and S - 1 dQ parts when split), never [Tq, Tk].

#include <algorithm>
#include <cmath>
#include <vector>

#include <Eigen/Core>

#include "attn/backend/cpu/eigen_map.hpp"
#include "attn/backend/cpu/flash.hpp"
#include "attn/backend/cpu/parallel.hpp"
#include "attn/backend/cpu/simd/flash_simd.hpp"
#include "attn/core/visibility.hpp"
#include "attn/ops/attention.hpp"

namespace attn::cpu_detail {

inline constexpr index_t backward_block = 64;  ///< keys per chunk step (every backward path)

inline constexpr index_t backward_max_chunks = 8;  ///< most key chunks of one (batch, key head)

/// Key chunks per (batch, key head): about 24 items in all, at most backward_max_chunks, whole
/// key blocks.
inline index_t backward_chunks(const attention_shape& s) {
  const index_t blocks = (s.kv_len + backward_block - 1) / backward_block;
  const index_t heads = std::max<index_t>(1, s.batch * s.kv_heads);
  return std::clamp<index_t>((24 + heads - 1) / heads, 1,
                             std::clamp<index_t>(blocks, 1, backward_max_chunks));
}

/// Keys [begin, end) of chunk c of n over `keys` keys, in whole blocks.
inline key_range backward_chunk(index_t c, index_t n, index_t keys) {
  const index_t blocks = (keys + backward_block - 1) / backward_block;
  const index_t b0 = blocks * c / n, b1 = blocks * (c + 1) / n;
  return {std::min(keys, b0 * backward_block), std::min(keys, b1 * backward_block)};
}

/// The Eigen item (double, and float where no SIMD kernel applies): the same loops as the
/// SIMD kernel, on Eigen blocks. dq_part (rows of the group's heads) gets this chunk's dQ.
template <class T>
void flash_backward_block(const attention_backward_args<T>& a, index_t b, index_t hk,
                          key_range keys, tensor_view<T, 4> dq_part) {
  using array = Eigen::Array<T, Eigen::Dynamic, 1>;
  constexpr index_t bq = 64;
  const attention_shape& s = a.shape;
  const index_t G = s.group(), Tq = s.q_len, D = s.head_dim, Dv = s.value_dim;
  const visibility vis(a.mask, Tq, kv_length(a, b));
  const T scale = T(a.scale);
  thread_local matrix<T> q_pack, o_pack, do_pack, k_pack, v_pack, dK, dV, dQ, S, dP;
  dK.setZero(keys.size(), D);
  dV.setZero(keys.size(), Dv);
  for (index_t g = 0; g < G; ++g) {
    const index_t h = hk * G + g;
    const auto Q = read(rows_of(a.q, b, h, 0, Tq), q_pack);      // (Tq, D)
    const auto O = read(rows_of(a.o, b, h, 0, Tq), o_pack);      // (Tq, Dv)
    const auto dO = read(rows_of(a.d_o, b, h, 0, Tq), do_pack);  // (Tq, Dv)
    const array Drow = (dO.array() * O.array()).rowwise().sum();
    dQ.setZero(Tq, D);
    for (index_t j0 = keys.begin; j0 < keys.end; j0 += backward_block) {
      const index_t nk = std::min(backward_block, keys.end - j0);
      const auto K = read(rows_of(a.k, b, hk, j0, nk), k_pack);  // (nk, D)
      const auto V = read(rows_of(a.v, b, hk, j0, nk), v_pack);  // (nk, Dv)
      auto dKj = dK.middleRows(j0 - keys.begin, nk);
      auto dVj = dV.middleRows(j0 - keys.begin, nk);
      for (index_t i0 = 0; i0 < Tq; i0 += bq) {
        const index_t m = std::min(bq, Tq - i0);
        const key_range seen = vis.rows(i0, i0 + m);
        if (seen.empty() || seen.end <= j0 || seen.begin >= j0 + nk) continue;
        const auto Qi = Q.middleRows(i0, m);
        const auto dOi = dO.middleRows(i0, m);
        const key_range common = vis.common(i0, i0 + m);
        const bool edge = !(common.begin <= j0 && j0 + nk <= common.end);
        S.noalias() = Qi * K.transpose();
        dP.noalias() = dOi * V.transpose();
        for (index_t r = 0; r < m; ++r) {  // P in S, dS in dP
          const key_range row = vis.row(i0 + r);
          const index_t lo = std::clamp<index_t>(row.begin - j0, 0, nk);
          const index_t hi = std::max(lo, std::clamp<index_t>(row.end - j0, 0, nk));
          const T lse = a.lse(b, h, i0 + r);
          auto p = S.row(r).array();
          p = (p * scale - lse).exp();
          auto ds = dP.row(r).array();
          ds = scale * p * (ds - Drow(i0 + r));
          // Hidden keys get exactly 0 (never 0 x NaN).
          S.row(r).head(lo).setZero();
          S.row(r).tail(nk - hi).setZero();
          dP.row(r).head(lo).setZero();
          dP.row(r).tail(nk - hi).setZero();
        }
        if (edge && !(K.allFinite() && Qi.allFinite() && dOi.allFinite())) {
          // The zeros of hidden pairs would meet a NaN or Inf: visible pairs only.
          for (index_t r = 0; r < m; ++r) {
            const key_range row = vis.row(i0 + r);
            const index_t lo = std::clamp<index_t>(row.begin - j0, 0, nk);
            const index_t n = std::max(lo, std::clamp<index_t>(row.end - j0, 0, nk)) - lo;
            dVj.middleRows(lo, n).noalias() += S.row(r).segment(lo, n).transpose() * dOi.row(r);
            dKj.middleRows(lo, n).noalias() += dP.row(r).segment(lo, n).transpose() * Qi.row(r);
            dQ.row(i0 + r).noalias() += dP.row(r).segment(lo, n) * K.middleRows(lo, n);
          }
          continue;
        }
        dVj.noalias() += S.transpose() * dOi;
        dKj.noalias() += dP.transpose() * Qi;
        dQ.middleRows(i0, m).noalias() += dP * K;
      }
    }
    if (!dq_part.empty()) write(rows_of(dq_part, b, h, 0, Tq), [&](auto out) { out = dQ; });
  }
  if (!a.dk.empty())
    write(rows_of(a.dk, b, hk, keys.begin, keys.size()), [&](auto out) { out = dK; });
  if (!a.dv.empty())
    write(rows_of(a.dv, b, hk, keys.begin, keys.size()), [&](auto out) { out = dV; });
}

/// dst[c * cs] (+)= src[c] for c < n (adding unless `assign`; src null: zeros).
template <class T>
void add_row(T* dst, index_t cs, const T* src, index_t n, bool assign) {
  using row = Eigen::Array<T, 1, Eigen::Dynamic>;
  if (cs != 1 || n <= 1) {
    for (index_t c = 0; c < n; ++c)
      dst[c * cs] = src == nullptr ? T(0) : assign ? src[c] : dst[c * cs] + src[c];
    return;
  }
  Eigen::Map<row> out(dst, n);
  if (src == nullptr)
    out.setZero();
  else if (assign)
    out = Eigen::Map<const row>(src, n);
  else
    out += Eigen::Map<const row>(src, n);
}

/// The fused attention backward over all (batch, key head, chunk) items, then the dQ parts
/// added in order; keys past a row's length get zero gradients.
template <class T>
void flash_attention_backward(const cpu_policy& policy, const attention_backward_args<T>& a) {
  const attention_shape& s = a.shape;
  if (s.batch == 0 || s.kv_heads == 0) return;
  if (s.kv_len == 0) {  // no key at all: dq = 0 (dk and dv are empty)
    for (index_t b = 0; b < a.dq.extent(0); ++b)
      for (index_t h = 0; h < a.dq.extent(1); ++h)
        for (index_t i = 0; i < a.dq.extent(2); ++i)
          for (index_t d = 0; d < a.dq.extent(3); ++d) a.dq(b, h, i, d) = T(0);
    return;
  }
  const index_t n = backward_chunks(s), G = s.group();
  const index_t items = s.batch * s.kv_heads * n;
  // dQ: the first chunk of each head writes into dq itself, the others each into a contiguous
  // part, in a buffer of the calling thread that grows and is kept (a fresh one each call cost
  // page faults and a serial zero fill). An item writes at least the rows that may see its keys
  // (visibility::rows_seeing; the other rows' parts are zero), and the sum below reads no
  // other row of a part: nothing stale is read.
  // (The workers reach it through `parts`, a plain pointer: each thread has its own.)
  const bool split = n > 1 && !a.dq.empty();
  const index_t per_part = s.batch * s.heads * s.q_len * s.head_dim;
  T* const parts =
      split ? thread_scratch<T, struct dq_parts>(std::size_t((n - 1) * per_part)) : nullptr;
  const auto part = [&](index_t c) {
    if (c == 0 || !split) return a.dq;
    return tensor_view<T, 4>{parts + (c - 1) * per_part, {s.batch, s.heads, s.q_len, s.head_dim}};
  };
  const double flops = 2.5 * 4.0 * double(s.q_len) * double(s.kv_len) * double(G) *
                       double(s.head_dim) / double(n) / (a.mask.causal ? 2 : 1);
  const int workers = worker_count(policy, items, flops);

  const auto unit = [](const auto& t) { return t.stride(3) == 1 || t.extent(3) <= 1; };
  flash_kernel kernel{};
  if constexpr (std::is_same_v<T, float>)
    if (unit(a.q) && unit(a.k) && unit(a.v) && unit(a.o) && unit(a.d_o))
      kernel = simd_flash_kernel(s.head_dim, s.value_dim);

  // Chunk-major order: with a causal mask the first chunk of every head is the costliest (its
  // keys are seen by the most queries), so those go first and the cheap ones fill in the tail.
  parallel_for(workers, items, [&](index_t it) {
    const index_t c = it / (items / n), bh = it % (items / n);
    const index_t b = bh / s.kv_heads, hk = bh % s.kv_heads;
    const index_t len = kv_length(a, b);
    const key_range keys = backward_chunk(c, n, len);
    const tensor_view<T, 4> dq = part(c);
    if constexpr (std::is_same_v<T, float>) {
      if (kernel.backward_item != nullptr) {
        const auto at = [](const auto& t, index_t i0, index_t i1) {
          return t.empty() ? t.data() : t.data() + i0 * t.stride(0) + i1 * t.stride(1);
        };
        const auto lse_at = [&](index_t h) {
          return a.lse.data() + b * a.lse.stride(0) + h * a.lse.stride(1);
        };
        const index_t h0 = hk * G;
        const flash_backward_head head{at(a.q, b, h0),
                                       at(a.o, b, h0),
                                       at(a.d_o, b, h0),
                                       lse_at(h0),
                                       a.q.stride(1),
                                       a.q.stride(2),
                                       a.o.stride(1),
                                       a.o.stride(2),
                                       a.d_o.stride(1),
                                       a.d_o.stride(2),
                                       a.lse.stride(1),
                                       a.lse.stride(2),
                                       at(a.k, b, hk),
                                       at(a.v, b, hk),
                                       a.k.stride(2),
                                       a.v.stride(2),
                                       dq.empty() ? nullptr : at(dq, b, h0),
                                       dq.stride(1),
                                       dq.stride(2),
                                       dq.stride(3),
                                       a.dk.empty() ? nullptr : at(a.dk, b, hk),
                                       a.dv.empty() ? nullptr : at(a.dv, b, hk),
                                       a.dk.stride(2),
                                       a.dk.stride(3),
                                       a.dv.stride(2),
                                       a.dv.stride(3),
                                       s.head_dim,
                                       s.value_dim,
                                       G,
                                       visibility(a.mask, s.q_len, len),
                                       float(a.scale)};
        float* scratch = thread_scratch<float>(std::size_t(
            flash_backward_scratch_floats(kernel.lanes, kernel.bq_backward, kernel.bk_backward,
                                          s.q_len, keys.size(), s.head_dim, s.value_dim)));
        if (!keys.empty()) kernel.backward_item(head, keys.begin, keys.end, scratch);
        return;
      }
    }
    if (!keys.empty()) flash_backward_block<T>(a, b, hk, keys, dq);
  });

  // Keys past a row's length (ragged batches) do not affect the output.
  if (!a.kv_lengths.empty())
    for (index_t b = 0; b < s.batch; ++b)
      for (index_t hk = 0; hk < s.kv_heads; ++hk)
        for (index_t j = kv_length(a, b); j < s.kv_len; ++j) {
          for (index_t d = 0; d < s.head_dim && !a.dk.empty(); ++d) a.dk(b, hk, j, d) = T(0);
          for (index_t d = 0; d < s.value_dim && !a.dv.empty(); ++d) a.dv(b, hk, j, d) = T(0);
        }
  // Each row's dQ: the parts of the chunks whose rows it is among, added in chunk order (the
  // first in dq already when it is chunk 0's), or zero when it is among none (the same sum
  // for every thread count).
  if (a.dq.empty()) return;
  parallel_for(worker_count(policy, s.batch * s.heads, double(n * s.q_len * s.head_dim)),
               s.batch * s.heads, [&](index_t bh) {
                 const index_t b = bh / s.heads, h = bh % s.heads, len = kv_length(a, b);
                 const visibility vis(a.mask, s.q_len, len);
                 key_range rows[backward_max_chunks];
                 for (index_t c = 0; c < n; ++c)
                   rows[c] = vis.rows_seeing(backward_chunk(c, n, len));
                 const slice<T> out = rows_of(a.dq, b, h, 0, s.q_len);
                 for (index_t i = 0; i < s.q_len; ++i) {
                   const auto in = [&](index_t c) { return rows[c].begin <= i && i < rows[c].end; };
                   bool first = !in(0);
                   for (index_t c = 1; c < n; ++c) {
                     if (!in(c)) continue;
                     const T* p = parts + (c - 1) * per_part + (bh * s.q_len + i) * s.head_dim;
                     add_row(&out(i, 0), out.cs, p, s.head_dim, first);
                     first = false;
                   }
                   if (first) add_row<T>(&out(i, 0), out.cs, nullptr, s.head_dim, true);
                 }
               });
}

}  // namespace attn::cpu_detail
