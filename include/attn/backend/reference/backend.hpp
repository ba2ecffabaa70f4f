#pragma once
/// \file
/// The reference backend: plain loops accumulating in double. Slow on purpose and written to be
/// read; every other backend is tested against it. Arguments arrive already checked.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attn/core/numeric.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/tensor_view.hpp"
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
struct backend<reference_policy> {
  static constexpr double inf = std::numeric_limits<double>::infinity();

  /// y[n] = x w[n] + bias[n].
  template <class T>
  static void run(const reference_policy&, const projection_args<T>& a) {
    for (int n = 0; n < a.count; ++n) {
      const auto& w = a.w[n];
      const auto& y = a.y[n];
      const auto& bias = a.bias[n];
      if (w.extent(1) == 0) continue;  // E = 0: nothing to write (and w has no row to point at)
      std::vector<double> acc(static_cast<std::size_t>(w.extent(1)));
      for (index_t b = 0; b < y.extent(0); ++b)
        for (index_t t = 0; t < y.extent(1); ++t) {
          for (index_t e = 0; e < w.extent(1); ++e) acc[e] = bias.empty() ? 0.0 : double(bias(e));
          for (index_t c = 0; c < w.extent(0); ++c) {
            const double xc = a.x(b, t, c);
            const T* w_row = &w(c, 0);  // elements w_row[e * w.stride(1)]
            for (index_t e = 0; e < w.extent(1); ++e) acc[e] += xc * double(w_row[e * w.stride(1)]);
          }
          for (index_t e = 0; e < w.extent(1); ++e) y(b, t, e) = T(acc[e]);
        }
    }
  }

  /// s = scale * q k^T.
  template <class T>
  static void run(const reference_policy&, const scores_args<T>& a) {
    for_rows(a.s, [&](index_t b, index_t h, index_t i) {
      for (index_t j = 0; j < a.k.extent(2); ++j)
        a.s(b, h, i, j) = T(a.scale * dot(a.q, a.k, b, h, a.shape.kv_head(h), i, j));
    });
  }

  /// -inf (forward) or 0 (gradient) where the mask hides a key.
  template <class T>
  static void run(const reference_policy&, const mask_args<T>& a) {
    const visibility vis(a.mask, a.s.extent(2), a.s.extent(3));
    const T fill = a.gradient ? T(0) : -std::numeric_limits<T>::infinity();
    for_rows(a.s, [&](index_t b, index_t h, index_t i) {
      for (index_t j = 0; j < a.s.extent(3); ++j)
        if (!vis.visible(i, j)) a.s(b, h, i, j) = fill;
    });
  }

  /// Row softmax; -inf entries become 0 and a row of only -inf becomes zeros.
  template <class T>
  static void run(const reference_policy&, const softmax_args<T>& a) {
    std::vector<double> row(static_cast<std::size_t>(a.s.extent(3)));
    for_rows(a.s, [&](index_t b, index_t h, index_t i) {
      bool any = false;
      for (index_t j = 0; j < a.s.extent(3); ++j) {
        row[j] = a.s(b, h, i, j);
        any = any || row[j] != -inf;
      }
      softmax(row, any);
      for (index_t j = 0; j < a.s.extent(3); ++j) a.s(b, h, i, j) = T(any ? row[j] : 0.0);
    });
  }

  /// o = p v.
  template <class T>
  static void run(const reference_policy&, const weighted_values_args<T>& a) {
    std::vector<double> acc(static_cast<std::size_t>(a.o.extent(3)));
    for_rows(a.o, [&](index_t b, index_t h, index_t i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (index_t j = 0; j < a.v.extent(2); ++j)
        add_row(acc, double(a.p(b, h, i, j)), a.v, b, a.shape.kv_head(h), j);
      for (index_t d = 0; d < a.o.extent(3); ++d) a.o(b, h, i, d) = T(acc[d]);
    });
  }

