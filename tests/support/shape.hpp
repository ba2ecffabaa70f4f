#pragma once
/// \file
/// The shape of one attention problem, shared by the CPU tests and the CUDA tests (which must
/// not include Eigen, so this header includes nothing of attn but its index type).

#include <sstream>
#include <string>

#include <attn/core/config.hpp>

namespace attn::test {

/// Extents of q [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] (Hkv 0: H).
struct shape {
  index_t B, H, Tq, Tk, D, Dv, Hkv = 0;
  index_t kv_heads() const { return Hkv == 0 ? H : Hkv; }
  std::string str() const {
    std::ostringstream s;
    s << "B" << B << "_H" << H;
    if (Hkv != 0 && Hkv != H) s << "_Hkv" << Hkv;
    s << "_Tq" << Tq << "_Tk" << Tk << "_D" << D << "_Dv" << Dv;
    return s.str();
  }
};

}  // namespace attn::test
