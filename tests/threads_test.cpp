// The CPU backend is re-entrant and deterministic: the same call from 8 threads at once, and
// the same call with any thread count, gives bit-identical results; its worker pool starts no
// threads per call and never more than the hardware has.

#include <attn/attn.hpp>
#include <thread>

#include "support/testing.hpp"

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

}  // namespace
}  // namespace attn::test
