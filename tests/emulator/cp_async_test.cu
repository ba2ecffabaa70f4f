/// \file
/// cp.async against plain loops: a double-buffered global -> shared pipeline with commit and
/// wait groups, the .ca sizes, zero fill; and ex2.approx.

#include <attn/backend/cuda/ptx.cuh>
#include <cmath>

#include "testing.cuh"

namespace attn::kernel_test {
namespace {

constexpr int stage_floats = 4 * 64;  // 16 bytes per thread of a 64-thread block

// out = 2 * in, streamed through two shared-memory stages: tile i + 1 is in flight while
// tile i is read.
__global__ void pipelined_copy(const float* in, float* out, int tiles) {
  __shared__ __align__(16) float stages[2][stage_floats];
  const int i = static_cast<int>(threadIdx.x) * 4;
  cuda_detail::cp_async_16(&stages[0][i], in + i);
  cuda_detail::cp_async_commit();
  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles)
      cuda_detail::cp_async_16(&stages[(t + 1) % 2][i], in + (t + 1) * stage_floats + i);
    cuda_detail::cp_async_commit();   // possibly empty: keeps one group per tile
    cuda_detail::cp_async_wait<1>();  // tile t has landed (for this thread's copies)
    __syncthreads();                  // ... and for everyone's
    // Read a neighbour's part, so the barrier matters.
    const int j = (i + 4 * 5) % stage_floats;
    for (int e = 0; e < 4; ++e) out[t * stage_floats + j + e] = 2.0f * stages[t % 2][j + e];
    __syncthreads();  // everyone is done with the stage before it is refilled
  }
}

TEST(CpAsync, DoubleBufferedPipeline) {
  ATTN_REQUIRE_DEVICE();
  const int tiles = 5;
  const std::vector<float> in = random_floats(tiles * stage_floats, 9);
  device_buffer<float> d_in(in), d_out(in.size());
  ASSERT_EQ(cuda_detail::launch(pipelined_copy, dim3(1), dim3(64), 0, nullptr, d_in.get(),
                                d_out.get(), tiles),
            cudaSuccess);
  const std::vector<float> out = d_out.to_host();
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], 2.0f * in[i]) << i;
}

// Thread 0 copies with each size and a partial source; the rest stays zero-filled.
__global__ void copy_sizes(const float* in, float* out) {
  __shared__ __align__(16) float buffer[4 * 5];
  if (threadIdx.x == 0) {
    cuda_detail::cp_async_ca<4>(&buffer[0], in);
    cuda_detail::cp_async_ca<8>(&buffer[4], in + 4);
    cuda_detail::cp_async_ca<16>(&buffer[8], in + 8);
    cuda_detail::cp_async_16(&buffer[12], in + 12, 8);  // two floats, then zeros
    cuda_detail::cp_async_16(&buffer[16], in + 16, 0);  // zeros only
    cuda_detail::cp_async_wait_all();
    for (int i = 0; i < 20; ++i) out[i] = buffer[i];
  }
}

TEST(CpAsync, SizesAndZeroFill) {
  ATTN_REQUIRE_DEVICE();
  const std::vector<float> in = random_floats(20, 10);
  device_buffer<float> d_in(in), d_out(std::vector<float>(20, -7.0f));
  ASSERT_EQ(cuda_detail::launch(copy_sizes, dim3(1), dim3(32), 0, nullptr, d_in.get(), d_out.get()),
            cudaSuccess);
  const std::vector<float> out = d_out.to_host();
  const std::vector<bool> copied = {1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 20; ++i) {
    if (copied[i]) {
      EXPECT_EQ(out[i], in[i]) << i;
    } else if (i >= 12) {
      EXPECT_EQ(out[i], 0.0f) << i;  // zero fill; 1-3 and 6-7 were never written
    }
  }
}

__global__ void exp2_values(const float* in, float* out) {
  out[threadIdx.x] = cuda_detail::ex2_approx(in[threadIdx.x]);
}

TEST(Ex2Approx, WithinTwoUlpOfExp2) {
  ATTN_REQUIRE_DEVICE();
  std::vector<float> in = random_floats(128, 11);
  for (float& v : in) v *= 60.0f;
  in[0] = -INFINITY, in[1] = 0.0f, in[2] = 127.5f, in[3] = -126.0f;
  device_buffer<float> d_in(in), d_out(in.size());
  ASSERT_EQ(
      cuda_detail::launch(exp2_values, dim3(1), dim3(128), 0, nullptr, d_in.get(), d_out.get()),
      cudaSuccess);
  const std::vector<float> out = d_out.to_host();
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 1.0f);
  for (std::size_t i = 2; i < in.size(); ++i) {
    const double expected = std::exp2(double(in[i]));
    EXPECT_NEAR(out[i], expected, expected * 2.5e-7) << "2^" << in[i];
  }
}

}  // namespace
}  // namespace attn::kernel_test
