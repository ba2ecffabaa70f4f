#pragma once
/// \file
/// Internal to the harness: one emulated block's state, shared by the scheduler and the warp
/// collectives, and the hooks that tell ASan and TSan about fiber switches.

#include <attn_emulator/cuda.hpp>
#include <boost/context/fiber.hpp>

#include <cstdint>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

namespace attn_emulator::detail {

enum class thread_state : std::uint8_t { ready, at_barrier, at_warp, exited };

/// One CUDA thread: its fiber, where it waits, and its pending warp collective.
struct thread_record {
  boost::context::fiber fiber;      // continues the thread while it is parked
  boost::context::fiber scheduler;  // continues the scheduler while the thread runs
  uint3 idx{};
  unsigned linear = 0;
  thread_state state = thread_state::ready;
  std::source_location where;  // of the barrier or collective it waits at
  collective op{};
  std::uint32_t mask = 0;
  const void* in = nullptr;
  void* out = nullptr;
  async_copies copies;
  // Sanitizers: the stack, the TSan fiber, and the __syncwarp happens-before edges (each lane
  // releases into one of two objects of its own; its partners acquire the one it used).
  boost::context::stack_context stack{};
  void* tsan_fiber = nullptr;
  const void* scheduler_stack_bottom = nullptr;
  std::size_t scheduler_stack_size = 0;
  char sync_objects[2] = {};
  unsigned sync_parity = 0;
  std::uint32_t acquire_mask = 0;
  std::uint32_t acquire_parities = 0;
};

/// The block being run.
struct block_state {
  std::vector<thread_record> threads;
  std::vector<std::uint32_t> warp_arrived;  // lanes waiting at a collective, per warp
  unsigned live = 0;                        // threads not exited
  unsigned waiting = 0;                     // threads at the barrier
  unsigned generation = 0;                  // barriers completed
  std::source_location barrier_where;
  char barrier_sync[2] = {};  // TSan: release/acquire object of even and odd generations
};

inline thread_local block_state* current_block = nullptr;
inline thread_local thread_record* current_thread = nullptr;
inline thread_local void* scheduler_tsan_fiber = nullptr;
inline thread_local void* dynamic_shared = nullptr;

/// Back to the scheduler until the thread is made ready again.
void park(thread_record& t);

/// Prints "attn_emulator: <message>" to stderr and aborts.
[[noreturn]] void fail(const char* format, ...) __attribute__((format(printf, 1, 2)));

/// Whether two calls are the same source location (file, line and column).
inline bool same_place(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         (a.file_name() == b.file_name() || std::string_view(a.file_name()) == b.file_name());
}

/// "(x,y,z)".
std::string format(uint3 index);
/// "file:line".
std::string format(const std::source_location& where);
/// The CUDA or PTX name of a collective.
const char* name(collective op);

/// The last lane of `mask` computed the results of mma.sync or ldmatrix for every lane.
void resolve_mma(bool bf16, const void* const in[32], void* const out[32]);
void resolve_ldmatrix(int matrices, bool trans, const void* const in[32], void* const out[32]);

/// Guarded fiber stacks, kept for the OS thread's lifetime (stack i for thread i of a block).
boost::context::stack_context fiber_stack(std::size_t i);

/// The launch error that cudaGetLastError returns next.
void set_last_error(cudaError_t error);
cudaError_t take_last_error(bool reset);
/// The dynamic shared memory a kernel may use (cudaFuncSetAttribute raises it from 48 KiB).
std::size_t max_dynamic_shared(const void* kernel);
void set_max_dynamic_shared(const void* kernel, std::size_t bytes);

/// Sanitizer hooks (no-ops unless the ASan or TSan runtime is linked in).
namespace sanitizer {
bool tsan();
void* tsan_current_fiber();
void* tsan_create_fiber();
void tsan_destroy_fiber(void* fiber);
void tsan_switch_to(void* fiber);  // without a happens-before edge
void tsan_acquire(void* object);
void tsan_release(void* object);
void asan_start_switch(void** fake_stack, const void* bottom, std::size_t size);
void asan_finish_switch(void* fake_stack, const void** bottom_old, std::size_t* size_old);
}  // namespace sanitizer

}  // namespace attn_emulator::detail
