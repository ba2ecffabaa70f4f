#pragma once
/// \file
/// Options of the fused attention, named like PyTorch's scaled_dot_product_attention.

#include <optional>

#include "attn/core/config.hpp"

namespace attn {

/// Options of `attention` and `multi_head_attention`. Which keys a query sees is decided by
/// attn/core/visibility.hpp, the one rule every backend follows.
struct attention_options {
  /// Hide future keys. With Tq queries and Tk keys the mask is aligned bottom-right: query i
  /// sits at position i' = i + (Tk - Tq) and sees keys j <= i', so the last query sees every
  /// key. Rows that see no key (i < Tq - Tk) give zeros and a log-sum-exp of -inf.
  bool causal = false;
  /// Multiplier of Q K^T; default 1/sqrt(D). Must be finite in the element type.
  std::optional<double> scale{};
  /// Sliding window (0: none). With w > 0 query i sees keys j with i' - w < j, and j <= i'
  /// when causal (Mistral's convention) or j < i' + w when not (a symmetric band).
  index_t window = 0;
};

}  // namespace attn
