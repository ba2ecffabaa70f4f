#pragma once
/// \file
/// The inline-PTX instructions the kernels use (sm_80 and newer), each with its emulated twin
/// from the PTX ISA's documented semantics (tests/emulator). Fragment layouts, with
/// g = lane / 4 and t = lane % 4; a 32-bit register holds two 16-bit values, the lower column
/// (or k) in its low half:
///
///   mma m16n8k16, A 16x16 row-major:  a[0] = A[g][2t..2t+1]    a[1] = A[g+8][2t..2t+1]
///                                     a[2] = A[g][2t+8..2t+9]  a[3] = A[g+8][2t+8..2t+9]
///   B 16x8 (k x n), "col":            b[0] = B[2t..2t+1][g]    b[1] = B[2t+8..2t+9][g]
///   C, D 16x8 f32:                    c[0], c[1] = C[g][2t], C[g][2t+1]
///                                     c[2], c[3] = C[g+8][2t], C[g+8][2t+1]
///   ldmatrix 8x8 b16 matrix m:        lane 8m + r gives the address of row r (16 bytes,
///                                     16-byte aligned, shared memory); lane l receives
///                                     r[m] = M[l/4][2(l%4)..+1], with .trans M^T[l/4][..].
///
/// So ldmatrix_x4 of A's four 8x8 quarters (rows 0-7/8-15 x cols 0-7/8-15, in the order
/// a[0..3]) yields the A fragment, and ldmatrix_x2_trans of a row-major k x n B (k rows 0-7,
/// then 8-15) yields the B fragment. These layouts are confirmed on hardware by the `gpu`
/// variant of tests/emulator/mma_test.cu.

#include <cstdint>
#include <source_location>
#include <type_traits>

#include "dialect.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "attn/backend/cuda/ptx.cuh needs sm_80 or newer (mma.sync m16n8k16, cp.async)"
#endif

namespace attn::cuda_detail {

#if defined(__CUDACC__)
#define ATTN_PTX_WHERE
#define ATTN_PTX_WHERE_ARG
#else
#define ATTN_PTX_WHERE , std::source_location where = std::source_location::current()
#define ATTN_PTX_WHERE_ARG , where
#endif

/// d = a b + c for one warp (every lane calls it): mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32
/// with T = __half or __nv_bfloat16 inputs and f32 accumulation. d may alias c.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4],
                                             const std::uint32_t (&b)[2],
                                             const float (&c)[4] ATTN_PTX_WHERE) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>);
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
  }
#elif !defined(__CUDACC__)
  const ::attn_emulator::mma_operands operands{
      {a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {c[0], c[1], c[2], c[3]}};
  ::attn_emulator::mma_m16n8k16(std::is_same_v<T, __nv_bfloat16>, d, operands, where);
#endif
}

#if defined(__CUDACC__)
#define ATTN_LDMATRIX(suffix, outputs, ...)                                      \
  asm volatile("ldmatrix.sync.aligned.m8n8." suffix ".shared.b16 " outputs ";\n" \
               : __VA_ARGS__                                                     \
               : "r"(static_cast<std::uint32_t>(__cvta_generic_to_shared(row))))
#endif

/// ldmatrix.sync.aligned.m8n8.x1.shared.b16 (every lane calls it; lanes 0-7 give row addresses).
__device__ __forceinline__ void ldmatrix_x1(std::uint32_t (&r)[1], const void* row ATTN_PTX_WHERE) {
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  ATTN_LDMATRIX("x1", "{%0}, [%1]", "=r"(r[0]));
#elif !defined(__CUDACC__)
  ::attn_emulator::ldmatrix(false, r, row ATTN_PTX_WHERE_ARG);
#endif
}

/// ldmatrix .x2 (lanes 0-15 give row addresses: matrix 0, then matrix 1).
__device__ __forceinline__ void ldmatrix_x2(std::uint32_t (&r)[2], const void* row ATTN_PTX_WHERE) {
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  ATTN_LDMATRIX("x2", "{%0,%1}, [%2]", "=r"(r[0]), "=r"(r[1]));
#elif !defined(__CUDACC__)
  ::attn_emulator::ldmatrix(false, r, row ATTN_PTX_WHERE_ARG);
#endif
}

