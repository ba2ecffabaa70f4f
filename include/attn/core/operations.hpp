#pragma once
/// \file
/// The list of operations: one argument struct each (defined in attn/ops/), implemented by
/// every backend as `backend<Policy>::run(policy, args)`. The CUDA backend's host-side
/// declarations and ATTN_CUDA_INSTANTIATE are generated from it, so a new operation costs its
/// ops/ header, one line here, one `run` per backend and its tests.
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
