#pragma once
/// \file
/// Options of the fused attention, named like PyTorch's scaled_dot_product_attention.

#include <optional>

namespace attn {

/// Options of `attention` and `multi_head_attention`.
struct attention_options {
  /// Hide future keys. With Tq queries and Tk keys the mask is aligned bottom-right:
  /// query i sees keys j <= i + (Tk - Tq), so the last query sees every key. Rows that see
  /// no key (i < Tq - Tk) give zeros and a log-sum-exp of -inf.
  bool causal = false;
  /// Multiplier of Q K^T; default 1/sqrt(D).
  std::optional<double> scale{};
};

}  // namespace attn
