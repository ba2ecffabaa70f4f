#pragma once
/// \file
/// Seed stage 3: the causal mask.

#include "attn/core/check.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/problem.hpp"

namespace attn {

/// Arguments of `causal_mask` and `causal_mask_backward`: s [B, H, Tq, Tk] in place, -inf
/// (forward) or 0 (`gradient`: backward) wherever `mask` hides a key
/// (attn/core/visibility.hpp).
template <class T, class Space = host_space>
struct mask_args {
  tensor_view<T, 4, Space> s;  ///< [B, H, Tq, Tk], in place
  mask_spec mask;              ///< which keys each query sees
  bool gradient = false;       ///< write 0 instead of -inf (the backward)

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return mask_args<T, S>{f(s), mask, gradient};
  }
};

/// In place: `s[b, h, i, j] = -inf` wherever `j > i + (Tk - Tq)` (bottom-right aligned, so
/// with Tq == Tk it is the seed's `j > i`); other entries are left as they are.
///
/// \param policy  attn::reference, attn::cpu (or a cpu_policy) or attn::cuda: the backend.
/// \param s  [B, H, Tq, Tk] scores.
/// \throws shape_error for a malformed view, before anything is written.
template <class Policy, class T, class Space>
void causal_mask(const Policy& policy, tensor_view<T, 4, Space> s) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"causal_mask"};
  c.output("s", s);
  detail::run(policy, mask_args<T, Space>{s, mask_spec{.causal = true}});
}

/// The gradient of `causal_mask`, in place: `ds[b, h, i, j] = 0` wherever the forward wrote
/// -inf; other entries pass through.
///
/// \param policy  attn::reference, attn::cpu (or a cpu_policy) or attn::cuda: the backend.
/// \param ds  [B, H, Tq, Tk] gradient of the masked scores in, of the scores out.
/// \throws shape_error for a malformed view, before anything is written.
template <class Policy, class T, class Space>
void causal_mask_backward(const Policy& policy, tensor_view<T, 4, Space> ds) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"causal_mask_backward"};
  c.output("ds", ds);
  detail::run(policy, mask_args<T, Space>{ds, mask_spec{.causal = true}, true});
}

}  // namespace attn
