#pragma once
/// \file
/// CUDA runtime errors as attn::backend_error. Host-safe (the CUDA runtime's host header only).

#include <cuda_runtime_api.h>

#include <string>

#include "attn/core/error.hpp"

namespace attn::cuda_detail {

/// Throws backend_error "attn: CUDA error at <file>:<line> (<what>): <cudaGetErrorString>".
[[noreturn]] inline void throw_error(cudaError_t error, const char* what, const char* file,
                                     int line) {
  throw backend_error(std::string("attn: CUDA error at ") + file + ":" + std::to_string(line) +
                      " (" + what + "): " + cudaGetErrorString(error));
}

inline void check(cudaError_t error, const char* what, const char* file, int line) {
  if (error != cudaSuccess) throw_error(error, what, file, line);
}

}  // namespace attn::cuda_detail

/// Evaluates a CUDA runtime call and throws attn::backend_error (with file, line and the CUDA
/// error string) unless it returned cudaSuccess.
#define ATTN_CUDA_CHECK(expr) ::attn::cuda_detail::check((expr), #expr, __FILE__, __LINE__)
