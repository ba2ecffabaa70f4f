// Undefines the kernels' internal macros at the end of <attn/cuda.cuh>, so they never reach
// users' code (no include guard: it only undefines).
#undef ATTN_CUDA_UNROLL