/// ldmatrix .x4 (all 32 lanes give row addresses: matrices 0-3, eight rows each).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row ATTN_PTX_WHERE) {
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  ATTN_LDMATRIX("x4", "{%0,%1,%2,%3}, [%4]", "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]));
#elif !defined(__CUDACC__)
  ::attn_emulator::ldmatrix(false, r, row ATTN_PTX_WHERE_ARG);
#endif
}

/// ldmatrix .x1.trans: as ldmatrix_x1, each 8x8 matrix transposed.
__device__ __forceinline__ void ldmatrix_x1_trans(std::uint32_t (&r)[1],
                                                  const void* row ATTN_PTX_WHERE) {
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  ATTN_LDMATRIX("x1.trans", "{%0}, [%1]", "=r"(r[0]));
#elif !defined(__CUDACC__)
  ::attn_emulator::ldmatrix(true, r, row ATTN_PTX_WHERE_ARG);
#endif
}

/// ldmatrix .x2.trans.
__device__ __forceinline__ void ldmatrix_x2_trans(std::uint32_t (&r)[2],
                                                  const void* row ATTN_PTX_WHERE) {
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  ATTN_LDMATRIX("x2.trans", "{%0,%1}, [%2]", "=r"(r[0]), "=r"(r[1]));
#elif !defined(__CUDACC__)
  ::attn_emulator::ldmatrix(true, r, row ATTN_PTX_WHERE_ARG);
#endif
}

/// ldmatrix .x4.trans.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4],
                                                  const void* row ATTN_PTX_WHERE) {
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  ATTN_LDMATRIX("x4.trans", "{%0,%1,%2,%3}, [%4]", "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]));
#elif !defined(__CUDACC__)
  ::attn_emulator::ldmatrix(true, r, row ATTN_PTX_WHERE_ARG);
#endif
}

/// cp.async.cg.shared.global [dst], [src], 16, src_bytes: copies 16 bytes global -> shared
/// asynchronously (both 16-byte aligned), zero-filling past `src_bytes` (0 reads nothing).
/// Complete it with cp_async_commit() and cp_async_wait<N>() before reading dst.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src,
                                            int src_bytes = 16 ATTN_PTX_WHERE) {
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   static_cast<std::uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(src_bytes));
#elif !defined(__CUDACC__)
  ::attn_emulator::cp_async(dst, src, 16, static_cast<unsigned>(src_bytes), where);
#endif
}

/// cp.async.ca.shared.global [dst], [src], Bytes: an asynchronous copy of 4, 8 or 16 bytes
/// through L1 (both aligned to Bytes).
template <int Bytes>
__device__ __forceinline__ void cp_async_ca(void* dst, const void* src ATTN_PTX_WHERE) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async.ca copies 4, 8 or 16 bytes");
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(
                   static_cast<std::uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src), "n"(Bytes));
#elif !defined(__CUDACC__)
  ::attn_emulator::cp_async(dst, src, Bytes, Bytes, where);
#endif
}

/// cp.async.commit_group: the calling thread's copies since the last commit become a group.
__device__ __forceinline__ void cp_async_commit() {
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  asm volatile("cp.async.commit_group;\n" ::);
#elif !defined(__CUDACC__)
  ::attn_emulator::cp_async_commit();
#endif
}

/// cp.async.wait_group N: waits until at most N of the calling thread's committed groups are
/// pending. Other threads see the data only after a barrier that follows the wait.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(N >= 0 && N < 8);
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#elif !defined(__CUDACC__)
  ::attn_emulator::cp_async_wait(N);
#endif
}

/// cp.async.wait_all: commits, then waits for every copy of the calling thread.
__device__ __forceinline__ void cp_async_wait_all() {
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  asm volatile("cp.async.wait_all;\n" ::);
#elif !defined(__CUDACC__)
  ::attn_emulator::cp_async_commit();
  ::attn_emulator::cp_async_wait(0);
#endif
}

/// ex2.approx.f32: 2^x, within 2 ulp on the GPU (correctly rounded when emulated).
__device__ __forceinline__ float ex2_approx(float x) {
#if ATTN_DEVICE_ARCH && defined(__CUDACC__)
  float y;
  asm("ex2.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#elif !defined(__CUDACC__)
  return ::attn_emulator::ex2_approx(x);
#else
  return x;  // nvcc's host pass never runs device code
#endif
}

}  // namespace attn::cuda_detail

#undef ATTN_LDMATRIX
#undef ATTN_PTX_WHERE
#undef ATTN_PTX_WHERE_ARG
