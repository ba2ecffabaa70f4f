#pragma once
/// \file
/// The declarations of backend<cuda_policy>: one `run` per operation of ATTN_OPERATIONS
/// (attn/core/operations.hpp) for every element type T in {float, __half, __nv_bfloat16}.
/// Host-safe: a .cpp compiled by g++ can call them; they are defined in <attn/cuda.cuh> and
/// instantiated there by ATTN_CUDA_INSTANTIATE(T). Each queues its kernels on `policy.stream` and
/// throws backend_error on a launch error.

#include "attn/core/operations.hpp"
#include "attn/core/policy.hpp"
#include "attn/ops/attention.hpp"
#include "attn/ops/copy.hpp"
#include "attn/ops/mask.hpp"
#include "attn/ops/merge.hpp"
#include "attn/ops/projection.hpp"
#include "attn/ops/scores.hpp"
#include "attn/ops/softmax.hpp"
#include "attn/ops/weighted_values.hpp"

namespace attn {

template <>
struct backend<cuda_policy> {
/// One `run` declaration (used right below, then undefined).
#define ATTN_CUDA_DECLARE(op, ...) \
  template <class T>               \
  static void run(const cuda_policy& policy, const op<T, device_space>& args);
  ATTN_OPERATIONS(ATTN_CUDA_DECLARE)
#undef ATTN_CUDA_DECLARE
};

}  // namespace attn
