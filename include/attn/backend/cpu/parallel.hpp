#pragma once
/// \file
/// Work splitting for the CPU backend: a persistent pool of worker threads (started once, as
/// many as the hardware has at most) that take independent items of a call from an atomic
/// counter, the caller taking its share. Each item is computed the same way whatever thread
/// takes it, so results are bit-identical for every thread count. A worker that runs out of
/// work watches for the next call for 200 us, yielding its core, then blocks on a condition
/// variable (a blocked worker took tens of microseconds to wake, a tenth of a T 256 call); the
/// caller waits for its helpers the same way. Concurrent callers share the pool.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "attn/core/config.hpp"
#include "attn/core/error.hpp"
#include "attn/core/policy.hpp"

namespace attn::cpu_detail {

/// A per-thread, 64-byte aligned buffer of at least n elements of T, reused across calls
/// (grown, never shrunk, not zeroed). `Use` (any tag type) keeps apart buffers that are live at
/// the same time on one thread, such as a call's output parts and its items' scratch.
template <class T, class Use = void>
T* thread_scratch(std::size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n + 64 / sizeof(T)) buffer.resize(n + 64 / sizeof(T));
  const auto p = reinterpret_cast<std::uintptr_t>(buffer.data());
  return reinterpret_cast<T*>((p + 63) & ~std::uintptr_t(63));
}

inline int hardware_threads() {
  static const int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return n;
}

/// Worker count for `items` items of about `flops_per_item` each: at most policy.threads
/// (0: all hardware threads) and the hardware's thread count, and one per ~4 MFLOP of work so
/// small calls stay on the caller. \throws shape_error for a negative thread count.
inline int worker_count(const cpu_policy& policy, index_t items, double flops_per_item) {
  if (policy.threads < 0)
    throw shape_error("attn::cpu_policy: threads is " + std::to_string(policy.threads) +
                      "; it must be >= 0 (0: all hardware threads)");
  const int cap =
      std::min(policy.threads > 0 ? policy.threads : hardware_threads(), hardware_threads());
  const double by_work = double(items) * flops_per_item / 4e6;
  return static_cast<int>(std::clamp<double>(std::min<double>(by_work, double(items)), 1, cap));
}

/// The process-wide worker pool.
class thread_pool {
 public:
  static thread_pool& instance() {
    static thread_pool* pool = new thread_pool;  // never destroyed: workers may outlive main
    return *pool;
  }

  /// Calls f(i) for every i in [0, n) on the caller and up to `helpers` pool workers. The
  /// first exception thrown by any f is rethrown here once every participant has stopped.
  template <class F>
  void run(int helpers, index_t n, F& f) {
    job j(
        n, helpers, [](void* c, index_t i) { (*static_cast<F*>(c))(i); }, &f);
    {
      const std::lock_guard lock(mutex_);
      while (int(threads_.size()) < std::min(helpers, hardware_threads() - 1))
        threads_.emplace_back([this] { work(); });
      queue_.push_back(&j);
      queued_.store(queue_.size(), std::memory_order_release);
    }
    wake_.notify_all();
    j.take_items();
    std::unique_lock lock(mutex_);
    std::erase(queue_, &j);  // no worker joins once the caller is done with the items
    queued_.store(queue_.size(), std::memory_order_relaxed);
    // The helpers are finishing their last items: watch for that a while before blocking.
    lock.unlock();
    watch([&] {
      const std::lock_guard check(mutex_);
      return j.joined == j.left;
    });
    lock.lock();
    j.done.wait(lock, [&] { return j.joined == j.left; });
    if (j.error) std::rethrow_exception(j.error);
  }

 private:
  struct job {
    job(index_t n_, int helpers_, void (*call_)(void*, index_t), void* context_)
        : n(n_), helpers(helpers_), call(call_), context(context_) {}
    index_t n;
    int helpers;
    void (*call)(void*, index_t);
    void* context;
    std::atomic<index_t> next{0};
    int joined = 0, left = 0;  // pool workers, under the pool's mutex
    std::condition_variable done;
    std::mutex error_mutex;
    std::exception_ptr error;

    void take_items() {
      try {
        for (index_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) call(context, i);
      } catch (...) {
        const std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(n, std::memory_order_relaxed);
      }
    }
  };

  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (queue_.empty()) {  // watch for the next call a while before blocking
        lock.unlock();
        watch([&] { return queued_.load(std::memory_order_acquire) != 0; });
        lock.lock();
      }
      wake_.wait(lock, [&] { return !queue_.empty(); });
      job* j = queue_.front();
      if (++j->joined == j->helpers) {  // it has all the helpers it asked for
        queue_.pop_front();
        queued_.store(queue_.size(), std::memory_order_relaxed);
      }
      lock.unlock();
      j->take_items();
      lock.lock();
      if (++j->left == j->joined) j->done.notify_all();
    }
  }

  /// Calls ready() until it returns true or spin_us have passed, yielding the core in between:
  /// a thread blocked on a condition variable takes tens of microseconds to wake.
  template <class P>
  static void watch(P&& ready) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
    while (!ready() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }
  static constexpr int spin_us = 200;

  std::mutex mutex_;
  std::atomic<std::size_t> queued_{0};  // queue_.size(), readable without the mutex
  std::condition_variable wake_;
  std::deque<job*> queue_;  // calls that still take helpers
  std::vector<std::thread> threads_;
};

/// Calls f(i) for every i in [0, n) on up to `workers` threads (the caller is one of them).
/// The first exception thrown by any f is rethrown here after all workers have stopped.
template <class F>
void parallel_for(int workers, index_t n, F&& f) {
  if (workers <= 1 || n <= 1) {
    for (index_t i = 0; i < n; ++i) f(i);
    return;
  }
  thread_pool::instance().run(std::min<index_t>(workers, n) - 1, n, f);
}

}  // namespace attn::cpu_detail
