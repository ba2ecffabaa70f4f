// ATTN_CPU_ISA lowers the CPU kernels' instruction set so that one machine tests every path
// (the cpu_isa.* tests of CMakeLists.txt). Where it asks for this machine's widest set or a wider
// one, the run would repeat the plain one: the whole binary is skipped instead.

#include <gtest/gtest.h>

#include <attn/backend/cpu/simd/isa.hpp>
#include <cstdlib>

namespace {

struct narrower_isa_only : ::testing::Environment {
  void SetUp() override {
    using attn::cpu_detail::isa;
    const isa best = attn::cpu_detail::widest_isa();
    if (std::getenv("ATTN_CPU_ISA") != nullptr && attn::cpu_detail::requested_isa(best) >= best)
      GTEST_SKIP() << "ATTN_CPU_ISA asks for no narrower set than this CPU's widest: the plain "
                      "run has tested it";
  }
};

[[maybe_unused]] ::testing::Environment* const environment =
    ::testing::AddGlobalTestEnvironment(new narrower_isa_only);

// Only the three exact names choose a set: an empty or mistyped ATTN_CPU_ISA leaves the
// widest in place instead of the scalar code.
TEST(CpuIsa, OnlyExactNamesChooseASet) {
  using attn::cpu_detail::isa;
  using attn::cpu_detail::parse_isa;
  EXPECT_EQ(parse_isa("generic"), isa::generic);
  EXPECT_EQ(parse_isa("avx2"), isa::avx2);
  EXPECT_EQ(parse_isa("avx512"), isa::avx512);
  for (const char* other : {"", "AVX2", "avx-512", "avx2 ", "scalar", "avx"})
    EXPECT_FALSE(parse_isa(other).has_value()) << "'" << other << "'";
  EXPECT_FALSE(parse_isa(nullptr).has_value());
}

}  // namespace
