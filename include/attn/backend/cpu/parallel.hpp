#pragma once
/// \file
/// Work splitting for the CPU backend: independent items handed out from an atomic counter to
/// a few std::threads. Each item is computed the same way whatever thread takes it, so results
/// are bit-identical for every thread count. Workers block in join(), never spin.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "attn/core/config.hpp"
#include "attn/core/policy.hpp"

namespace attn::cpu_detail {

/// A per-thread, 64-byte aligned buffer of at least n elements of T, reused across calls.
template <class T>
T* thread_scratch(std::size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n + 64 / sizeof(T)) buffer.resize(n + 64 / sizeof(T));
  const auto p = reinterpret_cast<std::uintptr_t>(buffer.data());
  return reinterpret_cast<T*>((p + 63) & ~std::uintptr_t(63));
}

/// Worker count for `items` items of about `flops_per_item` each: at most policy.threads
/// (0: all hardware threads), and one per ~4 MFLOP of work so small calls stay on the caller.
inline int worker_count(const cpu_policy& policy, index_t items, double flops_per_item) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int cap = policy.threads > 0 ? policy.threads : hw;
  const double by_work = double(items) * flops_per_item / 4e6;
  return static_cast<int>(std::clamp<double>(std::min<double>(by_work, double(items)), 1, cap));
}

/// Calls f(i) for every i in [0, n) on up to `workers` threads (the caller is one of them).
/// The first exception thrown by any f is rethrown here after all workers have stopped.
template <class F>
void parallel_for(int workers, index_t n, F&& f) {
  if (workers <= 1 || n <= 1) {
    for (index_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<index_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto run = [&] {
    try {
      for (index_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) f(i);
    } catch (...) {
      const std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
      next.store(n, std::memory_order_relaxed);
    }
  };
  std::vector<std::jthread> pool;
  pool.reserve(static_cast<std::size_t>(workers - 1));
  for (int w = 1; w < workers; ++w) pool.emplace_back(run);
  run();
  pool.clear();  // joins
  if (error) std::rethrow_exception(error);
}

}  // namespace attn::cpu_detail
