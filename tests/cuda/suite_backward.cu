// The shared backward test bodies (tests/bodies/backward.hpp) on attn::cuda, for float,
// __half and __nv_bfloat16, through the staging policy; built like suite.cu.

#include "../bodies/backward.hpp"
#include "suite.hpp"

namespace attn::test {
namespace {

const bool registered = [] {
  skip_without_a_device();
  const std::vector<shape> backward = {
      {1, 1, 1, 1, 16, 16},      {2, 1, 7, 65, 64, 64},     {1, 2, 65, 7, 80, 80},
      {1, 2, 63, 63, 64, 64},    {1, 1, 65, 65, 128, 128},  {1, 1, 33, 33, 256, 256},
      {1, 4, 65, 65, 64, 64, 2}, {1, 3, 33, 70, 16, 16, 1}, {1, 1, 100, 100, 1, 1}};
  register_backward_tests(cuda_cases{}, backward, cuda_few_shapes(),
                          {{2, 7, 24, 3, 3, true, true}, {1, 9, 32, 4, 2, false, true}});
  return true;
}();

}  // namespace
}  // namespace attn::test
