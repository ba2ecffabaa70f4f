#pragma once
/// \file
/// The shape of one attention problem, shared by the CPU tests and the CUDA tests (which must
/// not include Eigen, so this header includes nothing of attn but its index type).

#include <sstream>
#include <string>

#include <attn/core/config.hpp>

namespace attn::test {

/// Extents of q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv].
struct shape {
  index_t B, H, Tq, Tk, D, Dv;
  std::string str() const {
    std::ostringstream s;
    s << "B=" << B << " H=" << H << " Tq=" << Tq << " Tk=" << Tk << " D=" << D << " Dv=" << Dv;
    return s.str();
  }
};

}  // namespace attn::test
