/// \file
/// mma.sync m16n8k16 and ldmatrix against plain loops. On a GPU these tests confirm the
/// fragment layouts documented in attn/backend/cuda/ptx.cuh, which the kernels and the
/// emulator were both written from.

#include <attn/backend/cuda/ptx.cuh>
#include <cstdint>
#include <cstring>

#include "testing.cuh"

namespace attn::kernel_test {
namespace {

using cuda_detail::mma_m16n8k16;

template <class T>
__host__ __device__ T from_float(float x);
template <>
__host__ __device__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__host__ __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <class T>
__host__ __device__ float to_float(T x) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(x);
  else
    return __bfloat162float(x);
}

// Two 16-bit values in one register, the first in the low half.
template <class T>
__device__ std::uint32_t pack(T low, T high) {
  std::uint16_t l, h;
  std::memcpy(&l, &low, 2);
  std::memcpy(&h, &high, 2);
  return l | static_cast<std::uint32_t>(h) << 16;
}

// c (m, n) = a (m, k) b (k, n), row-major; one warp per 16 x 8 tile of c, fragments loaded
// straight from global memory by the documented layout.
template <class T>
__global__ void mma_gemm(const T* a, const T* b, float* c, int n, int k) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  const int row0 = static_cast<int>(blockIdx.y) * 16, col0 = static_cast<int>(blockIdx.x) * 8;
  float acc[4] = {0, 0, 0, 0};
  for (int k0 = 0; k0 < k; k0 += 16) {
    const T* a_tile = a + row0 * k + k0;  // (16, 16) of (m, k)
    const T* b_tile = b + k0 * n + col0;  // (16, 8) of (k, n)
    const std::uint32_t fa[4] = {
        pack(a_tile[g * k + 2 * t], a_tile[g * k + 2 * t + 1]),
        pack(a_tile[(g + 8) * k + 2 * t], a_tile[(g + 8) * k + 2 * t + 1]),
        pack(a_tile[g * k + 2 * t + 8], a_tile[g * k + 2 * t + 9]),
        pack(a_tile[(g + 8) * k + 2 * t + 8], a_tile[(g + 8) * k + 2 * t + 9])};
    const std::uint32_t fb[2] = {pack(b_tile[2 * t * n + g], b_tile[(2 * t + 1) * n + g]),
                                 pack(b_tile[(2 * t + 8) * n + g], b_tile[(2 * t + 9) * n + g])};
    mma_m16n8k16<T>(acc, fa, fb, acc);
  }
  c[(row0 + g) * n + col0 + 2 * t] = acc[0];
  c[(row0 + g) * n + col0 + 2 * t + 1] = acc[1];
  c[(row0 + g + 8) * n + col0 + 2 * t] = acc[2];
  c[(row0 + g + 8) * n + col0 + 2 * t + 1] = acc[3];
}

// The same, with the tiles staged in shared memory and the fragments loaded by ldmatrix:
// a by .x4 from its four 8 x 8 quarters, b (row-major k x n) by .x2.trans.
template <class T>
__global__ void ldmatrix_gemm(const T* a, const T* b, float* c, int n, int k) {
  __shared__ __align__(16) T a_tile[16][16 + 8];  // (16, 16), rows padded to 48 bytes
  __shared__ __align__(16) T b_tile[16][8];       // (16, 8)
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  const int row0 = static_cast<int>(blockIdx.y) * 16, col0 = static_cast<int>(blockIdx.x) * 8;
  float acc[4] = {0, 0, 0, 0};
  for (int k0 = 0; k0 < k; k0 += 16) {
    for (int i = lane; i < 16 * 16; i += 32)
      a_tile[i / 16][i % 16] = a[(row0 + i / 16) * k + k0 + i % 16];
    for (int i = lane; i < 16 * 8; i += 32)
      b_tile[i / 8][i % 8] = b[(k0 + i / 8) * n + col0 + i % 8];
    __syncwarp();
    // Lane 8 q + r gives row r of quarter q: rows 0-7 / 8-15, columns 0-7 / 8-15 as a0..a3.
    const int q = lane / 8, r = lane % 8;
    std::uint32_t fa[4], fb[2];
    cuda_detail::ldmatrix_x4(fa, &a_tile[r + 8 * (q % 2)][8 * (q / 2)]);
    cuda_detail::ldmatrix_x2_trans(fb, &b_tile[lane % 16][0]);
    mma_m16n8k16<T>(acc, fa, fb, acc);
    __syncwarp();
  }
  c[(row0 + g) * n + col0 + 2 * t] = acc[0];
  c[(row0 + g) * n + col0 + 2 * t + 1] = acc[1];
  c[(row0 + g + 8) * n + col0 + 2 * t] = acc[2];
  c[(row0 + g + 8) * n + col0 + 2 * t + 1] = acc[3];
}

