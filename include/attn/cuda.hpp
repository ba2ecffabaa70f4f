#pragma once
/// \file
/// attn::cuda, host-safe part: device memory (`device_tensor`, `copy`), CUDA error reporting
/// and the declarations of `backend<cuda_policy>` (the policy itself, `attn::cuda`, is in
/// attn/core/policy.hpp). Plain C++: a `.cpp` compiled by g++ may include it (it needs only
/// the CUDA runtime's host header). The kernels live in <attn/cuda.cuh>; a `.cu` file that
/// includes it either calls the operations directly or instantiates them for the `.cpp` files
/// of the program with one line per element type:
///
///     // attn_cuda.cu
///     #include <attn/cuda.cuh>
///     ATTN_CUDA_INSTANTIATE(float)
///     ATTN_CUDA_INSTANTIATE(__half)
///
///     // main.cpp (g++), linked with attn_cuda.o and CUDA::cudart
///     #include <attn/cuda.hpp>
///     attn::device_tensor<float, 4> q({B, H, T, D}), k(...), v(...), o(...);
///     attn::copy(host_q.view(), q.view());
///     attn::attention(attn::cuda.on(stream), q.view(), k.view(), v.view(), o.view());

#include "attn/core/config.hpp"
#include "attn/core/error.hpp"
#include "attn/core/host_tensor.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/options.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/tensor_view.hpp"
#include "attn/cuda/backend.hpp"
#include "attn/cuda/error.hpp"
#include "attn/cuda/memory.hpp"
#include "attn/ops/attention.hpp"
#include "attn/ops/copy.hpp"
#include "attn/ops/kv_cache.hpp"
#include "attn/ops/mask.hpp"
#include "attn/ops/merge.hpp"
#include "attn/ops/multi_head.hpp"
#include "attn/ops/projection.hpp"
#include "attn/ops/scores.hpp"
#include "attn/ops/softmax.hpp"
#include "attn/ops/weighted_values.hpp"
#include "attn/version.hpp"
