#pragma once
/// \file
/// Raw copies from host memory into a memory space, for the containers that keep a host copy
/// of small metadata (the KV cache's lengths). Specialised per space: host here, device in
/// attn/cuda/memory.hpp.

#include <cstring>
#include <type_traits>

#include "attn/core/tensor_view.hpp"

namespace attn {

/// Raw memory operations of `Space`; the primary template only says what to include.
template <class Space>
struct memory {
  static_assert(!std::is_same_v<Space, Space>,
                "attn: no memory operations for this space; for device memory include "
                "<attn/cuda.hpp> (or <attn/cuda.cuh>)");
};

/// Host memory: `std::memcpy`.
template <>
struct memory<host_space> {
  /// Copies `bytes` from host memory `src` to `dst` in this space.
  static void upload(void* dst, const void* src, std::size_t bytes) {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
};

}  // namespace attn
