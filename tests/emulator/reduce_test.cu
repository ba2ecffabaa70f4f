/// \file
/// Warp collectives against plain loops: a block reduction with shuffles and atomics, every
/// shuffle mode with sub-warp widths, votes, and a block softmax using the fast-math intrinsics.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "testing.cuh"

namespace attn::kernel_test {
namespace {

constexpr unsigned full_mask = 0xffffffffu;

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(full_mask, v, offset);
  return v;  // in lane 0
}

// sums[block] = the block's slice summed with shuffles; total += it atomically.
__global__ void block_sum(const float* in, float* sums, float* total) {
  __shared__ float partial[32];  // one per warp
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float v = warp_sum(in[blockIdx.x * blockDim.x + threadIdx.x]);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < blockDim.x / 32 ? partial[lane] : 0.0f;
    for (int mask = 16; mask > 0; mask /= 2) s += __shfl_xor_sync(full_mask, s, mask);
    if (lane == 0) {
      sums[blockIdx.x] = s;
      atomicAdd(total, s);
    }
  }
}

TEST(Reduce, BlockSumWithShuffles) {
  ATTN_REQUIRE_DEVICE();
  const int blocks = 6, threads = 256;
  const std::vector<float> in = random_floats(blocks * threads, 2);
  device_buffer<float> d_in(in), sums(blocks), total(std::vector<float>{0.0f});
  ASSERT_EQ(cuda_detail::launch(block_sum, dim3(blocks), dim3(threads), 0, nullptr, d_in.get(),
                                sums.get(), total.get()),
            cudaSuccess);
  const std::vector<float> got = sums.to_host();
  double all = 0;
  for (int b = 0; b < blocks; ++b) {
    double expected = 0;
    for (int i = 0; i < threads; ++i) expected += in[b * threads + i];
    EXPECT_NEAR(got[b], expected, 1e-4) << "block " << b;
    all += expected;
  }
  EXPECT_NEAR(total.to_host()[0], all, 1e-3);
}

// CUDA has atomicMax for integers only; a float max is built from atomicCAS on its bits.
__device__ void atomic_max_float(float* address, float value) {
  int* bits = reinterpret_cast<int*>(address);
  int old = atomicAdd(bits, 0);  // an atomic read: a plain one would race with the CAS
  while (__int_as_float(old) < value) {
    const int seen = atomicCAS(bits, old, __float_as_int(value));
    if (seen == old) break;
    old = seen;
  }
}

__global__ void maxima(const float* in, int* int_max, float* float_max) {
  const float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  atomicMax(int_max, static_cast<int>(v * 1000.0f));
  atomic_max_float(float_max, v);
}

TEST(Reduce, AtomicMaxIntAndFloat) {
  ATTN_REQUIRE_DEVICE();
  const std::vector<float> in = random_floats(4 * 128, 3);
  device_buffer<float> d_in(in), float_max(std::vector<float>{-2.0f});
  device_buffer<int> int_max(std::vector<int>{-5000});
  ASSERT_EQ(cuda_detail::launch(maxima, dim3(4), dim3(128), 0, nullptr, d_in.get(), int_max.get(),
                                float_max.get()),
            cudaSuccess);
  const float expected = *std::max_element(in.begin(), in.end());
  EXPECT_EQ(float_max.to_host()[0], expected);
  EXPECT_EQ(int_max.to_host()[0], static_cast<int>(expected * 1000.0f));
}

// Every shuffle mode at widths 32 and 8, on a 64-bit value to check both halves travel.
__global__ void shuffles(const int* args, long long* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const long long v = (static_cast<long long>(threadIdx.x) << 32) | (1000 + threadIdx.x);
  long long* o = out + threadIdx.x * 8;
  o[0] = __shfl_sync(full_mask, v, args[lane]);
  o[1] = __shfl_sync(full_mask, v, args[lane], 8);
  o[2] = __shfl_up_sync(full_mask, v, 3);
  o[3] = __shfl_up_sync(full_mask, v, 3, 8);
  o[4] = __shfl_down_sync(full_mask, v, 5);
  o[5] = __shfl_down_sync(full_mask, v, 5, 8);
  o[6] = __shfl_xor_sync(full_mask, v, 9);
  o[7] = __shfl_xor_sync(full_mask, v, 6, 8);
}

// The source lane of each shuffle as the CUDA Programming Guide describes it.
int expected_source(int kind, int lane, int arg) {
  const int width = kind % 2 ? 8 : 32, base = lane / width * width;
  switch (kind / 2) {
    case 0:
      return base + arg % width;
    case 1:
      return lane - base >= 3 ? lane - 3 : lane;
    case 2:
      return lane - base + 5 < width ? lane + 5 : lane;
    default: {
      const int source = lane ^ (width == 32 ? 9 : 6);
      return source < base + width ? source : lane;  // later groups are out of reach
    }
  }
}

