#pragma once
/// \file
/// The KV cache of generation: keys and values of every sequence of a batch up to a capacity,
/// a length per sequence, appending, and attention against the cache (the decode step).

#include <cstdint>
#include <string>
#include <vector>

#include "attn/core/check.hpp"
#include "attn/core/host_tensor.hpp"
#include "attn/core/memory.hpp"
#include "attn/core/policy.hpp"
#include "attn/ops/attention.hpp"
#include "attn/ops/copy.hpp"

namespace attn {

/// The extents of a KV cache.
struct kv_cache_shape {
  index_t batch = 0;      ///< sequences
  index_t kv_heads = 0;   ///< key/value heads
  index_t capacity = 0;   ///< positions per sequence
  index_t head_dim = 0;   ///< D
  index_t value_dim = 0;  ///< Dv; 0: the same as head_dim
};

/// Keys [B, Hkv, capacity, D] and values [B, Hkv, capacity, Dv] in the policy's memory, and a
/// length per sequence (its first length(b) positions hold keys; the rest may hold anything and
/// is never read). The lengths live on the host (every check reads them there) and, for device
/// memory, in a device copy the kernels read. Move-only.
///
///     attn::kv_cache<float> cache({.batch = B, .kv_heads = Hkv, .capacity = N, .head_dim = D});
///     cache.append(attn::cpu, k_new, v_new);          // [B, Hkv, Tnew, D] at each row's length
///     attn::attention(attn::cpu, q, cache, o, {.causal = true});
template <class T, class Space = host_space>
class kv_cache {
 public:
  /// Allocates the cache (host memory starts zeroed), every length 0.
  /// \throws shape_error for a negative extent.
  explicit kv_cache(const kv_cache_shape& s)
      : shape_(s),
        lengths_(static_cast<std::size_t>(std::max<index_t>(s.batch, 0)), 0),
        device_lengths_(dims<1>{std::max<index_t>(s.batch, 0)}) {
    if (shape_.value_dim == 0) shape_.value_dim = shape_.head_dim;
    const detail::checker c{"kv_cache"};
    for (const auto& [name, n] :
         {std::pair{"batch", s.batch}, std::pair{"kv_heads", s.kv_heads},
          std::pair{"capacity", s.capacity}, std::pair{"head_dim", s.head_dim},
          std::pair{"value_dim", s.value_dim}})
      if (n < 0) c.fail(std::string(name) + " is " + std::to_string(n) + "; it must be >= 0");
    keys_ = buffer(dims<4>{s.batch, s.kv_heads, s.capacity, shape_.head_dim});
    values_ = buffer(dims<4>{s.batch, s.kv_heads, s.capacity, shape_.value_dim});
    sync_lengths();
  }

  /// The extents (value_dim filled in).
  const kv_cache_shape& shape() const { return shape_; }
  /// [B, Hkv, capacity, D]: the whole key buffer (a caller may fill a prefix and set_length).
  ///@{
  tensor_view<T, 4, Space> keys() { return keys_.view(); }
  tensor_view<const T, 4, Space> keys() const { return keys_.view(); }
  ///@}
  /// [B, Hkv, capacity, Dv]: the whole value buffer.
  ///@{
  tensor_view<T, 4, Space> values() { return values_.view(); }
  tensor_view<const T, 4, Space> values() const { return values_.view(); }
  ///@}

  /// The number of positions sequence b holds. \throws shape_error for b out of range.
  index_t length(index_t b) const {
    check_row("length", b);
    return lengths_[std::size_t(b)];
  }
  /// Sets sequence b's length. \throws shape_error for b or n out of range.
  void set_length(index_t b, index_t n) {
    check_row("set_length", b);
    if (n < 0 || n > shape_.capacity)
      detail::checker{"kv_cache::set_length"}.fail(
          "n is " + std::to_string(n) +
          "; it must be in [0, capacity = " + std::to_string(shape_.capacity) + "]");
    lengths_[std::size_t(b)] = std::int32_t(n);
    sync_lengths();
  }
  /// [B] the lengths as the kernels read them (in the policy's memory).
  tensor_view<const std::int32_t, 1, Space> lengths() const { return device_lengths_.view(); }

