#pragma once
/// \file
/// The shape of one attention problem, carried by every attention-shaped argument struct so
/// that grouped-query attention and per-sequence lengths reach every backend unchanged.

#include "attn/core/config.hpp"

namespace attn {

/// q [batch, heads, q_len, head_dim], k [batch, kv_heads, kv_len, head_dim],
/// v [batch, kv_heads, kv_len, value_dim]. kv_heads divides heads: query head h reads key and
/// value head h / (heads / kv_heads), as in FlashAttention and PyTorch's `enable_gqa`.
struct attention_shape {
  /// The extents named above.
  ///@{
  index_t batch = 0, heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;
  ///@}

  /// Query heads per key/value head.
  ATTN_HOST_DEVICE constexpr index_t group() const { return kv_heads > 0 ? heads / kv_heads : 1; }
  /// The key/value head that query head h reads.
  ATTN_HOST_DEVICE constexpr index_t kv_head(index_t h) const { return h / group(); }
};

/// Which keys a query may see, before per-sequence lengths: the public options' mask part.
struct mask_spec {
  bool causal = false;  ///< Query i sees no key past its own position (bottom-right aligned).
  index_t window = 0;   ///< Sliding window width in keys; 0: none.
};

}  // namespace attn