  /// One query row at a time, over the keys it sees only: scores in double, softmax, weighted
  /// sum. Needs O(Tk) memory, never [Tq, Tk].
  template <class T>
  static void run(const reference_policy&, const attention_args<T>& a) {
    std::vector<double> row, acc(static_cast<std::size_t>(a.o.extent(3)));
    for_rows(a.o, [&](index_t b, index_t h, index_t i) {
      const index_t hk = a.shape.kv_head(h);
      const key_range keys = visibility(a.mask, a.shape.q_len, kv_length(a, b)).row(i);
      row.resize(static_cast<std::size_t>(keys.size()));
      for (index_t j = keys.begin; j < keys.end; ++j)
        row[j - keys.begin] = a.scale * dot(a.q, a.k, b, h, hk, i, j);
      const double lse = softmax(row, !keys.empty());
      std::fill(acc.begin(), acc.end(), 0.0);
      for (index_t j = keys.begin; j < keys.end; ++j)
        add_row(acc, row[j - keys.begin], a.v, b, hk, j);
      for (index_t d = 0; d < a.o.extent(3); ++d) a.o(b, h, i, d) = T(acc[d]);
      if (a.lse.data() != nullptr) a.lse(b, h, i) = accum_t<T>(lse);
    });
  }

  /// dx = sum_n dy[n] w[n]^T, dw[n] = sum_{b,t} x^T dy[n], db[n] = sum_{b,t} dy[n].
  template <class T>
  static void run(const reference_policy&, const projection_backward_args<T>& a) {
    const index_t B = a.x.extent(0), T_ = a.x.extent(1), C = a.x.extent(2);
    if (!a.dx.empty())
      for (index_t b = 0; b < B; ++b)
        for (index_t t = 0; t < T_; ++t)
          for (index_t c = 0; c < C; ++c) {
            double acc = 0;
            for (int n = 0; n < a.count; ++n)
              for (index_t e = 0; e < a.w[n].extent(1); ++e)
                acc += double(a.dy[n](b, t, e)) * double(a.w[n](c, e));
            a.dx(b, t, c) = T(acc);
          }
    for (int n = 0; n < a.count; ++n) {
      const index_t E = a.w[n].extent(1);
      if (!a.dw[n].empty())
        for (index_t c = 0; c < C; ++c)
          for (index_t e = 0; e < E; ++e) {
            double acc = 0;
            for (index_t b = 0; b < B; ++b)
              for (index_t t = 0; t < T_; ++t)
                acc += double(a.x(b, t, c)) * double(a.dy[n](b, t, e));
            a.dw[n](c, e) = T(acc);
          }
      if (!a.db[n].empty())
        for (index_t e = 0; e < E; ++e) {
          double acc = 0;
          for (index_t b = 0; b < B; ++b)
            for (index_t t = 0; t < T_; ++t) acc += double(a.dy[n](b, t, e));
          a.db[n](e) = T(acc);
        }
    }
  }

  /// dq = scale ds k, dk = scale sum over the group of ds^T q.
  template <class T>
  static void run(const reference_policy&, const scores_backward_args<T>& a) {
    const attention_shape& s = a.shape;
    if (!a.dq.empty())
      for_rows(a.dq, [&](index_t b, index_t h, index_t i) {
        for (index_t d = 0; d < s.head_dim; ++d) {
          double acc = 0;
          for (index_t j = 0; j < s.kv_len; ++j)
            acc += double(a.ds(b, h, i, j)) * double(a.k(b, s.kv_head(h), j, d));
          a.dq(b, h, i, d) = T(a.scale * acc);
        }
      });
    if (!a.dk.empty())
      for_rows(a.dk, [&](index_t b, index_t hk, index_t j) {
        for (index_t d = 0; d < s.head_dim; ++d) {
          double acc = 0;
          for (index_t h = hk * s.group(); h < (hk + 1) * s.group(); ++h)
            for (index_t i = 0; i < s.q_len; ++i)
              acc += double(a.ds(b, h, i, j)) * double(a.q(b, h, i, d));
          a.dk(b, hk, j, d) = T(a.scale * acc);
        }
      });
  }

  /// ds = p * (dp - rowsum(dp * p)), in place when ds is dp.
  template <class T>
  static void run(const reference_policy&, const softmax_backward_args<T>& a) {
    for_rows(a.ds, [&](index_t b, index_t h, index_t i) {
      double dot = 0;
      for (index_t j = 0; j < a.p.extent(3); ++j)
        dot += double(a.dp(b, h, i, j)) * double(a.p(b, h, i, j));
      for (index_t j = 0; j < a.p.extent(3); ++j)
        a.ds(b, h, i, j) = T(double(a.p(b, h, i, j)) * (double(a.dp(b, h, i, j)) - dot));
    });
  }

