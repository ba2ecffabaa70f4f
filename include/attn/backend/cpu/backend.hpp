#pragma once
/// \file
/// The CPU backend: every stage on Eigen, split over (batch, head, row block) across threads,
/// and the blocked flash attention of flash.hpp. Arguments arrive already checked.

#include <algorithm>
#include <limits>
#include <span>

#include <Eigen/Core>

#include "attn/backend/cpu/eigen_map.hpp"
#include "attn/backend/cpu/flash.hpp"
#include "attn/backend/cpu/parallel.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/policy.hpp"

namespace attn {

template <>
struct backend<cpu_policy> {
  /// Rows of the output per work item: large enough that each Eigen GEMM runs near its best
  /// (its packing of the right-hand side is amortised), fixed so that results do not depend
  /// on the thread count.
  static constexpr index_t block_rows = 256;

  template <class T>
  static void project(const cpu_policy& p, input_view<T, 3> x, input_view<T, 2> w,
                      std::span<const T> bias, tensor_view<T, 3> y) {
    const input_view<T, 2> ws[] = {w};
    const std::span<const T> bs[] = {bias};
    tensor_view<T, 3> ys[] = {y};
    projections<T>(p, x, ws, bs, ys);
  }

  /// Q, K and V from one pass over x: each block of x rows feeds all three products while it
  /// is in cache.
  template <class T>
  static void project_qkv(const cpu_policy& p, input_view<T, 3> x, input_view<T, 2> w_q,
                          input_view<T, 2> w_k, input_view<T, 2> w_v, std::span<const T> b_q,
                          std::span<const T> b_k, std::span<const T> b_v, tensor_view<T, 3> q,
                          tensor_view<T, 3> k, tensor_view<T, 3> v) {
    const input_view<T, 2> ws[] = {w_q, w_k, w_v};
    const std::span<const T> bs[] = {b_q, b_k, b_v};
    tensor_view<T, 3> ys[] = {q, k, v};
    projections<T>(p, x, ws, bs, ys);
  }

  template <class T>
  static void scaled_scores(const cpu_policy& p, input_view<T, 4> q, input_view<T, 4> k,
                            tensor_view<T, 4> s, double scale) {
    gemm_rows<true>(p, q, k, s, T(scale));
  }

  template <class T>
  static void causal_mask(const cpu_policy& p, tensor_view<T, 4> s) {
    const index_t offset = s.extent(3) - s.extent(2);
    for_row_blocks(p, s, double(s.extent(3)), [&](index_t b, index_t h, index_t i0, index_t rows) {
      const auto S = cpu_detail::rows_of(s, b, h, i0, rows);
      for (index_t r = 0; r < rows; ++r)
        for (index_t c = std::max<index_t>(0, i0 + r + offset + 1); c < S.cols; ++c)
          S(r, c) = -std::numeric_limits<T>::infinity();
    });
  }

  /// Each row goes through an aligned per-thread copy, so Eigen's vectorised exp and sum see
  /// the same alignment whatever the caller's buffer: results are bit-identical across
  /// buffers, strides and thread counts.
  template <class T>
  static void softmax_rows(const cpu_policy& p, tensor_view<T, 4> s) {
    using row_map = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>, Eigen::Aligned64>;
    constexpr T inf = std::numeric_limits<T>::infinity();
    for_row_blocks(p, s, 8.0 * double(s.extent(3)),
                   [&](index_t b, index_t h, index_t i0, index_t rows) {
                     const auto S = cpu_detail::rows_of(s, b, h, i0, rows);
                     if (S.cols == 0) return;
                     row_map row(cpu_detail::thread_scratch<T>(std::size_t(S.cols)), S.cols);
                     for (index_t r = 0; r < rows; ++r) {
                       for (index_t c = 0; c < S.cols; ++c) row[c] = S(r, c);
                       const T m = row.maxCoeff();
                       if (m == -inf) {  // nothing visible: zeros, not NaN
                         row.setZero();
                       } else {
                         row = (row - m).exp();
                         for (index_t c = 0; c < S.cols; ++c)  // Eigen's exp clamps: exp(-inf) > 0
                           if (S(r, c) == -inf) row[c] = T(0);
                         row *= T(1) / row.sum();
                       }
                       for (index_t c = 0; c < S.cols; ++c) S(r, c) = row[c];
                     }
                   });
  }

