// The shared forward test bodies (tests/bodies/) on attn::cuda, for float, __half and
// __nv_bfloat16, through the staging policy. Built twice by attn_cuda_test (tests/emulator):
// emulated on the CPU (label emulated, three fiber orders) and by nvcc (label gpu, skipped
// without a GPU). This file only names the backend and its shapes: T in {1, 7, 63, 65, 128,
// 200}, D in {1, 16, 64, 80, 128, 256}, Tq < Tk, Tq > Tk, Dv != D, grouped key heads. With
// ATTN_CUDA_TEST_SHAPES=small (the ThreadSanitizer run) only the first three.

#include "../bodies/errors.hpp"
#include "../bodies/generation.hpp"
#include "../bodies/multi_head.hpp"
#include "../bodies/properties.hpp"
#include "../bodies/stages.hpp"
#include "suite.hpp"

namespace attn::test {
namespace {

const std::vector<shape>& cuda_shapes() {
  static const std::vector<shape> all = {
      {1, 1, 1, 1, 16, 16},      {2, 1, 7, 65, 64, 64},     {1, 2, 65, 7, 80, 80},
      {2, 3, 7, 7, 64, 64},      {1, 2, 63, 63, 80, 80},    {1, 1, 65, 65, 128, 128},
      {1, 2, 128, 128, 64, 64},  {1, 1, 200, 200, 16, 16},  {1, 1, 63, 200, 128, 64},
      {1, 1, 200, 128, 16, 80},  {1, 1, 65, 65, 256, 256},  {1, 2, 7, 7, 1, 1},
      {1, 4, 65, 65, 64, 64, 2}, {1, 3, 33, 70, 16, 16, 1},
  };
  static const std::vector<shape> small(all.begin(), all.begin() + 3);
  const char* env = std::getenv("ATTN_CUDA_TEST_SHAPES");
  return env != nullptr && std::string(env) == "small" ? small : all;
}

const bool registered = [] {
  skip_without_a_device();
  register_stage_tests(cuda_cases{}, cuda_shapes(), cuda_few_shapes());
  register_property_tests(cuda_float{});
  register_error_tests(cuda_float{});
  register_generation_tests(
      cuda_cases{}, {{1, 4, 65, 65, 64, 64, 2}, {1, 4, 2, 130, 16, 24, 1}},
      {{2, 2, 33, 33, 16, 16}, {3, 4, 7, 70, 64, 64, 2}, {2, 2, 1, 1100, 64, 64}},
      {{3, 4, 3, 20, 64, 64, 2}, {1, 2, 4, 7, 16, 16}, {2, 4, 2, 1030, 16, 16, 2}});
  register_multi_head_tests(cuda_float{},
                            {{2, 7, 24, 3, 3, false, true}, {1, 20, 48, 4, 2, true, true}});
  return true;
}();

}  // namespace
}  // namespace attn::test
