// The CPU backend is re-entrant and deterministic: the same call from 8 threads at once, and
// the same call with any thread count, gives bit-identical results; its worker pool starts no
// threads per call and never more than the hardware has, and a warm decode step allocates
// nothing (this binary's operator new counts what it is asked for while a test listens).

#include <algorithm>
#include <atomic>
#include <attn/attn.hpp>
#include <cstdlib>
#include <functional>
#include <new>
#include <thread>

#include "support/testing.hpp"

namespace attn::test {
/// Allocations through operator new (a thread's start included) while `listening`.
std::atomic<bool> listening{false};
std::atomic<long> allocations{0};
}  // namespace attn::test

// (GCC takes free() in a replacement operator delete for a mismatch with the new expressions
// it inlines them into.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  if (attn::test::listening.load(std::memory_order_relaxed)) ++attn::test::allocations;
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void* operator new(std::size_t n, std::align_val_t al) {
  if (attn::test::listening.load(std::memory_order_relaxed)) ++attn::test::allocations;
  const auto a = static_cast<std::size_t>(al);
  if (void* p = std::aligned_alloc(a, (std::max<std::size_t>(n, 1) + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace attn::test {
namespace {

using C = backend_case<cpu_policy, float>;

TEST(Threads, ConcurrentCallsAreBitIdentical) {
  const shape s{2, 3, 200, 200, 64, 64};
  const qkv<C> in(s);
  host_tensor<float, 4> want({2, 3, 200, 64});
  attention(cpu, in.q.view(), in.k.view(), in.v.view(), want.view(), {.causal = true});
  std::vector<host_tensor<float, 4>> got(8, host_tensor<float, 4>({2, 3, 200, 64}));
  {
    std::vector<std::jthread> pool;
    for (auto& g : got)
      pool.emplace_back([&] {
        attention(cpu_policy{.threads = 2}, in.q.view(), in.k.view(), in.v.view(), g.view(),
                  {.causal = true});
      });
  }
  for (const auto& g : got) EXPECT_TRUE(identical(g, want));
}

TEST(Threads, ResultsDoNotDependOnTheThreadCount) {
  const shape s{1, 4, 300, 300, 64, 64};
  const qkv<C> in(s);
  host_tensor<float, 4> one({1, 4, 300, 64}), many({1, 4, 300, 64});
  host_tensor<float, 4> s1({1, 4, 300, 300}), s2({1, 4, 300, 300});
  for (bool causal : {false, true})
    for (int threads : {2, 3, 8, 1000}) {
      attention(cpu_policy{.threads = 1}, in.q.view(), in.k.view(), in.v.view(), one.view(),
                {.causal = causal});
      attention(cpu_policy{.threads = threads}, in.q.view(), in.k.view(), in.v.view(), many.view(),
                {.causal = causal});
      EXPECT_TRUE(identical(one, many)) << threads << " threads";
    }
  scaled_scores(cpu_policy{.threads = 1}, in.q.view(), in.k.view(), s1.view());
  scaled_scores(cpu_policy{.threads = 4}, in.q.view(), in.k.view(), s2.view());
  softmax_rows(cpu_policy{.threads = 1}, s1.view());
  softmax_rows(cpu_policy{.threads = 4}, s2.view());
  EXPECT_TRUE(identical(s1, s2));
}

TEST(Threads, NegativeThreadCountsAreRejected) {
  const shape s{1, 1, 3, 3, 4, 4};
  const qkv<C> in(s);
  host_tensor<float, 4> o({1, 1, 3, 4});
  EXPECT_THROW(
      attention(cpu_policy{.threads = -1}, in.q.view(), in.k.view(), in.v.view(), o.view()),
      shape_error);
}

// An exception inside a worker reaches the caller, and the pool keeps working afterwards.
TEST(Threads, AnExceptionInAWorkerPropagates) {
  std::atomic<int> ran{0};
  EXPECT_THROW(cpu_detail::parallel_for(2, 64,
                                        [&](index_t i) {
                                          ++ran;
                                          if (i == 33) throw std::bad_alloc();
                                        }),
               std::bad_alloc);
  std::atomic<int> count{0};
  cpu_detail::parallel_for(2, 100, [&](index_t) { ++count; });
  EXPECT_EQ(count, 100);
}

/// A decode step, through the cache and through plain views, on 1 and 2 threads, Tq 1 and 4,
/// with and without lse, rows of one chunk (written in place) and of several (merged): once
/// warm, not one allocation (and so no thread started). On one thread the second call must
/// allocate nothing. With a worker, the items fall to the threads as they come, so a worker
/// may first need its scratch in a later call; buffers only grow, so some call of the next
/// few must allocate nothing, and one that allocates every time fails.
TEST(Threads, AWarmDecodeStepAllocatesNothing) {
  const index_t B = 2, H = 12, Hkv = 4, D = 64, capacity = 3000;
  kv_cache<float> cache({.batch = B, .kv_heads = Hkv, .capacity = capacity, .head_dim = D});
  for (index_t i = 0; i < cache.keys().size(); ++i) {
    cache.keys().data()[i] = float(i % 97) / 97.0f - 0.5f;
    cache.values().data()[i] = float(i % 89) / 89.0f - 0.5f;
  }
  cache.set_length(0, 2500);  // 3 chunks, merged
  cache.set_length(1, 700);
  for (index_t Tq : {1, 4}) {
    host_tensor<float, 4> q({B, H, Tq, D}), o({B, H, Tq, D});
    host_tensor<float, 3> lse({B, H, Tq});
    for (index_t i = 0; i < q.size(); ++i) q.data()[i] = float(i % 13) / 13.0f - 0.5f;
    const tensor_view<const float, 4> k{
        cache.keys().data(), {B, Hkv, 900, D}, cache.keys().strides()};
    const tensor_view<const float, 4> v{
        cache.values().data(), {B, Hkv, 900, D}, cache.values().strides()};
    for (int threads : {1, 2}) {
      const cpu_policy p{.threads = threads};
      const std::function<void()> steps[] = {
          [&] { attention(p, q.view(), cache, o.view(), {.causal = true}); },
          [&] { attention(p, q.view(), cache, o.view(), lse.view(), {.causal = true}); },
          [&] { attention(p, q.view(), k, v, o.view(), lse.view(), {.causal = true}); },
      };
      for (const auto& step : steps) {
        step();  // warm: the pool's threads and the caller's buffers
        long fewest = -1;
        for (int call = 0; call < (threads == 1 ? 1 : 20) && fewest != 0; ++call) {
          allocations = 0;
          listening = true;
          step();
          listening = false;
          fewest = fewest < 0 ? allocations.load() : std::min(fewest, allocations.load());
        }
        EXPECT_EQ(fewest, 0) << "Tq " << Tq << ", " << threads << " threads";
      }
    }
  }
}

}  // namespace
}  // namespace attn::test
