/// \file
/// The scheduler: a grid runs block after block on the calling OS thread; every thread of a
/// block is a fiber, resumed in the chosen order until it parks (barrier, warp collective) or
/// exits. A pass in which no fiber can run while some are still alive is a deadlock.

#include <algorithm>
#include <bit>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

#include "internal.hpp"

namespace attn_emulator {

namespace {

std::optional<order> order_override;

order order_from_environment() {
  const char* s = std::getenv("ATTN_EMU_ORDER");
  if (!s || !*s || !std::strcmp(s, "forward")) return order::forward;
  if (!std::strcmp(s, "reverse")) return order::reverse;
  if (!std::strcmp(s, "random")) return order::random;
  detail::fail("ATTN_EMU_ORDER=%s: expected forward, reverse or random", s);
}

std::mt19937_64& random_engine() {
  static std::mt19937_64 engine = [] {
    const char* seed = std::getenv("ATTN_EMU_SEED");
    return std::mt19937_64(seed && *seed ? std::strtoull(seed, nullptr, 10) : 1);
  }();
  return engine;
}

// Arranges 0..n-1 in the order the fibers (or blocks) of the next pass run.
void arrange(std::vector<unsigned>& sequence, std::size_t n, order o) {
  sequence.resize(n);
  std::iota(sequence.begin(), sequence.end(), 0u);
  if (o == order::reverse) std::reverse(sequence.begin(), sequence.end());
  if (o == order::random) std::shuffle(sequence.begin(), sequence.end(), random_engine());
}

}  // namespace

order current_order() {
  static const order from_environment = order_from_environment();
  return order_override.value_or(from_environment);
}

void set_order(order o) { order_override = o; }

namespace detail {

void fail(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fputs("attn_emulator: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
  std::abort();
}

// (Built with snprintf: GCC 12 warns falsely on string concatenation at -O3, bug 105329.)
std::string format(uint3 i) {
  char text[48];
  std::snprintf(text, sizeof text, "(%u,%u,%u)", i.x, i.y, i.z);
  return text;
}

std::string format(const std::source_location& where) {
  char line[16];
  std::snprintf(line, sizeof line, ":%u", static_cast<unsigned>(where.line()));
  return std::string(where.file_name()).append(line);
}

void park(thread_record& t) {
  void* fake_stack = nullptr;
  sanitizer::asan_start_switch(&fake_stack, t.scheduler_stack_bottom, t.scheduler_stack_size);
  sanitizer::tsan_switch_to(scheduler_tsan_fiber);
  t.scheduler = std::move(t.scheduler).resume();
  sanitizer::asan_finish_switch(fake_stack, &t.scheduler_stack_bottom, &t.scheduler_stack_size);
}

}  // namespace detail

void syncthreads(const std::source_location& where) {
  using namespace detail;
  if (!current_thread) fail("__syncthreads at %s outside a kernel", format(where).c_str());
  block_state& b = *current_block;
  thread_record& t = *current_thread;
  if (b.waiting == 0) {
    b.barrier_where = where;
  } else if (!same_place(where, b.barrier_where)) {
    const auto first = std::find_if(b.threads.begin(), b.threads.end(),
                                    [](auto& u) { return u.state == thread_state::at_barrier; });
    fail("divergent __syncthreads in block %s: thread %s waits at %s, thread %s arrived at %s",
         format(blockIdx).c_str(), format(first->idx).c_str(), format(b.barrier_where).c_str(),
         format(t.idx).c_str(), format(where).c_str());
  }
  const unsigned generation = b.generation;
  sanitizer::tsan_release(&b.barrier_sync[generation & 1]);
  t.state = thread_state::at_barrier;
  t.where = where;
  ++b.waiting;
  park(t);
  sanitizer::tsan_acquire(&b.barrier_sync[generation & 1]);
}

void* dynamic_shared_memory() { return detail::dynamic_shared; }

namespace {

using namespace detail;

// Where one waiting thread is, for deadlock reports.
std::string describe(const block_state& b, unsigned linear) {
  if (linear >= b.threads.size()) return "not launched";
  const thread_record& t = b.threads[linear];
  switch (t.state) {
    case thread_state::exited:
      return "exited";
    case thread_state::at_barrier:
      return "waits at __syncthreads " + format(t.where);
    case thread_state::at_warp:
      return std::string("waits at ").append(name(t.op)).append(" ").append(format(t.where));
    case thread_state::ready:
      break;
  }
  return "ready";
}

// No fiber can run, yet some are alive: name every incomplete collective and the barrier.
[[noreturn]] void report_deadlock(const block_state& b) {
  std::string report = "deadlock in block " + format(blockIdx) + ":";
  for (const thread_record& t : b.threads) {
    if (t.state != thread_state::at_warp) continue;
    const unsigned warp_base = t.linear & ~31u;
    std::uint32_t missing = 0;
    for (unsigned lane = 0; lane < 32; ++lane) {
      const unsigned u = warp_base + lane;
      const bool same = u < b.threads.size() && b.threads[u].state == thread_state::at_warp &&
                        b.threads[u].op == t.op && same_place(b.threads[u].where, t.where);
      if ((t.mask >> lane & 1) && !same) missing |= 1u << lane;
    }
    if ((t.linear & 31) != static_cast<unsigned>(std::countr_zero(t.mask & ~missing)) || !missing)
      continue;  // report each collective once, at its lowest waiting lane
    const unsigned first_missing = warp_base + static_cast<unsigned>(std::countr_zero(missing));
    char text[160];
    std::snprintf(text, sizeof text, " in warp %u: lanes 0x%08x never arrived (lane %u ",
                  t.linear / 32, missing, first_missing & 31);
    report.append("\n  incomplete ").append(name(t.op)).append(" at ").append(format(t.where));
    report.append(text).append(describe(b, first_missing)).append(")");
  }
  if (b.waiting) {
    char text[96];
    std::snprintf(text, sizeof text, "\n  %u of %u live threads wait at __syncthreads ", b.waiting,
                  b.live);
    report.append(text).append(format(b.barrier_where));
  }
  fail("%s", report.c_str());
}

void resume(thread_record& t) {
  current_thread = &t;
  thread_idx = t.idx;
  void* fake_stack = nullptr;
  sanitizer::asan_start_switch(&fake_stack, static_cast<char*>(t.stack.sp) - t.stack.size,
                               t.stack.size);
  sanitizer::tsan_switch_to(t.tsan_fiber);
  t.fiber = std::move(t.fiber).resume();
  sanitizer::asan_finish_switch(fake_stack, nullptr, nullptr);
  current_thread = nullptr;
}

// A stack allocator that hands boost the preallocated guarded stack of one thread.
struct fixed_stack {
  boost::context::stack_context stack;
  boost::context::stack_context allocate() { return stack; }
  void deallocate(boost::context::stack_context&) noexcept {}
};

// TSan: thread start acquires what came before the block, thread exit releases to what follows.
char block_start_sync, block_end_sync;

void start_threads(block_state& b, kernel_body body, void* context) {
  for (thread_record& t : b.threads) {
    t.state = thread_state::ready;
    t.copies = {};
    t.fiber = boost::context::fiber(
        std::allocator_arg, fixed_stack{t.stack},
        [&t, &b, body, context](boost::context::fiber&& scheduler) {
          t.scheduler = std::move(scheduler);
          sanitizer::asan_finish_switch(nullptr, &t.scheduler_stack_bottom,
                                        &t.scheduler_stack_size);
          sanitizer::tsan_acquire(&block_start_sync);
          body(context);
          sanitizer::tsan_release(&block_end_sync);
          t.state = thread_state::exited;
          --b.live;
          sanitizer::asan_start_switch(nullptr, t.scheduler_stack_bottom, t.scheduler_stack_size);
          sanitizer::tsan_switch_to(scheduler_tsan_fiber);
          return std::move(t.scheduler);
        });
  }
  b.live = static_cast<unsigned>(b.threads.size());
  b.waiting = 0;
  std::fill(b.warp_arrived.begin(), b.warp_arrived.end(), 0u);
}

void run_block(block_state& b, order o) {
  std::vector<unsigned> sequence;
  while (b.live) {
    bool ran = false;
    arrange(sequence, b.threads.size(), o);
    for (unsigned i : sequence) {
      thread_record& t = b.threads[i];
      if (t.state != thread_state::ready) continue;
      resume(t);
      ran = true;
      if (b.waiting && b.waiting == b.live) {  // the barrier opens
        for (thread_record& u : b.threads)
          if (u.state == thread_state::at_barrier) u.state = thread_state::ready;
        b.waiting = 0;
        ++b.generation;
      }
    }
    if (!ran && b.live) report_deadlock(b);
  }
}

}  // namespace

cudaError_t launch(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes,
                   kernel_body body, void* context) {
  if (current_block) fail("a kernel launched a kernel: dynamic parallelism is not emulated");
  const std::size_t n = std::size_t{block.x} * block.y * block.z;
  const std::size_t blocks = std::size_t{grid.x} * grid.y * grid.z;
  // More than 1024 threads: an H200 with CUDA 13.0 (driver 580) answered cudaErrorInvalidValue,
  // not the cudaErrorInvalidConfiguration of older runtimes; the emulator answers as it did.
  if (n > 1024) {
    set_last_error(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  if (n == 0 || block.z > 64 || blocks == 0 || grid.y > 65535 || grid.z > 65535) {
    set_last_error(cudaErrorInvalidConfiguration);
    return cudaErrorInvalidConfiguration;
  }
  if (shared_bytes > max_dynamic_shared(kernel)) {
    set_last_error(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  const order o = current_order();
  // Exactly the requested size, so ASan sees accesses past the end.
  const std::unique_ptr<unsigned char[]> shared(new unsigned char[shared_bytes]);
  dynamic_shared = shared.get();
  block_state b;
  b.threads.resize(n);
  b.warp_arrived.resize((n + 31) / 32);
  for (unsigned i = 0; i < n; ++i) {
    thread_record& t = b.threads[i];
    t.linear = i;
    t.idx = {i % block.x, i / block.x % block.y, static_cast<unsigned>(i / (block.x * block.y))};
    t.stack = fiber_stack(i);
    t.tsan_fiber = sanitizer::tsan_create_fiber();
  }
  scheduler_tsan_fiber = sanitizer::tsan_current_fiber();
  block_dim = block;
  grid_dim = grid;
  current_block = &b;
  std::vector<unsigned> block_sequence;
  arrange(block_sequence, blocks, o);
  for (unsigned linear : block_sequence) {
    block_idx = {linear % grid.x, linear / grid.x % grid.y, linear / (grid.x * grid.y)};
    std::memset(shared.get(), 0xff, shared_bytes);  // NaN in f32, f16 and bf16
    sanitizer::tsan_release(&block_start_sync);
    start_threads(b, body, context);
    run_block(b, o);
    sanitizer::tsan_acquire(&block_end_sync);
  }
  current_block = nullptr;
  dynamic_shared = nullptr;
  for (thread_record& t : b.threads) sanitizer::tsan_destroy_fiber(t.tsan_fiber);
  return cudaSuccess;
}

}  // namespace attn_emulator
