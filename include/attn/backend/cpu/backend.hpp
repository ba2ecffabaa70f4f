#pragma once
/// \file
/// The CPU backend: every stage on Eigen, split over (batch, head, row block) across the
/// worker pool, and the fused attention of flash.hpp. Arguments arrive already checked.

#include <algorithm>
#include <limits>

#include <Eigen/Core>

#include "attn/backend/cpu/eigen_map.hpp"
#include "attn/backend/cpu/flash.hpp"
#include "attn/backend/cpu/flash_backward.hpp"
#include "attn/backend/cpu/parallel.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/visibility.hpp"
#include "attn/ops/attention.hpp"
#include "attn/ops/copy.hpp"
#include "attn/ops/mask.hpp"
#include "attn/ops/merge.hpp"
#include "attn/ops/projection.hpp"
#include "attn/ops/scores.hpp"
#include "attn/ops/softmax.hpp"
#include "attn/ops/weighted_values.hpp"

namespace attn {

template <>
struct backend<cpu_policy> {
  /// Rows of the output per work item: large enough that each Eigen GEMM runs near its best
  /// (its packing of the right-hand side is amortised), fixed so that results do not depend
  /// on the thread count.
  static constexpr index_t block_rows = 256;

  /// y[n] = x w[n] + bias[n]: each block of x rows feeds all the products while it is in
  /// cache.
  template <class T>
  static void run(const cpu_policy& p, const projection_args<T>& a) {
    using cpu_detail::matrix;
    matrix<T> w_pack[3];
    std::vector<Eigen::Map<const matrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>> W;
    Eigen::Matrix<T, 1, Eigen::Dynamic> bias[3];
    double flops = 0;
    for (int n = 0; n < a.count; ++n) {
      W.push_back(cpu_detail::read(cpu_detail::whole(a.w[n]), w_pack[n]));
      flops += 2.0 * double(block_rows * a.w[n].extent(0) * a.w[n].extent(1));
      bias[n].resize(a.bias[n].extent(0));
      for (index_t e = 0; e < bias[n].size(); ++e) bias[n](e) = a.bias[n](e);
    }
    const index_t B = a.x.extent(0), rows = a.x.extent(1);
    const index_t blocks = (rows + block_rows - 1) / block_rows;
    cpu_detail::parallel_for(
        cpu_detail::worker_count(p, B * blocks, flops), B * blocks, [&](index_t item) {
          const index_t b = item / blocks, i0 = (item % blocks) * block_rows;
          const index_t r = std::min(block_rows, rows - i0);
          matrix<T> x_pack;
          if (a.x.extent(2) == 0) {  // C = 0: y = bias (x may be null)
            for (int n = 0; n < a.count; ++n)
              if (!a.y[n].empty())
                cpu_detail::write(cpu_detail::rows_of(a.y[n], b, i0, r), [&](auto Y) {
                  Y.setZero();
                  if (bias[n].size() > 0) Y.rowwise() += bias[n];
                });
            return;
          }
          const auto X = cpu_detail::read(cpu_detail::rows_of(a.x, b, i0, r), x_pack);
          for (int n = 0; n < a.count; ++n)
            if (!a.y[n].empty())
              cpu_detail::write(cpu_detail::rows_of(a.y[n], b, i0, r), [&](auto Y) {
                Y.noalias() = X * W[n];
                if (bias[n].size() > 0) Y.rowwise() += bias[n];
              });
        });
  }

  template <class T>
  static void run(const cpu_policy& p, const scores_args<T>& a) {
    gemm_rows<true>(p, a.q, a.k, a.s, a.shape, T(a.scale));
  }

  template <class T>
  static void run(const cpu_policy& p, const mask_args<T>& a) {
    const visibility vis(a.mask, a.s.extent(2), a.s.extent(3));
    const T fill = a.gradient ? T(0) : -std::numeric_limits<T>::infinity();
    for_row_blocks(p, a.s, double(a.s.extent(3)),
                   [&](index_t b, index_t h, index_t i0, index_t rows) {
                     const auto S = cpu_detail::rows_of(a.s, b, h, i0, rows);
                     for (index_t r = 0; r < rows; ++r) {
                       const key_range keys = vis.row(i0 + r);
                       for (index_t c = 0; c < S.cols; ++c)
                         if (c < keys.begin || c >= keys.end) S(r, c) = fill;
                     }
                   });
  }

