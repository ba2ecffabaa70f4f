#pragma once
/// \file
/// Launching a grid on fibers, the built-in index variables, dynamic shared memory and the
/// fiber order. Every CUDA thread is a Boost.Context fiber; the blocks of a grid run one after
/// another on the calling OS thread.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <source_location>

namespace attn_emulator {

/// The order in which runnable fibers (and blocks) are resumed.
enum class order { forward, reverse, random };

/// The order of the next launches: set_order's if called, else the environment variable
/// ATTN_EMU_ORDER (forward, reverse or random; forward when unset). The random order is
/// reshuffled before every pass and seeded by ATTN_EMU_SEED (default 1).
order current_order();

/// Overrides ATTN_EMU_ORDER for the rest of the process (for tests of the harness itself).
void set_order(order o);

/// A type-erased kernel invocation: calls the kernel once for the current fiber.
using kernel_body = void (*)(void* context);

/// Runs `body(context)` once per thread of every block of `grid` x `block`, with
/// `shared_bytes` of dynamic shared memory poisoned with NaN bytes before each block.
/// `kernel` identifies the kernel (for cudaFuncSetAttribute limits). Returns the launch error
/// a GPU would report for a bad configuration (nothing runs then) or cudaSuccess. Aborts with
/// a message on a kernel bug it detects (divergent barrier, incomplete warp collective).
cudaError_t launch(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes,
                   kernel_body body, void* context);

/// launch() for any callable: `f()` is the kernel call of one thread.
template <class F>
cudaError_t launch(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes, F& f) {
  return launch(
      kernel, grid, block, shared_bytes, [](void* c) { (*static_cast<F*>(c))(); }, &f);
}

/// The running block's dynamic shared memory (aligned to 128 bytes).
void* dynamic_shared_memory();

/// Aborts with a message naming `where` unless `address` is a multiple of `alignment`.
void check_alignment(const void* address, std::size_t alignment, const char* what,
                     const std::source_location& where);

namespace detail {
// Set by the scheduler: thread_idx before each switch into a fiber, the others per block.
inline thread_local uint3 thread_idx{};
inline thread_local uint3 block_idx{};
inline thread_local dim3 block_dim{};
inline thread_local dim3 grid_dim{};
}  // namespace detail

/// The calling thread's index in its block, x fastest; its lane is this % 32.
inline unsigned linear_thread_index() {
  return detail::thread_idx.x +
         detail::block_dim.x * (detail::thread_idx.y + detail::block_dim.y * detail::thread_idx.z);
}

}  // namespace attn_emulator

// Read-only like CUDA's built-ins.
#define threadIdx (static_cast<const uint3&>(::attn_emulator::detail::thread_idx))
#define blockIdx (static_cast<const uint3&>(::attn_emulator::detail::block_idx))
#define blockDim (static_cast<const dim3&>(::attn_emulator::detail::block_dim))
#define gridDim (static_cast<const dim3&>(::attn_emulator::detail::grid_dim))
inline constexpr int warpSize = 32;
