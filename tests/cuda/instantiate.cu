// The one .cu file of tests/cuda/host_consumer.cpp's program: every operation of the CUDA
// backend for every element type, compiled for all of CMAKE_CUDA_ARCHITECTURES (sm_80 and
// sm_90) with register spills as errors: the compile check of every kernel.

#include <attn/cuda.cuh>

ATTN_CUDA_INSTANTIATE(float)
ATTN_CUDA_INSTANTIATE(__half)
ATTN_CUDA_INSTANTIATE(__nv_bfloat16)