  /// Each row goes through an aligned per-thread copy, so Eigen's vectorised exp and sum see
  /// the same alignment whatever the caller's buffer: results are bit-identical across
  /// buffers, strides and thread counts.
  template <class T>
  static void run(const cpu_policy& p, const softmax_args<T>& a) {
    using row_map = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>, Eigen::Aligned64>;
    constexpr T inf = std::numeric_limits<T>::infinity();
    for_row_blocks(p, a.s, 8.0 * double(a.s.extent(3)),
                   [&](index_t b, index_t h, index_t i0, index_t rows) {
                     const auto S = cpu_detail::rows_of(a.s, b, h, i0, rows);
                     if (S.cols == 0) return;
                     row_map row(cpu_detail::thread_scratch<T>(std::size_t(S.cols)), S.cols);
                     for (index_t r = 0; r < rows; ++r) {
                       bool any = false;
                       for (index_t c = 0; c < S.cols; ++c) {
                         row[c] = S(r, c);
                         any = any || row[c] != -inf;
                       }
                       if (!any) {  // every entry masked: zeros, not NaN
                         row.setZero();
                       } else {
                         // Eigen's maxCoeff skips NaN; exp(NaN - m) brings it back.
                         row = (row - max_used(row.maxCoeff())).exp();
                         for (index_t c = 0; c < S.cols; ++c)  // Eigen's exp clamps: exp(-inf) > 0
                           if (S(r, c) == -inf) row[c] = T(0);
                         row *= T(1) / row.sum();
                       }
                       for (index_t c = 0; c < S.cols; ++c) S(r, c) = row[c];
                     }
                   });
  }

  template <class T>
  static void run(const cpu_policy& p, const weighted_values_args<T>& a) {
    gemm_rows<false>(p, a.p, a.v, a.o, a.shape, T(1));
  }

  template <class T>
  static void run(const cpu_policy& p, const attention_args<T>& a) {
    cpu_detail::flash_attention<T>(p, a);
  }

  /// dx = sum_n dy[n] w[n]^T by blocks of rows; dw[n] = sum_b x_b^T dy[n]_b by blocks of C
  /// (batches added in order); db[n] by columns: every element summed in one fixed order.
  template <class T>
  static void run(const cpu_policy& p, const projection_backward_args<T>& a) {
    using cpu_detail::matrix;
    const index_t B = a.x.extent(0), rows = a.x.extent(1), C = a.x.extent(2);
    matrix<T> w_pack[3];
    std::vector<Eigen::Map<const matrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>> W;
    double flops = 0;
    for (int n = 0; n < a.count; ++n) {
      W.push_back(cpu_detail::read(cpu_detail::whole(a.w[n]), w_pack[n]));
      flops += 2.0 * double(block_rows * C * a.w[n].extent(1));
    }
    const index_t blocks = (rows + block_rows - 1) / block_rows;
    if (!a.dx.empty())
      cpu_detail::parallel_for(
          cpu_detail::worker_count(p, B * blocks, flops), B * blocks, [&](index_t item) {
            const index_t b = item / blocks, i0 = (item % blocks) * block_rows;
            const index_t r = std::min(block_rows, rows - i0);
            cpu_detail::write(cpu_detail::rows_of(a.dx, b, i0, r), [&](auto DX) {
              DX.setZero();
              for (int n = 0; n < a.count; ++n) {
                if (a.w[n].extent(1) == 0) continue;
                matrix<T> dy_pack;
                const auto DY = cpu_detail::read(cpu_detail::rows_of(a.dy[n], b, i0, r), dy_pack);
                DX.noalias() += DY * W[n].transpose();
              }
            });
          });
    for (int n = 0; n < a.count; ++n) {
      const index_t E = a.w[n].extent(1);
      if (!a.dw[n].empty()) {
        const index_t c_blocks = (C + 63) / 64;
        cpu_detail::parallel_for(
            cpu_detail::worker_count(p, c_blocks, 2.0 * 64 * double(B * rows * E)), c_blocks,
            [&](index_t cb) {
              const index_t c0 = cb * 64, cn = std::min<index_t>(64, C - c0);
              matrix<T> acc = matrix<T>::Zero(cn, E), x_pack, dy_pack;
              for (index_t b = 0; b < B; ++b)
                for (index_t i0 = 0; i0 < rows; i0 += block_rows) {
                  const index_t r = std::min(block_rows, rows - i0);
                  const auto X = cpu_detail::read(cpu_detail::rows_of(a.x, b, i0, r), x_pack);
                  const auto DY = cpu_detail::read(cpu_detail::rows_of(a.dy[n], b, i0, r), dy_pack);
                  acc.noalias() += X.middleCols(c0, cn).transpose() * DY;
                }
              for (index_t c = 0; c < cn; ++c)
                for (index_t e = 0; e < E; ++e) a.dw[n](c0 + c, e) = acc(c, e);
            });
      }
      if (!a.db[n].empty())
        for (index_t e = 0; e < E; ++e) {
          T acc = 0;
          for (index_t b = 0; b < B; ++b)
            for (index_t t = 0; t < rows; ++t) acc += a.dy[n](b, t, e);
          a.db[n](e) = acc;
        }
    }
  }

