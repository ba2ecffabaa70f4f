#pragma once
/// \file
/// Build-wide definitions: the index type and the host/device function qualifier.

#include <cstddef>

#if defined(__CUDACC__)
#define ATTN_HOST_DEVICE __host__ __device__
#else
#define ATTN_HOST_DEVICE
#endif

/// Everything public: views and owning tensors, the policies (attn::reference, attn::cpu,
/// attn::cuda), the operations of attn/ops/ and their options. Implementation details live in
/// attn::detail, attn::cpu_detail and attn::cuda_detail.
namespace attn {

/// Signed index type for extents and strides (element counts, not bytes).
using index_t = std::ptrdiff_t;

}  // namespace attn
