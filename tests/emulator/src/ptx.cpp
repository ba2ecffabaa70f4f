/// \file
/// The warp-wide halves of mma.sync and ldmatrix, from the PTX ISA's fragment layouts
/// (g = lane / 4, t = lane % 4; the lower half of a 32-bit register holds the lower column):
///   A 16x16: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
///   B 16x8 : b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
///   C, D 16x8: c0, c1 = C[g][2t], C[g][2t+1]; c2, c3 = C[g+8][2t], C[g+8][2t+1]
///   ldmatrix 8x8 of b16: lane l holds row l/4, columns 2(l%4)..+1 (.trans: the transpose's).

#include <cstring>

#include "internal.hpp"

namespace attn_emulator {

namespace detail {

namespace {

float to_float(std::uint16_t bits, bool bf16) {
  if (bf16) return __bfloat162float(__nv_bfloat16_raw{bits});
  return __half2float(__half_raw{bits});
}

// Element `high` (0 or 1) of a register of two 16-bit values.
std::uint16_t half_of(std::uint32_t reg, int high) {
  return static_cast<std::uint16_t>(reg >> (16 * high));
}

}  // namespace

void resolve_mma(bool bf16, const void* const in[32], void* const out[32]) {
  float a[16][16], b[16][8], c[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const auto& op = *static_cast<const mma_operands*>(in[lane]);
    const int g = lane / 4, t = lane % 4;
    for (int h = 0; h < 2; ++h) {
      a[g][2 * t + h] = to_float(half_of(op.a[0], h), bf16);
      a[g + 8][2 * t + h] = to_float(half_of(op.a[1], h), bf16);
      a[g][2 * t + 8 + h] = to_float(half_of(op.a[2], h), bf16);
      a[g + 8][2 * t + 8 + h] = to_float(half_of(op.a[3], h), bf16);
      b[2 * t + h][g] = to_float(half_of(op.b[0], h), bf16);
      b[2 * t + 8 + h][g] = to_float(half_of(op.b[1], h), bf16);
      c[g][2 * t + h] = op.c[h];
      c[g + 8][2 * t + h] = op.c[2 + h];
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    float* d = static_cast<float*>(out[lane]);
    for (int r = 0; r < 4; ++r) {
      const int row = g + 8 * (r / 2), col = 2 * t + r % 2;
      float sum = c[row][col];  // products of 16-bit floats are exact in f32
      for (int k = 0; k < 16; ++k) sum += a[row][k] * b[k][col];
      d[r] = sum;
    }
  }
}

void resolve_ldmatrix(int matrices, bool trans, const void* const in[32], void* const out[32]) {
  for (int lane = 0; lane < 32; ++lane) {
    auto* r = static_cast<std::uint32_t*>(out[lane]);
    for (int m = 0; m < matrices; ++m) {
      // Row `row` of matrix m was read by lane 8 m + row: 8 values of 16 bits.
      auto element = [&](int row, int col) {
        std::uint16_t v;
        std::memcpy(&v, static_cast<const char*>(in[8 * m + row]) + 2 * col, 2);
        return std::uint32_t{v};
      };
      const int i = lane / 4, j = 2 * (lane % 4);
      r[m] =
          trans ? element(j, i) | element(j + 1, i) << 16 : element(i, j) | element(i, j + 1) << 16;
    }
  }
}

}  // namespace detail

async_copies& thread_async_copies() { return detail::current_thread->copies; }

void check_alignment(const void* address, std::size_t alignment, const char* what,
                     const std::source_location& where) {
  if (reinterpret_cast<std::uintptr_t>(address) % alignment)
    detail::fail("%s at %s: %p is not aligned to %zu bytes (thread %s of block %s)", what,
                 detail::format(where).c_str(), address, alignment,
                 detail::format(threadIdx).c_str(), detail::format(blockIdx).c_str());
}

}  // namespace attn_emulator
