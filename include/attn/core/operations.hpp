#pragma once
/// \file
/// The list of operations: one argument struct each (defined in attn/ops/), implemented by
/// every backend as `backend<Policy>::run(policy, args)` (called through detail::run). The CUDA
/// backend's host-side declarations and ATTN_CUDA_INSTANTIATE are generated from it, so a new
/// operation costs its ops/ header, one line here, one `run` per backend and its tests.
///
/// X is called as X(op, extra...) for each operation, with the extra arguments passed on:
///
///     #define DECLARE(op, ...) template <class T> static void run(const P&, const op<T, S>&);
///     ATTN_OPERATIONS(DECLARE)

/// Calls `X(args_struct, ...)` once for each operation's argument struct (see above).
#define ATTN_OPERATIONS(X, ...)                 \
  X(projection_args, __VA_ARGS__)               \
  X(scores_args, __VA_ARGS__)                   \
  X(mask_args, __VA_ARGS__)                     \
  X(softmax_args, __VA_ARGS__)                  \
  X(weighted_values_args, __VA_ARGS__)          \
  X(attention_args, __VA_ARGS__)                \
  X(projection_backward_args, __VA_ARGS__)      \
  X(scores_backward_args, __VA_ARGS__)          \
  X(softmax_backward_args, __VA_ARGS__)         \
  X(weighted_values_backward_args, __VA_ARGS__) \
  X(attention_backward_args, __VA_ARGS__)       \
  X(merge_args, __VA_ARGS__)                    \
  X(copy_args, __VA_ARGS__)

/// Explicitly instantiates every operation of `Policy` (attn::cpu_policy, attn::reference_policy,
/// attn::cuda_policy in a .cu file) for element type T in this translation unit.
///
/// A program of many translation units that call the same backend compiles its kernels in
/// each of them. Defining ATTN_EXTERN_TEMPLATES for all of them (before any attn header) makes
/// <attn/attn.hpp> declare the CPU and reference backends' float and double instances, and
/// <attn/cuda.cuh> the CUDA backend's float, __half and __nv_bfloat16 ones, extern; then one
/// file of the program compiles them once:
///
///     // attn_instances.cpp (with ATTN_EXTERN_TEMPLATES defined like the rest)
///     #include <attn/attn.hpp>
///     ATTN_INSTANTIATE(attn::cpu_policy, float)
///     ATTN_INSTANTIATE(attn::cpu_policy, double)
///     ATTN_INSTANTIATE(attn::reference_policy, float)
///     ATTN_INSTANTIATE(attn::reference_policy, double)
///
/// The results are the same either way; only where the code is compiled changes.
#define ATTN_INSTANTIATE(Policy, T) ATTN_OPERATIONS(ATTN_INSTANTIATE_ONE, template, Policy, T)
/// The explicit instantiation declarations (`extern template`) matching ATTN_INSTANTIATE.
#define ATTN_EXTERN_INSTANTIATE(Policy, T) \
  ATTN_OPERATIONS(ATTN_INSTANTIATE_ONE, extern template, Policy, T)
/// One operation of ATTN_INSTANTIATE and ATTN_EXTERN_INSTANTIATE.
#define ATTN_INSTANTIATE_ONE(op, kind, Policy, T)                      \
  kind void ::attn::detail::run<Policy, ::attn::op<T, Policy::space>>( \
      const Policy&, const ::attn::op<T, Policy::space>&);
