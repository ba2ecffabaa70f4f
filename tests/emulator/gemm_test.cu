/// \file
/// A tiled shared-memory GEMM against plain loops (odd sizes, so the edge tiles are partial),
/// and the emulator's speed on it.

#include <chrono>
#include <cstdio>

#include "testing.cuh"

namespace attn::kernel_test {
namespace {

constexpr int tile = 16;

// c (m, n) = a (m, k) b (k, n), row-major; one 16 x 16 block per output tile, the a and b
// tiles staged in dynamic shared memory.
__global__ void tiled_gemm(const float* a, const float* b, float* c, int m, int n, int k) {
  ATTN_DYNAMIC_SHARED(float, smem);
  float* a_tile = smem;                // (tile, tile)
  float* b_tile = smem + tile * tile;  // (tile, tile)
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int row = static_cast<int>(blockIdx.y) * tile + ty;
  const int col = static_cast<int>(blockIdx.x) * tile + tx;
  float sum = 0.0f;
  for (int k0 = 0; k0 < k; k0 += tile) {
    a_tile[ty * tile + tx] = row < m && k0 + tx < k ? a[row * k + k0 + tx] : 0.0f;
    b_tile[ty * tile + tx] = k0 + ty < k && col < n ? b[(k0 + ty) * n + col] : 0.0f;
    __syncthreads();
    for (int i = 0; i < tile; ++i) sum += a_tile[ty * tile + i] * b_tile[i * tile + tx];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = sum;
}

// Runs tiled_gemm and checks it against a double-precision loop; returns the kernel's seconds.
double check_gemm(int m, int n, int k) {
  const std::vector<float> a = random_floats(static_cast<std::size_t>(m) * k, 5);
  const std::vector<float> b = random_floats(static_cast<std::size_t>(k) * n, 6);
  device_buffer<float> d_a(a), d_b(b), d_c(static_cast<std::size_t>(m) * n);
  const dim3 grid((n + tile - 1) / tile, (m + tile - 1) / tile), block(tile, tile);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(cuda_detail::launch(tiled_gemm, grid, block, 2 * tile * tile * sizeof(float), nullptr,
                                d_a.get(), d_b.get(), d_c.get(), m, n, k),
            cudaSuccess);
  const std::vector<float> c = d_c.to_host();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double expected = 0;
      for (int p = 0; p < k; ++p) expected += double(a[i * k + p]) * b[p * n + j];
      EXPECT_NEAR(c[i * n + j], expected, 1e-4) << "c[" << i << "][" << j << "]";
    }
  return seconds;
}

TEST(Gemm, TiledSharedMemoryEdgeTiles) {
  ATTN_REQUIRE_DEVICE();
  check_gemm(37, 50, 45);
}

TEST(Gemm, TiledSharedMemorySpeed) {
  ATTN_REQUIRE_DEVICE();
  const int m = 128, n = 128, k = 128;
  check_gemm(16, 16, 16);  // warm-up: maps the fiber stacks
  const double seconds = check_gemm(m, n, k);
  std::printf("[ measure  ] %s tiled GEMM %dx%dx%d: %.3g FLOP/s (%.1f ms)\n",
              emulated ? "emulated" : "GPU", m, n, k, 2.0 * m * n * k / seconds, seconds * 1e3);
}

}  // namespace
}  // namespace attn::kernel_test
