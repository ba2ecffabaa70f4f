#pragma once
/// \file
/// CPU flash attention: for each (batch, head, query block), walk the key blocks with an online
/// softmax. Blocks entirely above the causal diagonal are never visited; only blocks that the
/// diagonal crosses are masked. Memory per worker: one [BQ, BK] score tile and one [BQ, Dv]
/// accumulator.

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "attn/backend/cpu/eigen_map.hpp"
#include "attn/backend/cpu/parallel.hpp"
#include "attn/backend/cpu/simd/flash_simd.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/policy.hpp"

namespace attn::cpu_detail {

inline constexpr index_t flash_block_q = 64;  ///< query rows per work item
inline constexpr index_t flash_block_k = 64;  ///< keys per inner step

/// Rows [i0, i0 + rows) of o[b, h] (and lse[b, h]) from q, k, v; `offset` = Tk - Tq.
template <class T>
void flash_query_block(tensor_view<const T, 4> q, tensor_view<const T, 4> k,
                       tensor_view<const T, 4> v, tensor_view<T, 4> o,
                       tensor_view<accum_t<T>, 3> lse, bool causal, T scale, index_t b, index_t h,
                       index_t i0, index_t rows) {
  using array = Eigen::Array<T, Eigen::Dynamic, 1>;
  constexpr T inf = std::numeric_limits<T>::infinity();
  const index_t Tk = k.extent(2), Dv = v.extent(3), offset = Tk - q.extent(2);
  // Keys visible to the block's last row; all later key blocks are skipped.
  const index_t k_end = causal ? std::clamp<index_t>(i0 + rows + offset, 0, Tk) : Tk;

  matrix<T> q_pack, k_pack, v_pack;
  const auto Q = read(rows_of(q, b, h, i0, rows), q_pack);  // (rows, D)
  matrix<T> S(rows, flash_block_k);                         // (rows, BK) scores, then P
  matrix<T> O = matrix<T>::Zero(rows, Dv);                  // (rows, Dv) unnormalised output
  array m = array::Constant(rows, -inf);                    // running row max
  array l = array::Zero(rows);                              // running row sum of exp(s - m)

  for (index_t j0 = 0; j0 < k_end; j0 += flash_block_k) {
    const index_t cols = std::min(flash_block_k, k_end - j0);
    const auto K = read(rows_of(k, b, h, j0, cols), k_pack);  // (cols, D)
    const auto V = read(rows_of(v, b, h, j0, cols), v_pack);  // (cols, Dv)
    auto Sb = S.leftCols(cols);
    Sb.noalias() = scale * Q * K.transpose();
    // Row r sees the block's first `visible(r)` keys (all of them unless the diagonal crosses).
    const bool diagonal = causal && j0 + cols - 1 > i0 + offset;
    const auto visible = [&](index_t r) {
      return diagonal ? std::clamp<index_t>(i0 + r + offset + 1 - j0, 0, cols) : cols;
    };
    for (index_t r = 0; r < rows; ++r) {
      const index_t n = visible(r);
      const T m_new = n > 0 ? std::max(m(r), Sb.row(r).head(n).maxCoeff()) : m(r);
      if (m_new == -inf) {  // nothing visible yet in this row
        Sb.row(r).setZero();
        continue;
      }
      const T alpha = std::exp(m(r) - m_new);  // 0 on the first visible block
      // Masked keys get exactly 0 (Eigen's exp would turn -inf into a denormal, and those
      // make the P V product crawl through microcode assists).
      Sb.row(r).head(n) = (Sb.row(r).head(n).array() - m_new).exp();
      Sb.row(r).tail(cols - n).setZero();
      l(r) = alpha * l(r) + Sb.row(r).sum();
      O.row(r) *= alpha;
      m(r) = m_new;
    }
    O.noalias() += Sb * V;
  }

  write(rows_of(o, b, h, i0, rows), [&](auto out) {
    for (index_t r = 0; r < rows; ++r) {
      if (l(r) > 0)
        out.row(r) = O.row(r) / l(r);
      else
        out.row(r).setZero();
    }
  });
  if (lse.data() != nullptr)
    for (index_t r = 0; r < rows; ++r)
      lse(b, h, i0 + r) = l(r) > 0 ? accum_t<T>(m(r) + std::log(l(r))) : -accum_t<T>(inf);
}

/// The fused attention over all (batch, head, query block) items: the SIMD kernel of
/// simd/flash_simd.hpp for float where it applies, else Eigen blocks.
template <class T>
void flash_attention(const cpu_policy& policy, tensor_view<const T, 4> q, tensor_view<const T, 4> k,
                     tensor_view<const T, 4> v, tensor_view<T, 4> o, tensor_view<accum_t<T>, 3> lse,
                     bool causal, double scale) {
  if constexpr (std::is_same_v<T, float>)
    if (flash_attention_simd(policy, q, k, v, o, lse, causal, scale)) return;
  const index_t B = q.extent(0), H = q.extent(1), Tq = q.extent(2);
  const index_t blocks = (Tq + flash_block_q - 1) / flash_block_q;
  const double flops =
      4.0 * double(flash_block_q) * double(k.extent(2)) * double(q.extent(3) + v.extent(3)) / 2;
  // Head by head (K and V stay in cache), largest (causal: last) query blocks first.
  parallel_for(worker_count(policy, B * H * blocks, flops), B * H * blocks, [&](index_t item) {
    const index_t bh = item / blocks, blk = blocks - 1 - item % blocks;
    const index_t i0 = blk * flash_block_q;
    flash_query_block<T>(q, k, v, o, lse, causal, T(scale), bh / H, bh % H, i0,
                         std::min(flash_block_q, Tq - i0));
  });
}

}  // namespace attn::cpu_detail
