// The host backends' kernels, compiled once for all of the tests: every other test file is
// built with ATTN_EXTERN_TEMPLATES (see attn/core/operations.hpp), so it only declares them.

#include <attn/attn.hpp>

ATTN_INSTANTIATE(attn::cpu_policy, float)
ATTN_INSTANTIATE(attn::cpu_policy, double)
ATTN_INSTANTIATE(attn::reference_policy, float)
ATTN_INSTANTIATE(attn::reference_policy, double)
