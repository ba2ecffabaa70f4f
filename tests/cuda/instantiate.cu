// The one .cu file of tests/cuda/host_consumer.cpp's program: the CUDA backend for float.

#include <attn/cuda.cuh>

ATTN_CUDA_INSTANTIATE(float)
