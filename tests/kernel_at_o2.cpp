// The float flash kernel as a user compiling at -O2 gets it: tests/CMakeLists.txt builds this
// file with -O2 and its kernel_inlined test reads the object's symbols. The kernel keeps its
// register tiles in registers only if every helper and lambda that passes them around is
// inlined into flash_item; one left out of line moves the tiles to the stack (3-4x slower).
// The helpers meant to stay out of line are the decode kernel's leaves decode_scores,
// decode_quad_scores, decode_row_scores and decode_pv_rows and the backward's
// whole_block_grads, whose tiles are born and used up inside them.
#include <attn/backend/cpu/simd/flash_simd.hpp>

attn::cpu_detail::flash_kernel attn_kernel_at_o2(attn::index_t D, attn::index_t Dv) {
  return attn::cpu_detail::simd_flash_kernel(D, Dv);
}