  /// dq = scale ds k by blocks of query rows; dk = scale sum over the group of ds^T q by
  /// blocks of key rows (query heads added in order).
  template <class T>
  static void run(const cpu_policy& p, const scores_backward_args<T>& a) {
    if (!a.dq.empty()) gemm_rows<false>(p, a.ds, a.k, a.dq, a.shape, T(a.scale));
    if (!a.dk.empty()) gemm_transposed_sum(p, a.ds, a.q, a.dk, a.shape, T(a.scale));
  }

  /// ds = p * (dp - rowsum(dp * p)); the row sum is taken before ds is written (ds may be dp).
  template <class T>
  static void run(const cpu_policy& pol, const softmax_backward_args<T>& a) {
    for_row_blocks(pol, a.ds, 4.0 * double(a.ds.extent(3)),
                   [&](index_t b, index_t h, index_t i0, index_t rows) {
                     const auto P = cpu_detail::rows_of(a.p, b, h, i0, rows);
                     const auto dP = cpu_detail::rows_of(a.dp, b, h, i0, rows);
                     const auto dS = cpu_detail::rows_of(a.ds, b, h, i0, rows);
                     for (index_t r = 0; r < rows; ++r) {
                       T dot = 0;
                       for (index_t c = 0; c < P.cols; ++c) dot += dP(r, c) * P(r, c);
                       for (index_t c = 0; c < P.cols; ++c) dS(r, c) = P(r, c) * (dP(r, c) - dot);
                     }
                   });
  }

  /// dp = d_o v^T by blocks of query rows; dv = sum over the group of p^T d_o by blocks of key
  /// rows.
  template <class T>
  static void run(const cpu_policy& p, const weighted_values_backward_args<T>& a) {
    if (!a.dp.empty()) gemm_rows<true>(p, a.d_o, a.v, a.dp, a.shape, T(1));
    if (!a.dv.empty()) gemm_transposed_sum(p, a.p, a.d_o, a.dv, a.shape, T(1));
  }

  template <class T>
  static void run(const cpu_policy& p, const attention_backward_args<T>& a) {
    cpu_detail::flash_attention_backward<T>(p, a);
  }

  /// o = w_a o_a + w_b o_b (see merge_attention), by blocks of rows; each row is read before
  /// it is written, so o may be o_a or o_b.
  template <class T>
  static void run(const cpu_policy& p, const merge_args<T>& a) {
    using A = accum_t<T>;
    constexpr A inf = std::numeric_limits<A>::infinity();
    // Over lse's rows: with Dv = 0 the lse is still merged.
    for_row_blocks(p, a.o.extent(0), a.o.extent(1), a.o.extent(2), 4.0 * double(a.o.extent(3)),
                   [&](index_t b, index_t h, index_t i0, index_t rows) {
                     for (index_t i = i0; i < i0 + rows; ++i) {
                       const A la = a.lse_a(b, h, i), lb = a.lse_b(b, h, i);
                       const A m = max_nan(la, lb);
                       const A wa = m == -inf ? A(0) : std::exp(la - m);
                       const A wb = m == -inf ? A(0) : std::exp(lb - m);
                       // -inf only when neither side saw a key; a NaN reaches the sum.
                       const softmax_end<A> end = finish_softmax(m != -inf, m, wa + wb);
                       for (index_t d = 0; d < a.o.extent(3); ++d) {
                         const A x = (wa == 0 ? A(0) : wa * A(a.o_a(b, h, i, d))) +
                                     (wb == 0 ? A(0) : wb * A(a.o_b(b, h, i, d)));
                         a.o(b, h, i, d) = T(x * end.scale);
                       }
                       if (!a.lse.empty()) a.lse(b, h, i) = end.lse;
                     }
                   });
  }

