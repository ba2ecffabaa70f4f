// The CUDA backend compiled once for the cuda_backend tests (on the harness, or by nvcc): its
// other files are built with ATTN_EXTERN_TEMPLATES (see attn/core/operations.hpp).

#include <attn/cuda.cuh>

ATTN_INSTANTIATE(attn::cuda_policy, float)
ATTN_INSTANTIATE(attn::cuda_policy, __half)
ATTN_INSTANTIATE(attn::cuda_policy, __nv_bfloat16)
