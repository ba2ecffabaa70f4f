#pragma once
/// \file
/// Policies: small values whose type picks the backend, and the backend seam they select.
///
/// A backend is `backend<Policy>`, a class with one static `run(policy, args)` per operation,
/// where `args` is that operation's argument struct (attention_args, project_args, ... in
/// attn/ops/): adding a field to an argument struct reaches every backend without a signature
/// change. The public functions in attn/ops/ check their arguments, build the struct and call
/// `backend<Policy>::run` through detail::run.

#include <type_traits>

#include "attn/core/numeric.hpp"
#include "attn/core/tensor_view.hpp"

// The CUDA runtime's stream handle (`cudaStream_t` is `CUstream_st*`), declared here so that
// attn::cuda can be named without the CUDA headers.
struct CUstream_st;

namespace attn {

namespace detail {
template <class T>
inline constexpr bool is_host_float = std::is_same_v<T, float> || std::is_same_v<T, double>;
template <class T>
inline constexpr bool is_cuda_float =
    std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
}  // namespace detail

/// Plain loops accumulating in double: slow, obvious, the oracle every other backend is
/// tested against. Computes in float and double.
struct reference_policy {
  using space = host_space;  ///< The memory its views live in.
  /// Compiles only for an element type the backend computes in (a static_assert says which).
  template <class T>
  static constexpr void require_element() {
    static_assert(detail::is_host_float<T>, "attn::reference computes in float and double");
  }
};

/// The CPU backend on Eigen and hand-written SIMD kernels, blocked and multi-threaded.
/// Computes in float and double.
struct cpu_policy {
  using space = host_space;  ///< The memory its views live in.
  /// Worker threads; 0 means all hardware threads, and more than the hardware has are not
  /// started (the pool holds one per hardware thread). Negative counts are rejected.
  /// Results are bit-identical for every thread count.
  int threads = 0;
  /// Compiles only for an element type the backend computes in (a static_assert says which).
  template <class T>
  static constexpr void require_element() {
    static_assert(detail::is_host_float<T>, "attn::cpu computes in float and double");
  }
};

/// The CUDA kernel backend, for device views. Work is queued on `stream` (the legacy default
/// stream when null); a call returns once its kernels are queued, not when they are done.
/// Computes in float, __half and __nv_bfloat16. Its operations are declared in
/// <attn/cuda.hpp> and defined in <attn/cuda.cuh>.
struct cuda_policy {
  using space = device_space;     ///< The memory its views live in.
  CUstream_st* stream = nullptr;  ///< The `cudaStream_t` work is queued on; null: default stream.

  /// The same policy on another stream: `attn::cuda.on(stream)`.
  constexpr cuda_policy on(CUstream_st* s) const { return cuda_policy{s}; }

  /// Compiles only for an element type the backend computes in (a static_assert says which).
  template <class T>
  static constexpr void require_element() {
    static_assert(detail::is_cuda_float<T>,
                  "attn::cuda computes in float, __half and __nv_bfloat16");
  }
};

/// The reference backend: `attn::attention(attn::reference, q, k, v, o)`.
inline constexpr reference_policy reference{};
/// The CPU backend on all hardware threads; `attn::cpu_policy{.threads = n}` for n.
inline constexpr cpu_policy cpu{};
/// The CUDA backend on the default stream.
inline constexpr cuda_policy cuda{};

/// `backend<Policy>` implements every operation for one policy. It is specialised in
/// `attn/backend/<name>/backend.hpp`; the primary template only reports what is missing.
template <class Policy>
struct backend {
  static_assert(!std::is_same_v<Policy, Policy>,
                "attn: no backend is visible for this policy. Include <attn/attn.hpp> for "
                "attn::reference and attn::cpu; for attn::cuda include <attn/cuda.cuh> in a .cu "
                "file, or <attn/cuda.hpp> and link attn::cuda.");
};

namespace detail {
/// The compile-time half of every call's checks: the views live where the policy runs, and
/// the policy computes in their element type.
template <class Policy, class T, class Space>
constexpr void check_policy() {
  static_assert(std::is_same_v<typename Policy::space, Space>,
                "attn: the views live in a memory space this policy does not run on. Use "
                "attn::cuda for device views and attn::cpu / attn::reference for host views, "
                "or copy the data with attn::copy.");
  Policy::template require_element<std::remove_cv_t<T>>();
}

/// Every public function's one call into its backend, after its checks. A function template
/// that is not inline, so that ATTN_EXTERN_TEMPLATES (attn/core/operations.hpp) can keep a
/// translation unit from compiling a backend's kernels at all.
template <class Policy, class Args>
void run(const Policy& policy, const Args& args) {
  backend<Policy>::run(policy, args);
}
}  // namespace detail

}  // namespace attn
