#pragma once
/// \file
/// attn, host umbrella: views, policies, every operation, the reference and the CPU backend.
///
///     #include <attn/attn.hpp>
///     attn::attention(attn::cpu, q, k, v, o, attn::attention_options{.causal = true});

#include "attn/backend/cpu/backend.hpp"
#include "attn/backend/reference/backend.hpp"
#include "attn/core/config.hpp"
#include "attn/core/error.hpp"
#include "attn/core/host_tensor.hpp"
#include "attn/core/numeric.hpp"
#include "attn/core/operations.hpp"
#include "attn/core/options.hpp"
#include "attn/core/policy.hpp"
#include "attn/core/problem.hpp"
#include "attn/core/tensor_view.hpp"
#include "attn/core/visibility.hpp"
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

// A program that compiles the host backends once, in the file with its ATTN_INSTANTIATE lines
// (see attn/core/operations.hpp).
#if defined(ATTN_EXTERN_TEMPLATES)
ATTN_EXTERN_INSTANTIATE(attn::cpu_policy, float)
ATTN_EXTERN_INSTANTIATE(attn::cpu_policy, double)
ATTN_EXTERN_INSTANTIATE(attn::reference_policy, float)
ATTN_EXTERN_INSTANTIATE(attn::reference_policy, double)
#endif

// With the CMake target attn::cuda linked: the CUDA backend's host-safe declarations as well.
#if defined(ATTN_CUDA_BACKEND)
#include "attn/cuda.hpp"
#endif