  /// dp = d_o v^T, dv = sum over the group of p^T d_o.
  template <class T>
  static void run(const reference_policy&, const weighted_values_backward_args<T>& a) {
    const attention_shape& s = a.shape;
    if (!a.dp.empty())
      for_rows(a.dp, [&](index_t b, index_t h, index_t i) {
        for (index_t j = 0; j < s.kv_len; ++j) {
          double acc = 0;
          for (index_t d = 0; d < s.value_dim; ++d)
            acc += double(a.d_o(b, h, i, d)) * double(a.v(b, s.kv_head(h), j, d));
          a.dp(b, h, i, j) = T(acc);
        }
      });
    if (!a.dv.empty())
      for_rows(a.dv, [&](index_t b, index_t hk, index_t j) {
        for (index_t d = 0; d < s.value_dim; ++d) {
          double acc = 0;
          for (index_t h = hk * s.group(); h < (hk + 1) * s.group(); ++h)
            for (index_t i = 0; i < s.q_len; ++i)
              acc += double(a.p(b, h, i, j)) * double(a.d_o(b, h, i, d));
          a.dv(b, hk, j, d) = T(acc);
        }
      });
  }

  /// The exact gradient of run(attention_args) row by row: P recomputed in double from the
  /// scores (not from the forward's lse), dP = d_o v^T, dS = P (dP - rowsum(P dP)), then
  /// dq = scale dS k, dk = scale dS^T q, dv = P^T d_o over the keys each row sees.
  template <class T>
  static void run(const reference_policy&, const attention_backward_args<T>& a) {
    const attention_shape& s = a.shape;
    const index_t D = s.head_dim, Dv = s.value_dim;
    std::vector<double> dk(std::size_t(s.batch * s.kv_heads * s.kv_len * D), 0.0),
        dv(std::size_t(s.batch * s.kv_heads * s.kv_len * Dv), 0.0), p, dp,
        dq(static_cast<std::size_t>(D));
    const auto at = [&](index_t b, index_t hk, index_t j, index_t n) {
      return std::size_t(((b * s.kv_heads + hk) * s.kv_len + j) * n);
    };
    for (index_t b = 0; b < s.batch; ++b)
      for (index_t h = 0; h < s.heads; ++h)
        for (index_t i = 0; i < s.q_len; ++i) {
          const index_t hk = s.kv_head(h);
          const key_range keys = visibility(a.mask, s.q_len, kv_length(a, b)).row(i);
          p.resize(std::size_t(keys.size()));
          dp.resize(p.size());
          for (index_t j = keys.begin; j < keys.end; ++j)
            p[j - keys.begin] = a.scale * dot(a.q, a.k, b, h, hk, i, j);
          softmax(p, !keys.empty());
          double row_dot = 0;
          for (index_t j = keys.begin; j < keys.end; ++j) {
            double acc = 0;
            for (index_t d = 0; d < Dv; ++d)
              acc += double(a.d_o(b, h, i, d)) * double(a.v(b, hk, j, d));
            dp[j - keys.begin] = acc;
            row_dot += acc * p[j - keys.begin];
          }
          std::fill(dq.begin(), dq.end(), 0.0);
          for (index_t j = keys.begin; j < keys.end; ++j) {
            const double pj = p[j - keys.begin], ds = a.scale * pj * (dp[j - keys.begin] - row_dot);
            for (index_t d = 0; d < D; ++d) {
              dq[d] += ds * double(a.k(b, hk, j, d));
              dk[at(b, hk, j, D) + d] += ds * double(a.q(b, h, i, d));
            }
            for (index_t d = 0; d < Dv; ++d)
              dv[at(b, hk, j, Dv) + d] += pj * double(a.d_o(b, h, i, d));
          }
          if (!a.dq.empty())
            for (index_t d = 0; d < D; ++d) a.dq(b, h, i, d) = T(dq[d]);
        }
    if (!a.dk.empty())
      for_rows(a.dk, [&](index_t b, index_t hk, index_t j) {
        for (index_t d = 0; d < D; ++d) a.dk(b, hk, j, d) = T(dk[at(b, hk, j, D) + d]);
      });
    if (!a.dv.empty())
      for_rows(a.dv, [&](index_t b, index_t hk, index_t j) {
        for (index_t d = 0; d < Dv; ++d) a.dv(b, hk, j, d) = T(dv[at(b, hk, j, Dv) + d]);
      });
  }

