// The shared test bodies (tests/bodies/) of the forward on the host backends: attn::cpu in
// float and double against attn::reference, and the properties and bad-input cases on both
// (the backward and generation bodies: cpu_suite_training.cpp). This file only names the
// backends.

#include <attn/attn.hpp>

#include "bodies/errors.hpp"
#include "bodies/multi_head.hpp"
#include "bodies/properties.hpp"
#include "bodies/stages.hpp"

namespace attn::test {
namespace {

using cpu_cases = case_list<backend_case<cpu_policy, float>, backend_case<cpu_policy, double>>;
using host_cases =
    case_list<backend_case<reference_policy, float>, backend_case<reference_policy, double>,
              backend_case<cpu_policy, float>, backend_case<cpu_policy, double>>;
using float_cases =
    case_list<backend_case<reference_policy, float>, backend_case<cpu_policy, float>>;

const bool registered = [] {
  const std::vector<shape> few = {{1, 2, 65, 65, 64, 64},
                                  {2, 1, 7, 63, 8, 16},
                                  {1, 4, 130, 130, 16, 16, 2},
                                  {1, 1, 300, 257, 32, 32}};
  register_stage_tests(cpu_cases{}, cpu_shapes(), few);
  register_property_tests(host_cases{});
  register_error_tests(float_cases{});
  register_multi_head_tests(cpu_cases{}, mha_shapes());
  return true;
}();

TEST(Errors, ShapeErrorIsAnInvalidArgument) {
  static_assert(std::is_base_of_v<std::invalid_argument, shape_error>);
  bad_args a;
  try {
    attention(cpu, a.q(), a.in_view<4>({2, 3, 9, 4}), a.v(), a.o());
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(
        e.what(),
        "attn::attention: k.D (extent 3) is 4 but q.D (extent 3) is 8; they must be equal");
  }
}

// 2^26 keys, every score equal: every key weighs exactly the same, so o is the mean of v and
// lse = ln 2^26, to float accuracy (a running float sum of exp2(0) that drifted by an ulp a
// step would give 0.5 here). Both the decode path (one query) and the item kernel (16).
TEST(AttentionLongContext, TwoToThe26KeysStayWithinTolerance) {
  const index_t Tk = index_t(1) << 26;
  host_tensor<float, 4> k({1, 1, Tk, 1}), v({1, 1, Tk, 1});
  for (index_t j = 0; j < Tk; ++j) k.data()[j] = float(j % 7) - 3, v.data()[j] = float(j % 2);
  for (index_t Tq : {1, 16}) {
    host_tensor<float, 4> q({1, 1, Tq, 1}), o({1, 1, Tq, 1});
    host_tensor<float, 3> lse({1, 1, Tq});
    for (index_t i = 0; i < Tq; ++i) q.data()[i] = 0.0f;  // every score 0
    attention(cpu, q.view(), k.view(), v.view(), o.view(), lse.view());
    for (index_t i = 0; i < Tq; ++i) {
      EXPECT_NEAR(o(0, 0, i, 0), 0.5f, 1e-5f) << Tq;
      EXPECT_NEAR(lse(0, 0, i), std::log(double(Tk)), 1e-5 * std::log(double(Tk))) << Tq;
    }
  }
}

// `{}` as the options argument picks the overload without lse.
TEST(Errors, BracedOptionsAreNotAnLseView) {
  const shape s{1, 1, 3, 3, 4, 4};
  const qkv<backend_case<cpu_policy, float>> in(s);
  host_tensor<float, 4> o({1, 1, 3, 4});
  attention(cpu, in.q.view(), in.k.view(), in.v.view(), o.view(), {});
  EXPECT_TRUE(all_finite(o));
}

}  // namespace
}  // namespace attn::test
