// The float flash kernel as a user compiling at -O2 gets it: tests/CMakeLists.txt builds this
// file with -O2 and its kernel_inlined test reads the object's symbols. The kernel keeps its
// register tiles in registers only if every helper and lambda that passes them around is
// inlined into flash_item; one left out of line moves the tiles to the stack (3-4x slower).
#include <attn/backend/cpu/simd/flash_simd.hpp>

bool attn_kernel_at_o2(const attn::cpu_policy& policy, attn::tensor_view<const float, 4> q,
                       attn::tensor_view<const float, 4> k, attn::tensor_view<const float, 4> v,
                       attn::tensor_view<float, 4> o, attn::tensor_view<float, 3> lse,
                       bool causal) {
  return attn::cpu_detail::flash_attention_simd(policy, q, k, v, o, lse, causal, 0.125);
}
