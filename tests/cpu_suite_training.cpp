// The shared test bodies (tests/bodies/) of training and generation on the host backends:
// attn::cpu in float and double against attn::reference (the forward: cpu_suite.cpp). A
// translation unit of its own so that the two build in parallel.

#include <attn/attn.hpp>

#include "bodies/backward.hpp"
#include "bodies/generation.hpp"

namespace attn::test {
namespace {

using cpu_cases = case_list<backend_case<cpu_policy, float>, backend_case<cpu_policy, double>>;

const bool registered = [] {
  const std::vector<shape> few = {{1, 2, 65, 65, 64, 64},
                                  {2, 1, 7, 63, 8, 16},
                                  {1, 4, 130, 130, 16, 16, 2},
                                  {1, 1, 300, 257, 32, 32}};
  const std::vector<shape> backward = {
      {1, 1, 1, 1, 1, 1},         {2, 3, 7, 7, 64, 64},       {1, 2, 63, 63, 80, 80},
      {1, 1, 65, 65, 8, 8},       {1, 2, 130, 130, 64, 64},   {1, 1, 7, 65, 1, 1},
      {2, 1, 65, 7, 64, 64},      {1, 2, 64, 200, 64, 80},    {1, 2, 200, 9, 16, 16},
      {2, 6, 65, 65, 64, 64, 2},  {1, 4, 130, 63, 16, 24, 1}, {1, 1, 300, 300, 64, 64},
      {1, 1, 129, 129, 256, 256}, {1, 1, 1000, 1000, 64, 64}};
  register_backward_tests(cpu_cases{}, backward, few, mha_shapes());
  register_generation_tests(
      cpu_cases{},
      {{2, 6, 65, 65, 64, 64, 2},
       {1, 4, 130, 63, 16, 24, 1},
       {1, 8, 3, 2200, 64, 64, 2},
       {1, 6, 1, 1100, 64, 64, 2},
       {2, 16, 5, 1000, 72, 17, 2},
       {1, 12, 2, 700, 40, 24, 3},
       {1, 10, 1, 1500, 64, 64, 1},
       {2, 9, 1, 900, 32, 32, 1},
       {1, 11, 1, 700, 24, 24, 1}},
      {{2, 2, 65, 65, 16, 16},
       {3, 4, 7, 130, 64, 64, 2},
       {2, 2, 1, 3000, 64, 64},
       {1, 3, 4, 2500, 32, 32, 1},
       {2, 2, 200, 150, 8, 8},
       {1, 8, 3, 1000, 24, 40, 2},
       {1, 5, 2, 1300, 64, 64, 1}},
      {{3, 4, 5, 40, 64, 64, 2}, {2, 2, 3, 2100, 64, 64}, {1, 2, 4, 7, 16, 16}});
  return true;
}();

}  // namespace
}  // namespace attn::test