  /// Writes k_new and v_new at every sequence's length and advances the lengths by Tnew (a
  /// strided copy on the policy's backend; on attn::cuda a device-side copy queued on its
  /// stream).
  ///
  /// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
  /// \param k_new  [B, Hkv, Tnew, D] keys of the new positions.
  /// \param v_new  [B, Hkv, Tnew, Dv] their values.
  /// \throws shape_error when the extents disagree or a sequence would pass the capacity,
  ///         before anything is written.
  template <class Policy>
  void append(const Policy& policy, input_view<T, 4, Space> k_new, input_view<T, 4, Space> v_new) {
    detail::check_policy<Policy, T, Space>();
    const detail::checker c{"kv_cache::append"};
    c.view("k_new", k_new);
    c.view("v_new", v_new);
    const index_t n = k_new.extent(2);
    c.same("k_new.B (extent 0)", k_new.extent(0), "the cache's batch", shape_.batch);
    c.same("k_new.Hkv (extent 1)", k_new.extent(1), "the cache's kv_heads", shape_.kv_heads);
    c.same("k_new.D (extent 3)", k_new.extent(3), "the cache's head_dim", shape_.head_dim);
    c.same("v_new.B (extent 0)", v_new.extent(0), "the cache's batch", shape_.batch);
    c.same("v_new.Hkv (extent 1)", v_new.extent(1), "the cache's kv_heads", shape_.kv_heads);
    c.same("v_new.Tnew (extent 2)", v_new.extent(2), "k_new.Tnew (extent 2)", n);
    c.same("v_new.Dv (extent 3)", v_new.extent(3), "the cache's value_dim", shape_.value_dim);
    using detail::footprint_of;
    c.disjoint(
        {footprint_of("the cache's keys", keys()), footprint_of("the cache's values", values())},
        {footprint_of("k_new", k_new), footprint_of("v_new", v_new)});
    for (index_t b = 0; b < shape_.batch; ++b)
      if (lengths_[std::size_t(b)] + n > shape_.capacity)
        c.fail("sequence " + std::to_string(b) + " holds " +
               std::to_string(lengths_[std::size_t(b)]) + " positions; " + std::to_string(n) +
               " more pass the capacity " + std::to_string(shape_.capacity));
    if (n == 0) return;
    for (index_t b = 0; b < shape_.batch; ++b) {
      const index_t at = lengths_[std::size_t(b)];
      const auto rows = [&](auto& buf, index_t dim) {
        return tensor_view<T, 4, Space>{buf.data() + b * buf.view().stride(0) + at * dim,
                                        {1, shape_.kv_heads, n, dim},
                                        buf.view().strides()};
      };
      const auto row = [&](const tensor_view<const T, 4, Space>& src) {
        return tensor_view<const T, 4, Space>{src.data() + b * src.stride(0),
                                              {1, src.extent(1), src.extent(2), src.extent(3)},
                                              src.strides()};
      };
      detail::run(policy, copy_args<T, Space>{row(k_new), rows(keys_, shape_.head_dim)});
      detail::run(policy, copy_args<T, Space>{row(v_new), rows(values_, shape_.value_dim)});
    }
    for (auto& l : lengths_) l += std::int32_t(n);
    sync_lengths();
  }

 private:
  using buffer = typename owning_tensor<Space, T, 4>::type;

  void check_row(const char* fn, index_t b) const {
    if (b < 0 || b >= shape_.batch)
      detail::checker{fn}.fail("b is " + std::to_string(b) +
                               "; it must be in [0, batch = " + std::to_string(shape_.batch) + ")");
  }
  void sync_lengths() {
    memory<Space>::upload(device_lengths_.data(), lengths_.data(),
                          lengths_.size() * sizeof(std::int32_t));
  }

  kv_cache_shape shape_;
  std::vector<std::int32_t> lengths_;
  typename owning_tensor<Space, std::int32_t, 1>::type device_lengths_;
  buffer keys_, values_;
};

/// The decode step (or a chunk of prefill) against a cache: row b's Tq queries sit at positions
/// length(b) - Tq + i and attend to the row's first length(b) keys (causal: those at or before
/// their position). For a few queries against many keys the CPU and CUDA backends split the
/// keys into chunks processed in parallel and merge them in a fixed order.
///
/// \param policy  the backend: attn::reference, attn::cpu or a cpu_policy, attn::cuda.
/// \param q      [B, H, Tq, D] queries; H a multiple of the cache's kv_heads.
/// \param cache  the keys and values, lengths in [0, capacity].
/// \param o      [B, H, Tq, Dv] output.
/// \param lse    [B, H, Tq] log-sum-exp, or the overload without.
/// \param opt    causal, window, scale.
/// \throws shape_error when the extents disagree, before anything is written.
template <class Policy, class T, class Space, detail::lse_output<T, Space> Lse>
void attention(const Policy& policy, input_view<T, 4, Space> q,
               const kv_cache<std::type_identity_t<T>, Space>& cache, tensor_view<T, 4, Space> o,
               Lse&& lse, const attention_options& opt = {}) {
  detail::check_policy<Policy, T, Space>();
  const detail::checker c{"attention"};
  c.same("q.B (extent 0)", q.extent(0), "the cache's batch", cache.shape().batch);
  attention_args<T, Space> a = detail::check_attention<T, Space>(
      c, q, cache.keys(), cache.values(), o, tensor_view<accum_t<T>, 3, Space>(lse), opt);
  a.kv_lengths = cache.lengths();  // checked on the host when they were set
  detail::run(policy, a);
}

/// The decode step against a cache, without lse (see the overload with lse).
template <class Policy, class T, class Space>
void attention(const Policy& policy, input_view<T, 4, Space> q,
               const kv_cache<std::type_identity_t<T>, Space>& cache, tensor_view<T, 4, Space> o,
               const attention_options& opt = {}) {
  attention(policy, q, cache, o, tensor_view<accum_t<T>, 3, Space>{}, opt);
}

}  // namespace attn