  template <class T>
  static void run(const cpu_policy&, const copy_args<T>& a) {
    if (a.dst.empty()) return;
    for (index_t i0 = 0; i0 < a.dst.extent(0); ++i0)
      for (index_t i1 = 0; i1 < a.dst.extent(1); ++i1)
        for (index_t i2 = 0; i2 < a.dst.extent(2); ++i2) {
          const T* s = &a.src(i0, i1, i2, 0);
          T* d = &a.dst(i0, i1, i2, 0);
          for (index_t i3 = 0; i3 < a.dst.extent(3); ++i3)
            d[i3 * a.dst.stride(3)] = s[i3 * a.src.stride(3)];
        }
  }

 private:
  /// c[b, hk] = alpha * sum over the query heads h of group hk of a[b, h]^T m[b, h], by blocks
  /// of rows of c (a [Tq, N] and m [Tq, E] per head; c [N, E] per key head).
  template <class T>
  static void gemm_transposed_sum(const cpu_policy& p, tensor_view<const T, 4> a,
                                  tensor_view<const T, 4> m, tensor_view<T, 4> c,
                                  const attention_shape& shape, T alpha) {
    const index_t G = shape.group(), Tq = a.extent(2);
    for_row_blocks(
        p, c, 2.0 * double(G * Tq * m.extent(3)),
        [&](index_t b, index_t hk, index_t j0, index_t rows) {
          cpu_detail::write(cpu_detail::rows_of(c, b, hk, j0, rows), [&](auto C) {
            C.setZero();
            if (Tq == 0) return;
            cpu_detail::matrix<T> a_pack, m_pack;
            for (index_t g = 0; g < G; ++g) {
              const index_t h = hk * G + g;
              const auto A = cpu_detail::read(cpu_detail::rows_of(a, b, h, 0, Tq), a_pack);
              const auto M = cpu_detail::read(cpu_detail::rows_of(m, b, h, 0, Tq), m_pack);
              C.noalias() += alpha * A.middleCols(j0, rows).transpose() * M;
            }
          });
        });
  }

  /// c[b, h] = alpha * a[b, h] * op(m[b, h / group]) for every (batch, head), by blocks of
  /// rows of a and c; op transposes when `TransposeM` (scores: Q K^T) and is the identity
  /// otherwise (weighted values: P V).
  template <bool TransposeM, class T>
  static void gemm_rows(const cpu_policy& p, tensor_view<const T, 4> a, tensor_view<const T, 4> m,
                        tensor_view<T, 4> c, const attention_shape& shape, T alpha) {
    for_row_blocks(
        p, c, 2.0 * double(m.extent(2) * m.extent(3)),
        [&](index_t b, index_t h, index_t i0, index_t rows) {
          if (a.extent(3) == 0) {  // an empty inner dimension: zeros
            cpu_detail::write(cpu_detail::rows_of(c, b, h, i0, rows), [](auto C) { C.setZero(); });
            return;
          }
          cpu_detail::matrix<T> a_pack, m_pack;
          const auto A = cpu_detail::read(cpu_detail::rows_of(a, b, h, i0, rows), a_pack);
          const auto M =
              cpu_detail::read(cpu_detail::rows_of(m, b, shape.kv_head(h), 0, m.extent(2)), m_pack);
          cpu_detail::write(cpu_detail::rows_of(c, b, h, i0, rows), [&](auto C) {
            if constexpr (TransposeM)
              C.noalias() = alpha * A * M.transpose();
            else
              C.noalias() = alpha * A * M;
          });
        });
  }

  /// Calls f(b, h, i0, rows) for blocks of `block_rows` rows of a [B, H, T, *] view, in
  /// parallel (nothing for an empty view); `flops_per_row` sizes the thread count.
  template <class T, class F>
  static void for_row_blocks(const cpu_policy& p, const tensor_view<T, 4>& s, double flops_per_row,
                             F&& f) {
    if (s.empty()) return;
    for_row_blocks(p, s.extent(0), s.extent(1), s.extent(2), flops_per_row, f);
  }

  /// The same over B x H x rows rows, however long (even empty) each row is.
  template <class F>
  static void for_row_blocks(const cpu_policy& p, index_t B, index_t H, index_t rows,
                             double flops_per_row, F&& f) {
    if (B == 0 || H == 0 || rows == 0) return;
    const index_t blocks = (rows + block_rows - 1) / block_rows;
    const int workers = cpu_detail::worker_count(p, B * H * blocks, flops_per_row * block_rows);
    cpu_detail::parallel_for(workers, B * H * blocks, [&](index_t item) {
      const index_t bh = item / blocks, i0 = (item % blocks) * block_rows;
      f(bh / H, bh % H, i0, std::min(block_rows, rows - i0));
    });
  }
};

}  // namespace attn