  template <class T>
  static void weighted_values(const cpu_policy& p, input_view<T, 4> pm, input_view<T, 4> v,
                              tensor_view<T, 4> o) {
    gemm_rows<false>(p, pm, v, o, T(1));
  }

  template <class T>
  static void attention(const cpu_policy& p, input_view<T, 4> q, input_view<T, 4> k,
                        input_view<T, 4> v, tensor_view<T, 4> o, tensor_view<accum_t<T>, 3> lse,
                        bool causal, double scale) {
    cpu_detail::flash_attention<T>(p, q, k, v, o, lse, causal, scale);
  }

 private:
  /// c[b, h] = alpha * a[b, h] * op(m[b, h]) for every (batch, head), by blocks of rows of a
  /// and c; op transposes when `TransposeM` (scores: Q K^T) and is the identity otherwise
  /// (weighted values: P V).
  template <bool TransposeM, class T>
  static void gemm_rows(const cpu_policy& p, input_view<T, 4> a, input_view<T, 4> m,
                        tensor_view<T, 4> c, T alpha) {
    for_row_blocks(
        p, c, 2.0 * double(m.extent(2) * m.extent(3)),
        [&](index_t b, index_t h, index_t i0, index_t rows) {
          cpu_detail::matrix<T> a_pack, m_pack;
          const auto A = cpu_detail::read(cpu_detail::rows_of(a, b, h, i0, rows), a_pack);
          const auto M = cpu_detail::read(cpu_detail::rows_of(m, b, h, 0, m.extent(2)), m_pack);
          cpu_detail::write(cpu_detail::rows_of(c, b, h, i0, rows), [&](auto C) {
            if constexpr (TransposeM)
              C.noalias() = alpha * A * M.transpose();
            else
              C.noalias() = alpha * A * M;
          });
        });
  }

  /// Calls f(b, h, i0, rows) for blocks of `block_rows` rows of a [B, H, T, *] view, in
  /// parallel; `flops_per_row` sizes the thread count.
  template <class T, class F>
  static void for_row_blocks(const cpu_policy& p, const tensor_view<T, 4>& s, double flops_per_row,
                             F&& f) {
    const index_t B = s.extent(0), H = s.extent(1), rows = s.extent(2);
    const index_t blocks = (rows + block_rows - 1) / block_rows;
    const int workers = cpu_detail::worker_count(p, B * H * blocks, flops_per_row * block_rows);
    cpu_detail::parallel_for(workers, B * H * blocks, [&](index_t item) {
      const index_t bh = item / blocks, i0 = (item % blocks) * block_rows;
      f(bh / H, bh % H, i0, std::min(block_rows, rows - i0));
    });
  }

  /// ys[n] = x ws[n] + bs[n] for every n, one block of x rows at a time.
  template <class T, std::size_t N>
  static void projections(const cpu_policy& p, input_view<T, 3> x, const input_view<T, 2> (&ws)[N],
                          const std::span<const T> (&bs)[N], tensor_view<T, 3> (&ys)[N]) {
    using cpu_detail::matrix;
    matrix<T> w_pack[N];
    std::vector<Eigen::Map<const matrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>> W;
    for (std::size_t n = 0; n < N; ++n)
      W.push_back(cpu_detail::read(cpu_detail::whole(ws[n]), w_pack[n]));
    const index_t B = x.extent(0), rows = x.extent(1);
    const index_t blocks = (rows + block_rows - 1) / block_rows;
    const double flops = 2.0 * double(block_rows * x.extent(2) * ws[0].extent(1) * index_t(N));
    cpu_detail::parallel_for(
        cpu_detail::worker_count(p, B * blocks, flops), B * blocks, [&](index_t item) {
          const index_t b = item / blocks, i0 = (item % blocks) * block_rows;
          const index_t r = std::min(block_rows, rows - i0);
          matrix<T> x_pack;
          const auto X = cpu_detail::read(cpu_detail::rows_of(x, b, i0, r), x_pack);
          for (std::size_t n = 0; n < N; ++n)
            cpu_detail::write(cpu_detail::rows_of(ys[n], b, i0, r), [&](auto Y) {
              Y.noalias() = X * W[n];
              if (!bs[n].empty())
                Y.rowwise() +=
                    Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(bs[n].data(), Y.cols());
            });
        });
  }
};

}  // namespace attn
