/// \file
/// Launch mechanics: indices and dimensions in 3-D grids, dynamic shared memory per block,
/// launch errors, and the cost of a barrier.

#include <chrono>
#include <cstdio>

#include "testing.cuh"

namespace attn::kernel_test {
namespace {

// out[global thread] = the thread's coordinates, and the dimensions it sees.
__global__ void write_indices(int* out, int* dims) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  out[block * per_block + thread] =
      static_cast<int>(threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z + 1000 * blockIdx.x +
                       10000 * blockIdx.y + 100000 * blockIdx.z);
  if (block == 0 && thread == 0) {
    dims[0] = static_cast<int>(blockDim.x * 100 + blockDim.y * 10 + blockDim.z);
    dims[1] = static_cast<int>(gridDim.x * 100 + gridDim.y * 10 + gridDim.z);
    dims[2] = warpSize;
  }
}

TEST(Launch, IndicesAndDimensions) {
  ATTN_REQUIRE_DEVICE();
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  device_buffer<int> out(3 * 2 * 2 * 24), dims(3);
  ASSERT_EQ(cuda_detail::launch(write_indices, grid, block, 0, nullptr, out.get(), dims.get()),
            cudaSuccess);
  const std::vector<int> got = out.to_host();
  std::size_t i = 0;
  for (int bz = 0; bz < 2; ++bz)
    for (int by = 0; by < 2; ++by)
      for (int bx = 0; bx < 3; ++bx)
        for (int tz = 0; tz < 2; ++tz)
          for (int ty = 0; ty < 3; ++ty)
            for (int tx = 0; tx < 4; ++tx, ++i)
              ASSERT_EQ(got[i], tx + 10 * ty + 100 * tz + 1000 * bx + 10000 * by + 100000 * bz)
                  << "thread " << i;
  EXPECT_EQ(dims.to_host(), (std::vector<int>{432, 322, 32}));
}

// Every block sums its own slice through dynamic shared memory.
__global__ void block_sums(const float* in, float* out) {
  ATTN_DYNAMIC_SHARED(float, slice);  // (blockDim.x)
  slice[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0;
    for (unsigned i = 0; i < blockDim.x; ++i) sum += slice[i];
    out[blockIdx.x] = sum;
  }
}

TEST(Launch, DynamicSharedMemoryIsPerBlock) {
  ATTN_REQUIRE_DEVICE();
  const int blocks = 5, threads = 96;
  const std::vector<float> in = random_floats(blocks * threads, 1);
  device_buffer<float> d_in(in), d_out(blocks);
  ASSERT_EQ(cuda_detail::launch(block_sums, dim3(blocks), dim3(threads), threads * sizeof(float),
                                nullptr, d_in.get(), d_out.get()),
            cudaSuccess);
  const std::vector<float> out = d_out.to_host();
  for (int b = 0; b < blocks; ++b) {
    float expected = 0;
    for (int i = 0; i < threads; ++i) expected += in[b * threads + i];
    EXPECT_EQ(out[b], expected) << "block " << b;  // the same order of additions
  }
}

TEST(Launch, BadConfigurationsAreLaunchErrors) {
  ATTN_REQUIRE_DEVICE();
  device_buffer<float> in(2048), out(64);
  // 2048 threads in a block: cudaErrorInvalidValue from CUDA 13.0 on an H200 (seen there),
  // cudaErrorInvalidConfiguration from older runtimes; either way an error, never a launch.
  const cudaError_t too_many =
      cuda_detail::launch(block_sums, dim3(1), dim3(2048), 0, nullptr, in.get(), out.get());
  EXPECT_TRUE(too_many == cudaErrorInvalidValue || too_many == cudaErrorInvalidConfiguration)
      << cudaGetErrorString(too_many);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "cudaGetLastError resets the error";
  // Over 48 KiB of dynamic shared memory needs the kernel's opt-in first.
  const std::size_t big = 64 * 1024;
  EXPECT_NE(cuda_detail::launch(block_sums, dim3(1), dim3(32), big, nullptr, in.get(), out.get()),
            cudaSuccess);
  (void)cudaGetLastError();
  ASSERT_EQ(cuda_detail::allow_dynamic_shared(block_sums, big), cudaSuccess);
  EXPECT_EQ(cuda_detail::launch(block_sums, dim3(1), dim3(32), big, nullptr, in.get(), out.get()),
            cudaSuccess);
}

// The upper half of the block exits early; the barrier still opens for the lower half.
__global__ void early_exit_then_barrier(int* out) {
  __shared__ int values[32];
  if (threadIdx.x >= 32) return;
  values[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  out[blockIdx.x * 32 + threadIdx.x] = values[31 - threadIdx.x];
}

TEST(Launch, ExitedThreadsLeaveTheBarrier) {
  ATTN_REQUIRE_DEVICE();
  device_buffer<int> out(2 * 32);
  ASSERT_EQ(cuda_detail::launch(early_exit_then_barrier, dim3(2), dim3(64), 0, nullptr, out.get()),
            cudaSuccess);
  const std::vector<int> got = out.to_host();
  for (int i = 0; i < 2 * 32; ++i) EXPECT_EQ(got[i], 31 - i % 32) << i;
}

// Every thread passes 2 * rounds barriers; thread 0 checks the count between them.
__global__ void barrier_loop(int rounds, int* errors) {
  __shared__ int arrived;
  if (threadIdx.x == 0) arrived = 0;
  __syncthreads();
  for (int r = 1; r <= rounds; ++r) {
    atomicAdd(&arrived, 1);
    __syncthreads();
    if (threadIdx.x == 0 && arrived != r * static_cast<int>(blockDim.x)) atomicAdd(errors, 1);
    __syncthreads();
  }
}

TEST(Launch, BarrierCost) {
  ATTN_REQUIRE_DEVICE();
  const int threads = 256, rounds = 200;
  device_buffer<int> errors(std::vector<int>{0});
  ASSERT_EQ(cuda_detail::launch(barrier_loop, dim3(1), dim3(threads), 0, nullptr, 1, errors.get()),
            cudaSuccess);  // warm-up: the first launch maps the fiber stacks
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(
      cuda_detail::launch(barrier_loop, dim3(1), dim3(threads), 0, nullptr, rounds, errors.get()),
      cudaSuccess);
  EXPECT_EQ(errors.to_host()[0], 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ measure  ] %s: %.1f ns per barrier per thread (%d threads, %d barriers)\n",
              emulated ? "emulated" : "GPU", seconds * 1e9 / (threads * (2.0 * rounds + 1)),
              threads, 2 * rounds + 1);
}

}  // namespace
}  // namespace attn::kernel_test
