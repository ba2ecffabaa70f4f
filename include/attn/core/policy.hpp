#pragma once
/// \file
/// Policies: small values whose type picks the backend, and the backend seam they select.

#include <type_traits>

#include "attn/core/tensor_view.hpp"

namespace attn {

/// Plain loops accumulating in double: slow, obvious, the oracle every other backend is
/// tested against.
struct reference_policy {
  using space = host_space;
};

/// The CPU backend on Eigen, blocked and multi-threaded.
struct cpu_policy {
  using space = host_space;
  /// Worker threads; 0 means all hardware threads. Results do not depend on it.
  int threads = 0;
};

inline constexpr reference_policy reference{};
inline constexpr cpu_policy cpu{};

/// `backend<Policy>` implements every stage for one policy. It is specialised in
/// `attn/backend/<name>/backend.hpp`; the primary template only reports what is missing.
template <class Policy>
struct backend {
  static_assert(!std::is_same_v<Policy, Policy>,
                "attn: no backend is visible for this policy. Include <attn/attn.hpp> for "
                "attn::reference and attn::cpu; for attn::cuda include <attn/cuda.cuh> in a .cu "
                "file, or <attn/cuda.hpp> and link attn::cuda.");
};

namespace detail {
template <class Policy, class Space>
constexpr void check_space() {
  static_assert(std::is_same_v<typename Policy::space, Space>,
                "attn: the views live in a memory space this policy does not run on. Use "
                "attn::cuda for device views and attn::cpu / attn::reference for host views, "
                "or copy the data with attn::copy.");
}
}  // namespace detail

}  // namespace attn
