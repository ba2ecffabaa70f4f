// The visibility rule's row ranges against brute force, and the CPU backward's split dQ (each
// key chunk's part holds only the rows that may see its keys) through a dq whose columns are
// not contiguous.

#include <attn/attn.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/testing.hpp"

namespace attn::test {
namespace {

TEST(Visibility, RowsSeeingIsTheTightRangeOfRowsThatSeeTheKeys) {
  for (index_t q_len : {0, 1, 7, 65})
    for (index_t kv_len : {0, 1, 5, 70})
      for (bool causal : {false, true})
        for (index_t window : {0, 1, 3, 64}) {
          const visibility vis({.causal = causal, .window = window}, q_len, kv_len);
          for (index_t a = 0; a <= kv_len; ++a)
            for (index_t b = a; b <= kv_len; ++b) {
              SCOPED_TRACE(testing::Message()
                           << "Tq " << q_len << " Tk " << kv_len << " causal " << causal
                           << " window " << window << " keys [" << a << ", " << b << ")");
              const auto sees = [&](index_t i) {
                for (index_t j = a; j < b; ++j)
                  if (vis.visible(i, j)) return true;
                return false;
              };
              const key_range rows = vis.rows_seeing({a, b});
              ASSERT_LE(0, rows.begin);
              ASSERT_LE(rows.end, q_len);
              for (index_t i = 0; i < q_len; ++i) {
                if (i < rows.begin || i >= rows.end) {
                  ASSERT_FALSE(sees(i)) << "row " << i;
                }
              }
              if (!rows.empty()) {  // tight: the first and the last row see one of the keys
                EXPECT_TRUE(sees(rows.begin));
                EXPECT_TRUE(sees(rows.end - 1));
              }
            }
        }
}

TEST(Visibility, SplitBackwardWritesEveryRowOfAStridedDq) {
  // H 2 over 300 keys: 5 key chunks per head, whose parts of dQ cover different rows (a window
  // leaves rows that see only some chunks; queries past the keys leave rows that see none).
  using C = backend_case<cpu_policy, float>;
  for (const shape& s : {shape{1, 2, 300, 300, 16, 16}, shape{2, 1, 400, 300, 16, 16}})
    for (const attention_options opt :
         {attention_options{.causal = true}, attention_options{.causal = true, .window = 5},
          attention_options{.window = 40}}) {
      const qkv<C> in(s);
      host_tensor<float, 4> o({s.B, s.H, s.Tq, s.Dv}), dq(in.q.extents()), dk(in.k.extents()),
          dv(in.v.extents());
      host_tensor<float, 3> lse({s.B, s.H, s.Tq});
      attention(cpu, in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(), opt);
      const host_tensor<float, 4> d_o = random<float, 4>(o.extents(), 41);
      attention_backward(cpu, in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
                         d_o.view(), dq.view(), dk.view(), dv.view(), opt);
      // dq as [B, H, D, Tq] in memory, filled with NaN first: every element must be written.
      std::vector<float> buffer(std::size_t(s.B * s.H * s.D * s.Tq), NAN);
      const tensor_view<float, 4> strided(buffer.data(), {s.B, s.H, s.Tq, s.D},
                                          {s.H * s.D * s.Tq, s.D * s.Tq, 1, s.Tq});
      attention_backward(cpu, in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
                         d_o.view(), strided, dk.view(), dv.view(), opt);
      for (index_t b = 0; b < s.B; ++b)
        for (index_t h = 0; h < s.H; ++h)
          for (index_t i = 0; i < s.Tq; ++i)
            for (index_t d = 0; d < s.D; ++d)
              ASSERT_EQ(std::bit_cast<std::uint32_t>(strided(b, h, i, d)),
                        std::bit_cast<std::uint32_t>(dq(b, h, i, d)))
                  << b << " " << h << " " << i << " " << d << " causal " << opt.causal << " window "
                  << opt.window;
    }
}

}  // namespace
}  // namespace attn::test
