#pragma once
/// \file
/// What the CUDA suite files share: the backend cases (attn::cuda through the staging policy,
/// tests/cuda/staged.hpp), the few shapes the bodies run over on the emulator (~2e8 FLOP/s),
/// and the rule that every registered body is skipped where no GPU is usable (the nvcc build
/// on a machine without one).

#include <cstdlib>

#include "../support/element_cuda.hpp"
#include "../support/testing.hpp"
#include "staged.hpp"

namespace attn::test {

using cuda_cases = case_list<backend_case<cuda_staged, float>, backend_case<cuda_staged, __half>,
                             backend_case<cuda_staged, __nv_bfloat16>>;
using cuda_float = case_list<backend_case<cuda_staged, float>>;

/// Skips every registered body when no GPU is usable.
inline void skip_without_a_device() {
  skip_reason() = [] {
    int devices = 0;
    const cudaError_t error = cudaGetDeviceCount(&devices);
    return error != cudaSuccess || devices == 0
               ? std::string("no usable GPU (") + cudaGetErrorString(error) + ")"
               : std::string();
  };
}

/// Three small problems with both mask settings and grouped key heads.
inline const std::vector<shape>& cuda_few_shapes() {
  static const std::vector<shape> few = {
      {1, 2, 65, 65, 64, 64}, {2, 1, 7, 63, 8, 16}, {1, 4, 70, 70, 16, 16, 2}};
  return few;
}

}  // namespace attn::test
