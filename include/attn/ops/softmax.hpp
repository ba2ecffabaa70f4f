#pragma once
/// \file
/// Seed stage 4: the stable row softmax.

#include <string>

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"

namespace attn {

/// Arguments of `softmax_rows`: s [B, H, Tq, Tk] in place.
template <class T, class Space = host_space>
struct softmax_args {
  tensor_view<T, 4, Space> s;  ///< [B, H, Tq, Tk], in place

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return softmax_args<T, S>{f(s)};
  }
};

/// Arguments of `softmax_rows_backward`: ds = p * (dp - rowsum(dp * p)); ds may be dp.
template <class T, class Space = host_space>
struct softmax_backward_args {
  /// [B, H, Tq, Tk] each: the forward's probabilities and their gradient.
  ///@{
  tensor_view<const T, 4, Space> p, dp;
  ///@}
  tensor_view<T, 4, Space> ds;  ///< [B, H, Tq, Tk]

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return softmax_backward_args<T, S>{f(p), f(dp), f(ds)};
  }
};

/// In place, for every row: `s[.., i, j] = exp(s[.., i, j] - m) / sum_j exp(s[.., i, j] - m)`
/// with `m` the row maximum. Entries of -inf (masked) become exactly 0, and a row of only
/// -inf becomes all zeros (never NaN). A NaN in a row makes that row NaN.
///
/// \param policy  attn::reference, attn::cpu (or a cpu_policy) or attn::cuda: the backend.
/// \param s  [B, H, Tq, Tk] scores in, probabilities out.
/// \throws shape_error for a malformed view, before anything is written.
template <class Policy, class T, class Space>
void softmax_rows(const Policy& policy, tensor_view<T, 4, Space> s) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"softmax_rows"};
  c.output("s", s);
  detail::run(policy, softmax_args<T, Space>{s});
}

/// The gradient of `softmax_rows` from dp = dLoss/dp and the forward's probabilities p:
/// `ds[.., i, j] = p[.., i, j] * (dp[.., i, j] - sum_k dp[.., i, k] p[.., i, k])`. ds may be the
/// same view as dp (in place; no other overlap with p or dp is allowed); written, not
/// accumulated.
///
/// \param policy  attn::reference, attn::cpu (or a cpu_policy) or attn::cuda: the backend.
/// \param p   [B, H, Tq, Tk] the forward's output.
/// \param dp  [B, H, Tq, Tk] gradient of the probabilities.
/// \param ds  [B, H, Tq, Tk] gradient of the scores.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class G, class Space, class T = std::remove_const_t<G>>
void softmax_rows_backward(const Policy& policy, input_view<T, 4, Space> p,
                           tensor_view<G, 4, Space> dp, output_view<T, 4, Space> ds) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"softmax_rows_backward"};
  c.view("p", p);
  c.view("dp", dp);
  c.output("ds", ds);
  for (int i = 0; i < 4; ++i) {
    const std::string axis = " extent " + std::to_string(i);
    c.same("dp" + axis, dp.extent(i), "p" + axis, p.extent(i));
    c.same("ds" + axis, ds.extent(i), "p" + axis, p.extent(i));
  }
  using detail::footprint_of;
  c.disjoint({footprint_of("ds", ds)}, {footprint_of("p", p), footprint_of("dp", dp)},
             {{"ds", "dp"}});
  detail::run(policy, softmax_backward_args<T, Space>{p, dp, ds});
}

}  // namespace attn
