#pragma once
/// \file
/// attn::cuda, for .cu files compiled by nvcc: views, policies, every operation and the CUDA
/// kernel backend (no Eigen, no CPU backend). Call the operations with `attn::cuda` and device
/// views, or put ATTN_CUDA_INSTANTIATE(T) lines here for .cpp files that include
/// <attn/cuda.hpp>.
///
///     #include <attn/cuda.cuh>
///     attn::attention(attn::cuda.on(stream), q, k, v, o, attn::attention_options{.causal = true});

#include "attn/backend/cuda/backend.cuh"
#include "attn/cuda.hpp"

// A program that compiles the CUDA backend once, in the .cu file with its ATTN_INSTANTIATE
// lines (see attn/core/operations.hpp).
#if defined(ATTN_EXTERN_TEMPLATES)
ATTN_EXTERN_INSTANTIATE(attn::cuda_policy, float)
ATTN_EXTERN_INSTANTIATE(attn::cuda_policy, __half)
ATTN_EXTERN_INSTANTIATE(attn::cuda_policy, __nv_bfloat16)
#endif

#include "attn/backend/cuda/undef.cuh"  // last: the kernels' internal macros end here