  /// o = w_a o_a + w_b o_b with the weights of the two log-sum-exps (see merge_attention).
  template <class T>
  static void run(const reference_policy&, const merge_args<T>& a) {
    for_rows(a.o, [&](index_t b, index_t h, index_t i) {
      const double la = a.lse_a(b, h, i), lb = a.lse_b(b, h, i);
      const double m = max_nan(la, lb);
      const double wa = m == -inf ? 0.0 : std::exp(la - m), wb = m == -inf ? 0.0 : std::exp(lb - m);
      // m is -inf only when neither side saw a key; a NaN on either side reaches the sum.
      const softmax_end<double> end = finish_softmax(m != -inf, m, wa + wb);
      for (index_t d = 0; d < a.o.extent(3); ++d) {
        const double x = (wa == 0 ? 0.0 : wa * double(a.o_a(b, h, i, d))) +
                         (wb == 0 ? 0.0 : wb * double(a.o_b(b, h, i, d)));
        a.o(b, h, i, d) = T(x * end.scale);
      }
      if (!a.lse.empty()) a.lse(b, h, i) = accum_t<T>(end.lse);
    });
  }

  template <class T>
  static void run(const reference_policy&, const copy_args<T>& a) {
    for (index_t i0 = 0; i0 < a.dst.extent(0); ++i0)
      for (index_t i1 = 0; i1 < a.dst.extent(1); ++i1)
        for (index_t i2 = 0; i2 < a.dst.extent(2); ++i2)
          for (index_t i3 = 0; i3 < a.dst.extent(3); ++i3)
            a.dst(i0, i1, i2, i3) = a.src(i0, i1, i2, i3);
  }

 private:
  /// Keys of batch row b: its length when lengths are given, else Tk.
  template <class Args>
  static index_t kv_length(const Args& a, index_t b) {
    return a.kv_lengths.empty() ? a.shape.kv_len : index_t(a.kv_lengths(b));
  }

  /// Calls f(b, h, i) for every row of a [B, H, T, *] view.
  template <class View, class F>
  static void for_rows(const View& s, F&& f) {
    for (index_t b = 0; b < s.extent(0); ++b)
      for (index_t h = 0; h < s.extent(1); ++h)
        for (index_t i = 0; i < s.extent(2); ++i) f(b, h, i);
  }

  /// q[b, h, i, :] . k[b, hk, j, :]
  template <class T>
  static double dot(tensor_view<const T, 4> q, tensor_view<const T, 4> k, index_t b, index_t h,
                    index_t hk, index_t i, index_t j) {
    const T* qi = &q(b, h, i, 0);  // row pointers: far less index math under the sanitizers
    const T* kj = &k(b, hk, j, 0);
    double acc = 0;
    for (index_t d = 0; d < q.extent(3); ++d)
      acc += double(qi[d * q.stride(3)]) * double(kj[d * k.stride(3)]);
    return acc;
  }

  /// acc += weight * v[b, hk, j, :]
  template <class T>
  static void add_row(std::vector<double>& acc, double weight, tensor_view<const T, 4> v, index_t b,
                      index_t hk, index_t j) {
    if (v.extent(3) == 0) return;
    const T* vj = &v(b, hk, j, 0);
    for (index_t d = 0; d < v.extent(3); ++d) acc[d] += weight * double(vj[d * v.stride(3)]);
  }

  /// Stable softmax of `row` in place; returns the log-sum-exp. The rule of
  /// attn/core/visibility.hpp's finish_softmax: no key gives -inf (and zeros), a NaN score
  /// gives NaN, all -inf scores give 0 / 0 = NaN probabilities with lse -inf.
  static double softmax(std::vector<double>& row, bool sees_a_key) {
    double m = -inf;
    for (double x : row) m = std::max(m, x);
    double sum = 0;
    for (double& x : row) sum += (x = std::exp(x - max_used(m)));
    const softmax_end<double> end = finish_softmax(sees_a_key, m, sum);
    for (double& x : row) x *= end.scale;
    return end.lse;
  }
};

}  // namespace attn
