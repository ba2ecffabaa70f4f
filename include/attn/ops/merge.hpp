#pragma once
/// \file
/// Combining two partial attention results over disjoint key sets: the building block of
/// split-KV decoding and of ring attention across devices.

#include <string>

#include "attn/core/check.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/policy.hpp"

namespace attn {

/// Arguments of `merge_attention`: o, lse from (o_a, lse_a) and (o_b, lse_b).
template <class T, class Space = host_space>
struct merge_args {
  /// [B, H, Tq, Dv] the two partial outputs.
  ///@{
  tensor_view<const T, 4, Space> o_a, o_b;
  ///@}
  /// [B, H, Tq] their log-sum-exps.
  ///@{
  tensor_view<const accum_t<T>, 3, Space> lse_a, lse_b;
  ///@}
  tensor_view<T, 4, Space> o;             ///< [B, H, Tq, Dv]
  tensor_view<accum_t<T>, 3, Space> lse;  ///< [B, H, Tq], or empty

  /// These arguments with each view replaced by f(view), a view of f's target_space.
  template <class F>
  auto map(F&& f) const {
    using S = typename std::remove_cvref_t<F>::target_space;
    return merge_args<T, S>{f(o_a), f(o_b), f(lse_a), f(lse_b), f(o), f(lse)};
  }
};

/// The attention over the union of two disjoint key sets from the attention over each:
/// with m = max(lse_a, lse_b), `lse = m + log(e^(lse_a - m) + e^(lse_b - m))` and
/// `o = e^(lse_a - lse) o_a + e^(lse_b - lse) o_b` per row, in accum_t<T>. A side whose lse is
/// -inf (it saw no key) contributes nothing; both -inf give zeros and -inf. o (and lse) may be
/// the very same views as o_a (lse_a) or o_b (lse_b): each row is read before it is written;
/// any other overlap between an output and an input is rejected.
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param o_a, o_b    [B, H, Tq, Dv] the partial outputs.
/// \param lse_a, lse_b  [B, H, Tq] their log-sum-exps.
/// \param o           [B, H, Tq, Dv] the merged output.
/// \param lse         [B, H, Tq] the merged log-sum-exp, or empty.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space>
void merge_attention(const Policy& policy, input_view<T, 4, Space> o_a,
                     input_view<accum_t<T>, 3, Space> lse_a, input_view<T, 4, Space> o_b,
                     input_view<accum_t<T>, 3, Space> lse_b, tensor_view<T, 4, Space> o,
                     output_view<accum_t<T>, 3, Space> lse = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"merge_attention"};
  c.view("o_a", o_a);
  c.view("o_b", o_b);
  c.view("lse_a", lse_a);
  c.view("lse_b", lse_b);
  c.output("o", o);
  for (int i = 0; i < 4; ++i) {
    const std::string axis = " extent " + std::to_string(i);
    c.same("o_b" + axis, o_b.extent(i), "o_a" + axis, o_a.extent(i));
    c.same("o" + axis, o.extent(i), "o_a" + axis, o_a.extent(i));
  }
  for (int i = 0; i < 3; ++i) {
    const std::string axis = " extent " + std::to_string(i);
    c.same("lse_a" + axis, lse_a.extent(i), "o_a" + axis, o_a.extent(i));
    c.same("lse_b" + axis, lse_b.extent(i), "o_a" + axis, o_a.extent(i));
  }
  if (detail::given(lse)) {
    c.output("lse", lse);
    for (int i = 0; i < 3; ++i)
      c.same("lse extent " + std::to_string(i), lse.extent(i), "o_a extent " + std::to_string(i),
             o_a.extent(i));
  }
  using detail::footprint_of;
  c.disjoint({footprint_of("o", o), footprint_of("lse", lse)},
             {footprint_of("o_a", o_a), footprint_of("lse_a", lse_a), footprint_of("o_b", o_b),
              footprint_of("lse_b", lse_b)},
             {{"o", "o_a"}, {"o", "o_b"}, {"lse", "lse_a"}, {"lse", "lse_b"}});
  detail::run(policy, merge_args<T, Space>{o_a, o_b, lse_a, lse_b, o, lse});
}

}  // namespace attn
