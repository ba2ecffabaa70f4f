#pragma once
/// \file
/// The CUDA kernel dialect for a host compiler: what `attn/backend/cuda/dialect.cuh` includes
/// under g++ (with ATTN_CUDA_EMULATION). It defines the CUDA keywords *before* the CUDA headers
/// (whose host_defines.h keeps them when __CUDACC__ is undefined), takes dim3, cudaStream_t,
/// __half and __nv_bfloat16 from the toolkit's host-usable headers, and adds the emulated
/// built-ins. It never defines __CUDA_ARCH__: that breaks the CUDA headers.

#if defined(__CUDACC__)
#error \
    "attn_emulator runs CUDA kernels on the CPU with a host compiler; nvcc compiles them for real"
#endif

#define __global__
#define __device__
#define __host__
#define __constant__
#define __grid_constant__
#define __launch_bounds__(...)
// Blocks run one after another on one OS thread, so every fiber of a block sees one copy.
// constinit: no initializer and no dynamic initialization (CUDA forbids both), hence no guard
// variable that the first fiber would write and the others read.
#define __shared__ static thread_local constinit

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "atomics.hpp"
#include "math.hpp"
#include "ptx.hpp"
#include "runtime.hpp"
#include "sync.hpp"