template <class T>
class Mma : public ::testing::Test {};
using element_types = ::testing::Types<__half, __nv_bfloat16>;
struct element_names {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, __half> ? "f16" : "bf16";
  }
};
TYPED_TEST_SUITE(Mma, element_types, element_names);

// Runs `kernel` on (m, k) x (k, n) 16-bit inputs; checks against float loops on the same values.
template <class T, class Kernel>
void check_mma_gemm(Kernel kernel, int m, int n, int k) {
  std::vector<T> a(m * k), b(k * n);
  const std::vector<float> ra = random_floats(a.size(), 7), rb = random_floats(b.size(), 8);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = from_float<T>(ra[i]);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = from_float<T>(rb[i]);
  device_buffer<T> d_a(a), d_b(b);
  device_buffer<float> d_c(m * n);
  ASSERT_EQ(cuda_detail::launch(kernel, dim3(n / 8, m / 16), dim3(32), 0, nullptr, d_a.get(),
                                d_b.get(), d_c.get(), n, k),
            cudaSuccess);
  const std::vector<float> c = d_c.to_host();
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double expected = 0;  // products of 16-bit floats are exact in double
      for (int p = 0; p < k; ++p)
        expected += double(to_float(a[i * k + p])) * to_float(b[p * n + j]);
      ASSERT_NEAR(c[i * n + j], expected, 1e-5 * k) << "c[" << i << "][" << j << "]";
    }
}

TYPED_TEST(Mma, GemmTileFromDocumentedLayout) {
  ATTN_REQUIRE_DEVICE();
  check_mma_gemm<TypeParam>(mma_gemm<TypeParam>, 32, 24, 48);
}

TYPED_TEST(Mma, GemmTileThroughLdmatrix) {
  ATTN_REQUIRE_DEVICE();
  check_mma_gemm<TypeParam>(ldmatrix_gemm<TypeParam>, 32, 24, 48);
}

// Every lane writes the registers ldmatrix gave it, for x1, x2, x4 and their .trans.
__global__ void ldmatrix_registers(std::uint32_t* out) {
  // Four 8 x 8 matrices of b16, element (m, r, c) = 256 m + 16 r + c; rows 32 bytes apart.
  __shared__ __align__(16) std::uint16_t matrices[4][8][16];
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < 4 * 8 * 16; i += 32)
    matrices[i / 128][i / 16 % 8][i % 16] = static_cast<std::uint16_t>(256 * (i / 128) + i % 128);
  __syncwarp();
  const void* row = &matrices[lane / 8][lane % 8][0];
  std::uint32_t* o = out + lane * 14;
  std::uint32_t r1[1], r2[2], r4[4];
  cuda_detail::ldmatrix_x1(r1, row);
  o[0] = r1[0];
  cuda_detail::ldmatrix_x2(r2, row);
  o[1] = r2[0], o[2] = r2[1];
  cuda_detail::ldmatrix_x4(r4, row);
  o[3] = r4[0], o[4] = r4[1], o[5] = r4[2], o[6] = r4[3];
  cuda_detail::ldmatrix_x1_trans(r1, row);
  o[7] = r1[0];
  cuda_detail::ldmatrix_x2_trans(r2, row);
  o[8] = r2[0], o[9] = r2[1];
  cuda_detail::ldmatrix_x4_trans(r4, row);
  o[10] = r4[0], o[11] = r4[1], o[12] = r4[2], o[13] = r4[3];
}

TEST(FragmentLayout, Ldmatrix) {
  ATTN_REQUIRE_DEVICE();
  device_buffer<std::uint32_t> out(32 * 14);
  ASSERT_EQ(cuda_detail::launch(ldmatrix_registers, dim3(1), dim3(32), 0, nullptr, out.get()),
            cudaSuccess);
  const std::vector<std::uint32_t> got = out.to_host();
  auto element = [](int m, int r, int c) {
    return static_cast<std::uint32_t>(256 * m + 16 * r + c);
  };
  const int first_register[2][3] = {{0, 1, 3}, {7, 8, 10}};
  for (int lane = 0; lane < 32; ++lane)
    for (int trans = 0; trans < 2; ++trans)
      for (int x = 0; x < 3; ++x)
        for (int m = 0; m < (1 << x); ++m) {
          // The PTX ISA: lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 (of the transpose).
          const int i = lane / 4, j = 2 * (lane % 4);
          const std::uint32_t expected = trans ? element(m, j, i) | element(m, j + 1, i) << 16
                                               : element(m, i, j) | element(m, i, j + 1) << 16;
          EXPECT_EQ(got[lane * 14 + first_register[trans][x] + m], expected)
              << "lane " << lane << (trans ? " .trans" : "") << " .x" << (1 << x) << " matrix "
              << m;
        }
}

}  // namespace
}  // namespace attn::kernel_test
