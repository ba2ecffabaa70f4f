#pragma once
/// \file
/// The strided layouts the stages are checked through, shared by the CPU and the CUDA tests
/// (Eigen-free, like shape.hpp): q, v, o kept as [B, T, H, D] in memory and seen as
/// [B, H, T, D] through strides, and k as [B, H, D, T] (column stride != 1).

#include <attn/core/host_tensor.hpp>
#include <attn/core/tensor_view.hpp>

#include "shape.hpp"

namespace attn::test {

template <class T>
struct strided_qkv {
  shape s;
  host_tensor<T, 4> q_bthd, v_bthd, o_bthd, k_bhdt;

  /// Copies q [B,H,Tq,D], k [B,H,Tk,D], v [B,H,Tk,Dv] into the strided layouts.
  strided_qkv(const shape& s_, const host_tensor<T, 4>& q, const host_tensor<T, 4>& k,
              const host_tensor<T, 4>& v)
      : s(s_),
        q_bthd({s.B, s.Tq, s.H, s.D}),
        v_bthd({s.B, s.Tk, s.H, s.Dv}),
        o_bthd({s.B, s.Tq, s.H, s.Dv}),
        k_bhdt({s.B, s.H, s.D, s.Tk}) {
    for (index_t b = 0; b < s.B; ++b)
      for (index_t h = 0; h < s.H; ++h) {
        for (index_t t = 0; t < s.Tq; ++t)
          for (index_t d = 0; d < s.D; ++d) q_bthd(b, t, h, d) = q(b, h, t, d);
        for (index_t t = 0; t < s.Tk; ++t) {
          for (index_t d = 0; d < s.D; ++d) k_bhdt(b, h, d, t) = k(b, h, t, d);
          for (index_t d = 0; d < s.Dv; ++d) v_bthd(b, t, h, d) = v(b, h, t, d);
        }
      }
  }

  tensor_view<const T, 4> q() const { return bhtd(q_bthd.data(), s.Tq, s.D); }
  tensor_view<const T, 4> v() const { return bhtd(v_bthd.data(), s.Tk, s.Dv); }
  tensor_view<T, 4> o() { return bhtd(o_bthd.data(), s.Tq, s.Dv); }
  tensor_view<const T, 4> k() const {
    return {k_bhdt.data(), {s.B, s.H, s.Tk, s.D}, {s.H * s.D * s.Tk, s.D * s.Tk, 1, s.Tk}};
  }
  /// The output in [B, H, Tq, Dv] order.
  host_tensor<T, 4> o_bhtd() const {
    host_tensor<T, 4> out({s.B, s.H, s.Tq, s.Dv});
    for (index_t b = 0; b < s.B; ++b)
      for (index_t h = 0; h < s.H; ++h)
        for (index_t t = 0; t < s.Tq; ++t)
          for (index_t d = 0; d < s.Dv; ++d) out(b, h, t, d) = o_bthd(b, t, h, d);
    return out;
  }

 private:
  /// [B, T, H, Dn] memory seen as [B, H, T, Dn].
  template <class U>
  tensor_view<U, 4> bhtd(U* data, index_t Tn, index_t Dn) const {
    return {data, {s.B, s.H, Tn, Dn}, {Tn * s.H * Dn, Dn, s.H * Dn, 1}};
  }
};

}  // namespace attn::test
