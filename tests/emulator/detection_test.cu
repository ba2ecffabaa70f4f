/// \file
/// The harness finds bugs: each kernel here has one, and each test shows it is caught (missing
/// barrier, divergent barrier, incomplete or divergent shuffle, unwaited cp.async, reads of
/// dynamic shared memory never written, stack overflow). Emulated only.

#include <attn/backend/cuda/ptx.cuh>
#include <cmath>
#include <string>

#include "testing.cuh"

namespace attn::kernel_test {
namespace {

constexpr bool tsan_build =
#if defined(__SANITIZE_THREAD__)
    true;
#else
    false;
#endif

// Thread 0 writes a shared value the others read: a barrier is missing.
__global__ void broadcast_without_barrier(int* out) {
  __shared__ int value;
  if (threadIdx.x == 0) value = static_cast<int>(blockIdx.x) * 1000 + 7;
  out[blockIdx.x * blockDim.x + threadIdx.x] = value;  // needs __syncthreads() before
}

// How many threads read a wrong value in the given fiber order.
int wrong_broadcasts(attn_emulator::order o) {
  const attn_emulator::order before = attn_emulator::current_order();
  attn_emulator::set_order(o);
  const int blocks = 4, threads = 64;
  device_buffer<int> out(blocks * threads);
  EXPECT_EQ(cuda_detail::launch(broadcast_without_barrier, dim3(blocks), dim3(threads), 0, nullptr,
                                out.get()),
            cudaSuccess);
  attn_emulator::set_order(before);
  const std::vector<int> got = out.to_host();
  int wrong = 0;
  for (int i = 0; i < blocks * threads; ++i) wrong += got[i] != i / threads * 1000 + 7;
  return wrong;
}

TEST(Detection, MissingBarrierFailsInSomeOrder) {
  if (tsan_build) GTEST_SKIP() << "the race halts the TSan build; MissingBarrierIsReportedByTsan";
  EXPECT_EQ(wrong_broadcasts(attn_emulator::order::forward), 0) << "invisible in forward order";
  EXPECT_GT(wrong_broadcasts(attn_emulator::order::reverse), 0);
  EXPECT_GT(wrong_broadcasts(attn_emulator::order::random), 0);
}

TEST(Detection, MissingBarrierIsReportedByTsan) {
  if (!tsan_build) GTEST_SKIP() << "needs the TSan build (preset tsan)";
  // Forward order, where the output is right: TSan reports the race all the same.
  EXPECT_DEATH(wrong_broadcasts(attn_emulator::order::forward),
               "ThreadSanitizer: data race(.|\n)*broadcast_without_barrier");
}

constexpr int low_barrier_line = __LINE__ + 5;
constexpr int high_barrier_line = __LINE__ + 6;
// Half the block waits at one barrier, half at another.
__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

TEST(Detection, DivergentBarrierAborts) {
  device_buffer<int> out(64);
  const std::string low = std::to_string(low_barrier_line),
                    high = std::to_string(high_barrier_line);
  EXPECT_DEATH(
      (void)cuda_detail::launch(divergent_barrier, dim3(1), dim3(64), 0, nullptr, out.get()),
      "divergent __syncthreads in block \\(0,0,0\\): thread .* waits at "
      ".*detection_test.cu:(" +
          low + "|" + high +
          "), thread .* arrived at "
          ".*detection_test.cu:(" +
          low + "|" + high + ")");
}

constexpr int shuffle_line = __LINE__ + 4;
// The upper half-warp leaves before a full-warp shuffle.
__global__ void incomplete_shuffle(float* out) {
  if (threadIdx.x >= 16) return;
  const float v = __shfl_xor_sync(0xffffffffu, out[threadIdx.x], 1);
  out[threadIdx.x] = v;
}

TEST(Detection, IncompleteShuffleAborts) {
  device_buffer<float> out(std::vector<float>(32, 1.0f));
  EXPECT_DEATH(
      (void)cuda_detail::launch(incomplete_shuffle, dim3(1), dim3(32), 0, nullptr, out.get()),
      "deadlock in block \\(0,0,0\\):\n  incomplete __shfl_xor_sync at "
      ".*detection_test.cu:" +
          std::to_string(shuffle_line) +
          " in warp 0: lanes 0xffff0000 never arrived \\(lane 16 exited\\)");
}

constexpr int first_shuffle_line = __LINE__ + 5;
// Even and odd lanes shuffle at different places with the same full mask.
__global__ void divergent_shuffle(int* out) {
  int v = static_cast<int>(threadIdx.x);
  if (threadIdx.x % 2)
    v = __shfl_down_sync(0xffffffffu, v, 1);
  else
    v = __shfl_down_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

TEST(Detection, DivergentShuffleAborts) {
  device_buffer<int> out(32);
  EXPECT_DEATH(
      (void)cuda_detail::launch(divergent_shuffle, dim3(1), dim3(32), 0, nullptr, out.get()),
      "divergent warp collective in block \\(0,0,0\\), warp 0: lane .* at "
      "__shfl_down_sync .*detection_test.cu:(" +
          std::to_string(first_shuffle_line) + "|" + std::to_string(first_shuffle_line + 2) + ")");
}

// Reads the dynamic shared memory nobody wrote.
__global__ void read_unwritten_shared(float* out) {
  ATTN_DYNAMIC_SHARED(float, smem);
  out[threadIdx.x] = smem[threadIdx.x];
}

TEST(Detection, DynamicSharedMemoryStartsAsNaN) {
  device_buffer<float> out(std::vector<float>(32, 0.0f));
  ASSERT_EQ(cuda_detail::launch(read_unwritten_shared, dim3(2), dim3(32), 32 * sizeof(float),
                                nullptr, out.get()),
            cudaSuccess);
  for (float v : out.to_host()) EXPECT_TRUE(std::isnan(v));
}

// Each thread copies 16 bytes with cp.async, then reads them with or without waiting.
__global__ void cp_async_read(const float* in, float* out, bool wait) {
  __shared__ __align__(16) float buffer[4 * 32];
  float* mine = &buffer[threadIdx.x * 4];
  cuda_detail::cp_async_16(mine, in + threadIdx.x * 4);
  cuda_detail::cp_async_commit();
  if (wait) cuda_detail::cp_async_wait<0>();
  for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = mine[i];
  cuda_detail::cp_async_wait<0>();
}

TEST(Detection, MissingCpAsyncWaitReadsNaN) {
  const std::vector<float> in = random_floats(128, 12);
  device_buffer<float> d_in(in), out(128);
  for (bool wait : {false, true}) {
    ASSERT_EQ(cuda_detail::launch(cp_async_read, dim3(1), dim3(32), 0, nullptr, d_in.get(),
                                  out.get(), wait),
              cudaSuccess);
    const std::vector<float> got = out.to_host();
    for (int i = 0; i < 128; ++i) {
      if (wait) {
        EXPECT_EQ(got[i], in[i]) << i;
      } else {
        EXPECT_TRUE(std::isnan(got[i])) << i;
      }
    }
  }
}

// Recurses far past a 64 KiB stack.
__device__ int deep(int n) {
  volatile char frame[1024];
  frame[0] = static_cast<char>(n);
  return n == 0 ? 0 : deep(n - 1) + frame[0];
}

__global__ void overflow_stack(int* out) { out[threadIdx.x] = deep(4096); }

TEST(Detection, StackOverflowIsACleanCrash) {
  device_buffer<int> out(32);
  EXPECT_DEATH((void)cuda_detail::launch(overflow_stack, dim3(1), dim3(32), 0, nullptr, out.get()),
               "stack overflow|stack-overflow");
}

}  // namespace
}  // namespace attn::kernel_test
