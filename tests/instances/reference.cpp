// One of the host backends' instances, compiled once for all of the tests (three files, so that
// a 2-core build compiles them side by side): every other test file is built with
// ATTN_EXTERN_TEMPLATES (see attn/core/operations.hpp), so it only declares them.

#include <attn/attn.hpp>

ATTN_INSTANTIATE(attn::reference_policy, float)
ATTN_INSTANTIATE(attn::reference_policy, double)