TEST(Warp, ShufflesFollowCudaRules) {
  ATTN_REQUIRE_DEVICE();
  std::vector<int> args(32);
  for (int lane = 0; lane < 32; ++lane) args[lane] = (lane * 7 + 3) % 41;  // some >= 32
  device_buffer<int> d_args(args);
  device_buffer<long long> out(64 * 8);
  ASSERT_EQ(cuda_detail::launch(shuffles, dim3(1), dim3(64), 0, nullptr, d_args.get(), out.get()),
            cudaSuccess);
  const std::vector<long long> got = out.to_host();
  for (int t = 0; t < 64; ++t)
    for (int kind = 0; kind < 8; ++kind) {
      const int source = t / 32 * 32 + expected_source(kind, t % 32, args[t % 32]);
      EXPECT_EQ(got[t * 8 + kind], (static_cast<long long>(source) << 32) | (1000 + source))
          << "thread " << t << " kind " << kind;
    }
}

// Votes over the whole warp and over its lower half, then __syncwarp.
__global__ void votes(unsigned* out) {
  const unsigned lane = threadIdx.x % 32;
  out[threadIdx.x * 4 + 0] = __ballot_sync(full_mask, lane % 3 == 0);
  if (lane < 16) {
    out[threadIdx.x * 4 + 1] = static_cast<unsigned>(__any_sync(0xffffu, lane == 7));
    out[threadIdx.x * 4 + 2] = static_cast<unsigned>(__all_sync(0xffffu, lane < 16));
  } else {
    out[threadIdx.x * 4 + 1] = static_cast<unsigned>(__any_sync(0xffff0000u, lane == 7));
    out[threadIdx.x * 4 + 2] = static_cast<unsigned>(__all_sync(0xffff0000u, lane < 20));
  }
  __syncwarp();
  out[threadIdx.x * 4 + 3] = out[(threadIdx.x ^ 1) * 4 + 1];  // a neighbour's, after __syncwarp
}

TEST(Warp, Votes) {
  ATTN_REQUIRE_DEVICE();
  device_buffer<unsigned> out(32 * 4);
  ASSERT_EQ(cuda_detail::launch(votes, dim3(1), dim3(32), 0, nullptr, out.get()), cudaSuccess);
  const std::vector<unsigned> got = out.to_host();
  for (unsigned lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(got[lane * 4 + 0], 0x49249249u) << lane;
    EXPECT_EQ(got[lane * 4 + 1], lane < 16 ? 1u : 0u) << lane;
    EXPECT_EQ(got[lane * 4 + 2], lane < 16 ? 1u : 0u) << lane;
    EXPECT_EQ(got[lane * 4 + 3], (lane ^ 1) < 16 ? 1u : 0u) << lane;
  }
}

// out[row] = softmax(in[row]) for one row per block: max and sum reduced with shuffles.
__global__ void softmax_rows(const float* in, float* out) {
  __shared__ float partial[32];
  __shared__ float row_max, row_sum;
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float x = in[blockIdx.x * blockDim.x + threadIdx.x];
  float m = x;
  for (int mask = 16; mask > 0; mask /= 2) m = fmaxf(m, __shfl_xor_sync(full_mask, m, mask));
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    row_max = partial[0];
    for (unsigned w = 1; w < warps; ++w) row_max = fmaxf(row_max, partial[w]);
  }
  __syncthreads();
  const float e = __expf(x - row_max);
  float s = e;
  for (int mask = 16; mask > 0; mask /= 2) s += __shfl_xor_sync(full_mask, s, mask);
  __syncthreads();  // everyone has read partial[] before it is reused
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    row_sum = 0;
    for (unsigned w = 0; w < warps; ++w) row_sum += partial[w];
  }
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = __fdividef(e, row_sum);
}

TEST(Reduce, BlockSoftmax) {
  ATTN_REQUIRE_DEVICE();
  const int rows = 3, cols = 128;
  std::vector<float> in = random_floats(rows * cols, 4);
  for (float& v : in) v *= 8.0f;
  device_buffer<float> d_in(in), out(rows * cols);
  ASSERT_EQ(
      cuda_detail::launch(softmax_rows, dim3(rows), dim3(cols), 0, nullptr, d_in.get(), out.get()),
      cudaSuccess);
  const std::vector<float> got = out.to_host();
  for (int r = 0; r < rows; ++r) {
    const float* x = &in[r * cols];
    const double m = *std::max_element(x, x + cols);
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += std::exp(x[c] - m);
    for (int c = 0; c < cols; ++c) {
      const double expected = std::exp(x[c] - m) / sum;
      EXPECT_NEAR(got[r * cols + c], expected, 1e-5 * expected + 1e-7) << r << ", " << c;
    }
  }
}

}  // namespace
}  // namespace attn::kernel_test
