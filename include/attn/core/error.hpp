#pragma once
/// \file
/// The exceptions attn throws.

#include <stdexcept>
#include <string>

namespace attn {

/// Views that do not fit together: a wrong extent, a null pointer with non-zero extents, a
/// bad scale or head count. Always thrown before any output is written.
struct shape_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// A backend failed at run time (for example a CUDA error); the message names where.
struct backend_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace attn
