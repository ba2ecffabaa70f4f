// A fuzz target for the public functions (the fused attention, with per-row key counts or not,
// over a KV cache and packed varlen, and its backward; the forward stages and their backwards,
// project_qkv, merge_attention, multi_head_attention and its backward): each input builds one small
// random problem (extents 0-70, up to 2399 keys in long-range cases, random strides, offsets
// into one shared arena so that views may overlap, options, thread counts) and calls one function
// on attn::cpu. Either the call throws shape_error and the arena is bit-for-bit what it was, or it
// returns, nothing outside its outputs changed, and the outputs match attn::reference run on dense
// copies of the inputs.
//
// With clang: clang++ -fsanitize=fuzzer,address (scripts/test runs it for a minute
// from tests/fuzz/corpus). Without libFuzzer (ATTN_FUZZ_REPLAY): a main that replays the files
// given on the command line, so every committed input is a regression test (CTest fuzz.replay).

#include <algorithm>
#include <array>
#include <attn/attn.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <vector>

namespace {

using attn::index_t;

/// The input's bytes as a stream of choices (zeros once it runs out).
class choices {
 public:
  choices(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  unsigned byte() { return i_ < n_ ? p_[i_++] : 0u; }
  index_t below(index_t n) { return n <= 1 ? 0 : index_t((byte() << 8 | byte()) % unsigned(n)); }
  /// An extent: mostly small, sometimes up to `max`.
  index_t extent(index_t max) {
    return byte() % 4 == 0 ? below(max + 1) : below(std::min<index_t>(max, 9) + 1);
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_, i_ = 0;
};

constexpr index_t arena_size = 1 << 16;

/// Where a view lies in the arena: offset and strides for its extents, usually a padded
/// row-major layout, sometimes strides picked at random (which may reach an element twice, or
/// lie past the arena's end: then the case is skipped).
template <int R>
bool place(choices& c, const attn::dims<R>& e, index_t& offset, attn::dims<R>& strides,
           const std::vector<index_t>& others) {
  index_t span = 1;
  for (int i = R - 1; i >= 0; --i) {
    const unsigned kind = c.byte() % 8;
    strides[i] = kind == 0 ? c.below(9) : span * (kind == 1 ? 2 : 1) + (kind == 2 ? 1 : 0);
    span = std::max(span, strides[i] * std::max<index_t>(e[i], 1));
  }
  index_t last = 0;
  for (int i = 0; i < R; ++i) last += (std::max<index_t>(e[i], 1) - 1) * strides[i];
  if (last >= arena_size) return false;
  // Near another view (to overlap it, or to interleave with it), or anywhere.
  if (!others.empty() && c.byte() % 3 == 0)
    offset = std::min(others[std::size_t(c.below(index_t(others.size())))] + c.below(40),
                      arena_size - 1 - last);
  else
    offset = c.below(arena_size - last);
  return true;
}

struct arena {
  std::vector<float> data = std::vector<float>(arena_size);
  std::vector<index_t> offsets;  // of the views placed so far

  template <class T, int R>
  bool view(choices& c, const attn::dims<R>& e, attn::tensor_view<T, R>& out) {
    index_t offset;
    attn::dims<R> strides;
    if (!place<R>(c, e, offset, strides, offsets)) return false;
    offsets.push_back(offset);
    if (std::getenv("ATTN_FUZZ_VERBOSE")) {
      std::fprintf(stderr, "  view at %td:", offset);
      for (int i = 0; i < R; ++i) std::fprintf(stderr, " %td/%td", e[i], strides[i]);
      std::fprintf(stderr, "\n");
    }
    out = attn::tensor_view<T, R>{data.data() + offset, e, strides};
    return true;
  }
};

/// A dense copy of a view.
template <class T, int R>
attn::host_tensor<float, R> dense(const attn::tensor_view<T, R>& v) {
  attn::host_tensor<float, R> t(v.extents());
  index_t n = 0;
  attn::dims<R> i{};
  const auto visit = [&](auto&& self, int axis) -> void {
    if (axis == R) {
      index_t off = 0;
      for (int a = 0; a < R; ++a) off += i[a] * v.stride(a);
      t.data()[n++] = v.data()[off];
      return;
    }
    for (i[axis] = 0; i[axis] < v.extent(axis); ++i[axis]) self(self, axis + 1);
  };
  if (!v.empty()) visit(visit, 0);
  return t;
}

/// Marks the arena elements a view reaches.
template <class T, int R>
void mark(const arena& a, const attn::tensor_view<T, R>& v, std::vector<bool>& written) {
  if (v.empty() || v.data() == nullptr) return;
  attn::dims<R> i{};
  const auto visit = [&](auto&& self, int axis) -> void {
    if (axis == R) {
      index_t off = v.data() - a.data.data();
      for (int x = 0; x < R; ++x) off += i[x] * v.stride(x);
      written[std::size_t(off)] = true;
      return;
    }
    for (i[axis] = 0; i[axis] < v.extent(axis); ++i[axis]) self(self, axis + 1);
  };
  visit(visit, 0);
}

/// Same value, or both NaN, or within the float tolerance of the double reference (relative
/// to the problem's unit-scale data).
bool close(float got, float want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::abs(got - want) <= 2e-4f * (1 + std::abs(want));
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_attention: %s\n", what);
  std::abort();
}

/// Checks one call: `call(policy)` with the arena's views against `expect()` (the reference on
/// dense copies, returning the dense outputs), `outputs` the views the call may write.
template <class Call, class Expect, class... Out>
void check(arena& a, const attn::cpu_policy& pol, Call&& call, Expect&& expect,
           const Out&... outputs) {
  // The reference first, on dense copies of the inputs as they are before the call (an in-place
  // call overwrites them). It sees no overlap, so it may accept what attn::cpu rejects, but
  // never the other way round.
  std::optional<std::vector<std::vector<float>>> want;
  try {
    want = expect();
  } catch (const attn::shape_error&) {
  }
  const std::vector<float> before = a.data;
  try {
    call(pol);
  } catch (const attn::shape_error& e) {
    if (std::memcmp(before.data(), a.data.data(), sizeof(float) * std::size_t(arena_size)) != 0)
      fail("a call that threw shape_error wrote to memory");
    if (std::strncmp(e.what(), "attn::", 6) != 0) fail("a shape_error without the function name");
    return;
  }
  // Nothing outside the outputs changed; the outputs match the reference.
  std::vector<bool> written(std::size_t(arena_size), false);
  (mark(a, outputs, written), ...);
  for (index_t x = 0; x < arena_size; ++x)
    if (!written[std::size_t(x)] &&
        std::memcmp(&before[std::size_t(x)], &a.data[std::size_t(x)], 4))
      fail("a call wrote outside its outputs");
  if (!want) fail("attn::cpu accepted a call that attn::reference rejects");
  std::size_t k = 0;
  const auto compare = [&](const auto& v) {
    const auto got = dense(v);
    const auto& w = (*want)[k++];
    for (index_t x = 0; x < got.size(); ++x)
      if (!close(got.data()[x], w[std::size_t(x)])) {
        std::fprintf(stderr, "element %td: %g, reference %g\n", x, double(got.data()[x]),
                     double(w[std::size_t(x)]));
        fail("a result differs from the reference");
      }
  };
  (compare(outputs), ...);
}

/// Writes a dense tensor into the arena elements of a view (which is const to the call).
template <class T, int R>
void scatter(arena& a, const attn::tensor_view<T, R>& v, const attn::host_tensor<float, R>& t) {
  if (v.empty()) return;
  attn::dims<R> i{};
  index_t n = 0;
  const auto visit = [&](auto&& self, int axis) -> void {
    if (axis == R) {
      index_t off = v.data() - a.data.data();
      for (int x = 0; x < R; ++x) off += i[x] * v.stride(x);
      a.data[std::size_t(off)] = t.data()[n++];
      return;
    }
    for (i[axis] = 0; i[axis] < v.extent(axis); ++i[axis]) self(self, axis + 1);
  };
  visit(visit, 0);
}

template <class T, int R>
std::vector<float> flat(const attn::host_tensor<T, R>& t) {
  return std::vector<float>(t.data(), t.data() + t.size());
}

/// The reference's counterpart of an optional argument: t's view where the call under test was
/// given `view`, else an empty one (the argument left out).
template <class V, class T, int R>
attn::tensor_view<T, R> given(const V& view, attn::host_tensor<T, R>& t) {
  return view.data() ? t.view() : attn::tensor_view<T, R>{};
}

/// Bit for bit the same (a NaN equals itself here, unlike with ==).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0);
}
bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}

/// The fused attention, with a key count per batch row (now and then out of range) where
/// `with_lengths`, and an lse now and then, against the reference. e: B, H, Hkv, Tq, Tk, D, Dv.
void attention_with_lengths(choices& c, arena& a, const attn::cpu_policy& pol,
                            const attn::attention_options& opt, const std::array<index_t, 7>& e,
                            bool with_lengths) {
  const auto [B, H, Hkv, Tq, Tk, D, Dv] = e;
  attn::tensor_view<const float, 4> q, k, v;
  attn::tensor_view<float, 4> o;
  attn::tensor_view<float, 3> lse;
  attn::host_tensor<std::int32_t, 1> lengths(attn::dims<1>{B});
  for (index_t b = 0; with_lengths && b < B; ++b)
    lengths(b) = std::int32_t(c.below(Tk + 2) - (c.byte() == 0));
  if (!a.view(c, {B, H, Tq, D}, q) || !a.view(c, {B, Hkv, Tk, D}, k) ||
      !a.view(c, {B, Hkv, Tk, Dv}, v) || !a.view(c, {B, H, Tq, Dv}, o) ||
      (c.byte() % 2 && !a.view(c, {B, H, Tq}, lse)))
    return;
  const attn::tensor_view<const std::int32_t, 1> kv_lengths =
      with_lengths ? lengths.view() : attn::tensor_view<const std::int32_t, 1>{};
  check(
      a, pol, [&](const auto& p) { attn::attention(p, q, k, v, o, lse, opt, kv_lengths); },
      [&] {
        auto dq = dense(q), dk = dense(k), dv = dense(v);
        attn::host_tensor<float, 4> ro(o.extents());
        attn::host_tensor<float, 3> rl(lse.extents());
        attn::attention(attn::reference, dq.view(), dk.view(), dv.view(), ro.view(), given(lse, rl),
                        opt, kv_lengths);
        return std::vector<std::vector<float>>{flat(ro), flat(rl)};
      },
      o, lse);
}

void one_case(choices& c) {
  arena a;  // values of unit scale from a seeded generator, now and then a few non-finite
  std::uint32_t state = c.byte() << 8 | c.byte() | 1u;
  for (float& x : a.data) {
    state = state * 1664525u + 1013904223u;
    x = float(int(state >> 16) - 32768) / 16384.0f;
  }
  for (unsigned n = c.byte() % 8 == 0 ? c.byte() % 4 : 0; n > 0; --n)
    a.data[std::size_t(c.below(arena_size))] = std::array{NAN, INFINITY, -INFINITY}[c.byte() % 3];
  const attn::cpu_policy pol{.threads = int(c.byte() % 4)};
  const index_t B = c.extent(2), Hkv = c.extent(3), G = 1 + c.below(3);
  const index_t H = c.byte() % 16 == 0 ? c.extent(4) : Hkv * G;  // sometimes not a multiple
  const index_t Tq = c.extent(70), Tk = c.extent(70), D = c.extent(9) + (c.byte() % 8 != 0),
                Dv = c.extent(9);
  attn::attention_options opt{.causal = c.byte() % 2 == 1,
                              .window = c.byte() % 4 == 0 ? c.below(9) : 0};
  switch (c.byte() % 5) {
    case 1:
      opt.scale = 0.5;
      break;
    case 2:
      opt.scale = -1.0;
      break;
    case 3:
      opt.scale = c.byte() % 2 ? 1e39 : NAN;
      break;  // rejected
    default:
      break;
  }
  using in4 = attn::tensor_view<const float, 4>;
  using out4 = attn::tensor_view<float, 4>;
  const auto ref = [](auto&&... tensors) {
    return std::vector<std::vector<float>>{flat(tensors)...};
  };
  // Ten operations for the byte values below 240 (as in the first corpus), eight more above,
  // and the last value (once a second one for op 17) for long key ranges.
  const unsigned pick = c.byte(), op = pick < 240    ? pick % 10
                                       : pick == 255 ? 18
                                                     : 10 + (pick - 240) % 8;
  if (std::getenv("ATTN_FUZZ_VERBOSE"))
    std::fprintf(stderr,
                 "op %u threads %d B %td H %td Hkv %td Tq %td Tk %td D %td Dv %td causal %d "
                 "window %td scale %g\n",
                 op, pol.threads, B, H, Hkv, Tq, Tk, D, Dv, int(opt.causal), opt.window,
                 opt.scale ? *opt.scale : 0.0);
  switch (op) {
    case 0: {  // attention, with lse or without
      in4 q, k, v;
      out4 o;
      attn::tensor_view<float, 3> lse;
      const bool with_lse = c.byte() % 2;
      if (!a.view(c, {B, H, Tq, D}, q) || !a.view(c, {B, Hkv, Tk, D}, k) ||
          !a.view(c, {B, Hkv, Tk, Dv}, v) || !a.view(c, {B, H, Tq, Dv}, o) ||
          (with_lse && !a.view(c, {B, H, Tq}, lse)))
        return;
      check(
          a, pol, [&](const auto& p) { attn::attention(p, q, k, v, o, lse, opt); },
          [&] {
            auto dq = dense(q), dk = dense(k), dv = dense(v);
            attn::host_tensor<float, 4> ro(o.extents());
            attn::host_tensor<float, 3> rl(lse.extents());
            attn::attention(attn::reference, dq.view(), dk.view(), dv.view(), ro.view(),
                            with_lse ? rl.view() : attn::tensor_view<float, 3>{}, opt);
            return ref(ro, rl);
          },
          o, lse);
      break;
    }
    case 1: {  // scaled_scores
      in4 q, k;
      out4 s;
      if (!a.view(c, {B, H, Tq, D}, q) || !a.view(c, {B, Hkv, Tk, D}, k) ||
          !a.view(c, {B, H, Tq, Tk}, s))
        return;
      check(
          a, pol, [&](const auto& p) { attn::scaled_scores(p, q, k, s, opt.scale); },
          [&] {
            auto dq = dense(q), dk = dense(k);
            attn::host_tensor<float, 4> rs(s.extents());
            attn::scaled_scores(attn::reference, dq.view(), dk.view(), rs.view(), opt.scale);
            return ref(rs);
          },
          s);
      break;
    }
    case 2:
    case 3: {  // softmax_rows or causal_mask, in place
      out4 s;
      if (!a.view(c, {B, H, Tq, Tk}, s)) return;
      const bool softmax = c.byte() % 2;
      auto start = dense(s);
      check(
          a, pol,
          [&](const auto& p) { softmax ? attn::softmax_rows(p, s) : attn::causal_mask(p, s); },
          [&] {
            softmax ? attn::softmax_rows(attn::reference, start.view())
                    : attn::causal_mask(attn::reference, start.view());
            return ref(start);
          },
          s);
      break;
    }
    case 4: {  // weighted_values
      in4 p, v;
      out4 o;
      if (!a.view(c, {B, H, Tq, Tk}, p) || !a.view(c, {B, Hkv, Tk, Dv}, v) ||
          !a.view(c, {B, H, Tq, Dv}, o))
        return;
      check(
          a, pol, [&](const auto& pl) { attn::weighted_values(pl, p, v, o); },
          [&] {
            auto dp = dense(p), dv = dense(v);
            attn::host_tensor<float, 4> ro(o.extents());
            attn::weighted_values(attn::reference, dp.view(), dv.view(), ro.view());
            return ref(ro);
          },
          o);
      break;
    }
    case 5: {  // project with an optional bias
      attn::tensor_view<const float, 3> x;
      attn::tensor_view<const float, 2> w;
      attn::tensor_view<const float, 1> bias;
      attn::tensor_view<float, 3> y;
      const index_t C = c.extent(20), E = c.extent(20);
      if (!a.view(c, {B, Tq, C}, x) || !a.view(c, {C, E}, w) || !a.view(c, {B, Tq, E}, y) ||
          (c.byte() % 2 && !a.view(c, {E}, bias)))
        return;
      check(
          a, pol, [&](const auto& p) { attn::project(p, x, w, y, bias); },
          [&] {
            auto dx = dense(x);
            auto dw = dense(w);
            auto db = dense(bias);
            attn::host_tensor<float, 3> ry(y.extents());
            attn::project(attn::reference, dx.view(), dw.view(), ry.view(), given(bias, db));
            return ref(ry);
          },
          y);
      break;
    }
    case 6: {  // merge_attention, in place now and then
      in4 oa, ob;
      attn::tensor_view<const float, 3> la, lb;
      out4 o;
      attn::tensor_view<float, 3> lse;
      if (!a.view(c, {B, H, Tq, Dv}, oa) || !a.view(c, {B, H, Tq}, la) ||
          !a.view(c, {B, H, Tq, Dv}, ob) || !a.view(c, {B, H, Tq}, lb))
        return;
      if (c.byte() % 3 == 0) {
        o = out4{const_cast<float*>(oa.data()), oa.extents(), oa.strides()};
        lse =
            attn::tensor_view<float, 3>{const_cast<float*>(la.data()), la.extents(), la.strides()};
      } else if (!a.view(c, {B, H, Tq, Dv}, o) || !a.view(c, {B, H, Tq}, lse)) {
        return;
      }
      check(
          a, pol, [&](const auto& p) { attn::merge_attention(p, oa, la, ob, lb, o, lse); },
          [&] {
            auto doa = dense(oa), dob = dense(ob);
            auto dla = dense(la), dlb = dense(lb);
            attn::host_tensor<float, 4> ro(o.extents());
            attn::host_tensor<float, 3> rl(lse.extents());
            attn::merge_attention(attn::reference, doa.view(), dla.view(), dob.view(), dlb.view(),
                                  ro.view(), rl.view());
            return ref(ro, rl);
          },
          o, lse);
      break;
    }
    case 7: {  // attention_backward from a consistent forward; each gradient may be left out
      in4 q, k, v, o, d_o;
      attn::tensor_view<const float, 3> lse;
      out4 dq, dk, dv;
      const unsigned want = c.byte();
      if (!a.view(c, {B, H, Tq, D}, q) || !a.view(c, {B, Hkv, Tk, D}, k) ||
          !a.view(c, {B, Hkv, Tk, Dv}, v) || !a.view(c, {B, H, Tq, Dv}, o) ||
          !a.view(c, {B, H, Tq}, lse) || !a.view(c, {B, H, Tq, Dv}, d_o) ||
          (want & 1 && !a.view(c, {B, H, Tq, D}, dq)) ||
          (want & 2 && !a.view(c, {B, Hkv, Tk, D}, dk)) ||
          (want & 4 && !a.view(c, {B, Hkv, Tk, Dv}, dv)))
        return;
      // o and lse of the reference forward (finite data: the gradients' NaN rules are the
      // forward's, checked above); a forward that rejects its arguments ends the case.
      for (float& x : a.data)
        if (!std::isfinite(x)) x = 0.5f;
      try {
        auto dq0 = dense(q), dk0 = dense(k), dv0 = dense(v);
        attn::host_tensor<float, 4> o0(o.extents());
        attn::host_tensor<float, 3> l0(lse.extents());
        attn::attention(attn::reference, dq0.view(), dk0.view(), dv0.view(), o0.view(), l0.view(),
                        opt);
        scatter(a, o, o0), scatter(a, lse, l0);
        // The backward's contract: o and lse are the forward's of these q, k, v. Where o or
        // lse shares memory with q, k or v, writing them changed those; skip such a case. So
        // too where d_o shares memory with lse and took the -inf of a row that sees no key:
        // an infinite d_o makes a gradient inf where D_i sums d_o o (the kernels) and NaN
        // where it sums P dP (the reference), both IEEE arithmetic.
        auto q1 = dense(q), k1 = dense(k), v1 = dense(v), do1 = dense(d_o);
        if (flat(q1) != flat(dq0) || flat(k1) != flat(dk0) || flat(v1) != flat(dv0) ||
            flat(dense(o)) != flat(o0) || flat(dense(lse)) != flat(l0) ||
            !std::all_of(do1.data(), do1.data() + do1.size(),
                         [](float x) { return std::isfinite(x); }))
          return;
      } catch (const attn::shape_error&) {
        return;
      }
      check(
          a, pol,
          [&](const auto& p) {
            attn::attention_backward(p, q, k, v, o, lse, d_o, dq, dk, dv, opt);
          },
          [&] {
            auto cq = dense(q), ck = dense(k), cv = dense(v), co = dense(o), cd = dense(d_o);
            auto cl = dense(lse);
            attn::host_tensor<float, 4> rq(dq.extents()), rk(dk.extents()), rv(dv.extents());
            attn::attention_backward(attn::reference, cq.view(), ck.view(), cv.view(), co.view(),
                                     cl.view(), cd.view(), given(dq, rq), given(dk, rk),
                                     given(dv, rv), opt);
            return ref(rq, rk, rv);
          },
          dq, dk, dv);
      break;
    }
    case 8: {  // project_qkv, biases now and then
      const index_t C = c.extent(20), E = c.extent(20);
      attn::tensor_view<const float, 3> x;
      attn::tensor_view<const float, 2> w[3];
      attn::tensor_view<const float, 1> b[3];
      attn::tensor_view<float, 3> y[3];
      const bool bias = c.byte() % 2;
      if (!a.view(c, {B, Tq, C}, x)) return;
      for (int n = 0; n < 3; ++n)
        if (!a.view(c, {C, E}, w[n]) || !a.view(c, {B, Tq, E}, y[n]) ||
            (bias && !a.view(c, {E}, b[n])))
          return;
      check(
          a, pol,
          [&](const auto& p) {
            attn::project_qkv(p, x, w[0], w[1], w[2], y[0], y[1], y[2], b[0], b[1], b[2]);
          },
          [&] {
            auto dx = dense(x);
            std::vector<std::vector<float>> out;
            for (int n = 0; n < 3; ++n) {
              auto dw = dense(w[n]);
              auto db = dense(b[n]);
              attn::host_tensor<float, 3> ry(y[n].extents());
              attn::project(attn::reference, dx.view(), dw.view(), ry.view(),
                            bias ? db.view() : attn::tensor_view<float, 1>{});
              out.push_back(flat(ry));
            }
            return out;
          },
          y[0], y[1], y[2]);
      break;
    }
    case 9: {  // multi_head_attention
      const index_t C = H * D;
      // Weights of unit scale make the scores grow with C and the softmax ill-conditioned
      // (float rounding of q then moves the result past any fixed tolerance): scale the data
      // down, as a real layer's initialisation does.
      for (float& x : a.data) x *= 0.125f;
      attn::tensor_view<const float, 3> x;
      attn::tensor_view<const float, 2> w[4];
      attn::tensor_view<float, 3> out;
      if (!a.view(c, {B, Tq, C}, x) || !a.view(c, {C, C}, w[0]) || !a.view(c, {C, Hkv * D}, w[1]) ||
          !a.view(c, {C, Hkv * D}, w[2]) || !a.view(c, {C, C}, w[3]) || !a.view(c, {B, Tq, C}, out))
        return;
      const attn::mha_weights<float> m{
          .w_q = w[0], .w_k = w[1], .w_v = w[2], .w_o = w[3], .heads = H, .kv_heads = Hkv};
      check(
          a, pol, [&](const auto& p) { attn::multi_head_attention(p, x, m, out, opt); },
          [&] {
            auto dx = dense(x);
            auto dw0 = dense(w[0]), dw1 = dense(w[1]), dw2 = dense(w[2]), dw3 = dense(w[3]);
            const attn::mha_weights<float> dm{.w_q = dw0.view(),
                                              .w_k = dw1.view(),
                                              .w_v = dw2.view(),
                                              .w_o = dw3.view(),
                                              .heads = H,
                                              .kv_heads = Hkv};
            attn::host_tensor<float, 3> ro(out.extents());
            attn::multi_head_attention(attn::reference, dx.view(), dm, ro.view(), opt);
            return ref(ro);
          },
          out);
      // Now and then the backward as well, from a forward that kept its workspace; each
      // gradient may be left out.
      if (c.byte() % 2 == 0) break;
      attn::mha_workspace<float> ws;
      try {
        attn::multi_head_attention(pol, x, m, out, opt, ws);
      } catch (const attn::shape_error&) {
        break;
      }
      attn::tensor_view<const float, 3> d_out;
      attn::tensor_view<float, 3> d_x;
      attn::tensor_view<float, 2> dw[4];
      const unsigned want = c.byte();
      bool placed = a.view(c, {B, Tq, C}, d_out) && (!(want & 1) || a.view(c, {B, Tq, C}, d_x));
      for (int n = 0; n < 4; ++n)
        placed = placed && (!(want & (2u << n)) || a.view(c, w[n].extents(), dw[n]));
      if (!placed) break;
      const attn::mha_gradients<float> g{
          .d_x = d_x, .d_w_q = dw[0], .d_w_k = dw[1], .d_w_v = dw[2], .d_w_o = dw[3]};
      check(
          a, pol,
          [&](const auto& p) { attn::multi_head_attention_backward(p, x, m, ws, d_out, g, opt); },
          [&] {
            auto dx = dense(x), dd = dense(d_out);
            auto dw0 = dense(w[0]), dw1 = dense(w[1]), dw2 = dense(w[2]), dw3 = dense(w[3]);
            const attn::mha_weights<float> dm{.w_q = dw0.view(),
                                              .w_k = dw1.view(),
                                              .w_v = dw2.view(),
                                              .w_o = dw3.view(),
                                              .heads = H,
                                              .kv_heads = Hkv};
            attn::mha_workspace<float> rws;
            attn::host_tensor<float, 3> ro(out.extents()), rx(d_x.extents());
            attn::host_tensor<float, 2> rw[4] = {attn::host_tensor<float, 2>(dw[0].extents()),
                                                 attn::host_tensor<float, 2>(dw[1].extents()),
                                                 attn::host_tensor<float, 2>(dw[2].extents()),
                                                 attn::host_tensor<float, 2>(dw[3].extents())};
            attn::multi_head_attention(attn::reference, dx.view(), dm, ro.view(), opt, rws);
            const attn::mha_gradients<float> rg{.d_x = given(d_x, rx),
                                                .d_w_q = given(dw[0], rw[0]),
                                                .d_w_k = given(dw[1], rw[1]),
                                                .d_w_v = given(dw[2], rw[2]),
                                                .d_w_o = given(dw[3], rw[3])};
            attn::multi_head_attention_backward(attn::reference, dx.view(), dm, rws, dd.view(), rg,
                                                opt);
            return ref(rx, rw[0], rw[1], rw[2], rw[3]);
          },
          d_x, dw[0], dw[1], dw[2], dw[3]);
      break;
    }
    case 10: {  // softmax_rows_backward, ds in place over dp now and then
      in4 p;
      out4 dp, ds;
      if (!a.view(c, {B, H, Tq, Tk}, p) || !a.view(c, {B, H, Tq, Tk}, dp)) return;
      if (c.byte() % 3 == 0)
        ds = dp;
      else if (!a.view(c, {B, H, Tq, Tk}, ds))
        return;
      check(
          a, pol, [&](const auto& pl) { attn::softmax_rows_backward(pl, p, dp, ds); },
          [&] {
            auto cp = dense(p), cdp = dense(dp);
            attn::host_tensor<float, 4> rs(ds.extents());
            attn::softmax_rows_backward(attn::reference, cp.view(), cdp.view(), rs.view());
            return ref(rs);
          },
          ds);
      break;
    }
    case 11: {  // weighted_values_backward; either gradient may be left out
      in4 p, v, d_o;
      out4 dp, dv;
      const unsigned want = c.byte();
      if (!a.view(c, {B, H, Tq, Tk}, p) || !a.view(c, {B, Hkv, Tk, Dv}, v) ||
          !a.view(c, {B, H, Tq, Dv}, d_o) || (want & 1 && !a.view(c, {B, H, Tq, Tk}, dp)) ||
          (want & 2 && !a.view(c, {B, Hkv, Tk, Dv}, dv)))
        return;
      check(
          a, pol, [&](const auto& pl) { attn::weighted_values_backward(pl, p, v, d_o, dp, dv); },
          [&] {
            auto cp = dense(p), cv = dense(v), cd = dense(d_o);
            attn::host_tensor<float, 4> rp(dp.extents()), rv(dv.extents());
            attn::weighted_values_backward(attn::reference, cp.view(), cv.view(), cd.view(),
                                           given(dp, rp), given(dv, rv));
            return ref(rp, rv);
          },
          dp, dv);
      break;
    }
    case 12: {  // scaled_scores_backward; either gradient may be left out
      in4 q, k, ds;
      out4 dq, dk;
      const unsigned want = c.byte();
      if (!a.view(c, {B, H, Tq, D}, q) || !a.view(c, {B, Hkv, Tk, D}, k) ||
          !a.view(c, {B, H, Tq, Tk}, ds) || (want & 1 && !a.view(c, {B, H, Tq, D}, dq)) ||
          (want & 2 && !a.view(c, {B, Hkv, Tk, D}, dk)))
        return;
      check(
          a, pol,
          [&](const auto& p) { attn::scaled_scores_backward(p, q, k, ds, dq, dk, opt.scale); },
          [&] {
            auto cq = dense(q), ck = dense(k), cs = dense(ds);
            attn::host_tensor<float, 4> rq(dq.extents()), rk(dk.extents());
            attn::scaled_scores_backward(attn::reference, cq.view(), ck.view(), cs.view(),
                                         given(dq, rq), given(dk, rk), opt.scale);
            return ref(rq, rk);
          },
          dq, dk);
      break;
    }
    case 13: {  // project_backward; each gradient may be left out
      attn::tensor_view<const float, 3> x, dy;
      attn::tensor_view<const float, 2> w;
      attn::tensor_view<float, 3> dx;
      attn::tensor_view<float, 2> dw;
      attn::tensor_view<float, 1> db;
      const index_t C = c.extent(20), E = c.extent(20);
      const unsigned want = c.byte();
      if (!a.view(c, {B, Tq, C}, x) || !a.view(c, {C, E}, w) || !a.view(c, {B, Tq, E}, dy) ||
          (want & 1 && !a.view(c, {B, Tq, C}, dx)) || (want & 2 && !a.view(c, {C, E}, dw)) ||
          (want & 4 && !a.view(c, {E}, db)))
        return;
      check(
          a, pol, [&](const auto& p) { attn::project_backward(p, x, w, dy, dx, dw, db); },
          [&] {
            auto cx = dense(x), cy = dense(dy);
            auto cw = dense(w);
            attn::host_tensor<float, 3> rx(dx.extents());
            attn::host_tensor<float, 2> rw(dw.extents());
            attn::host_tensor<float, 1> rb(db.extents());
            attn::project_backward(attn::reference, cx.view(), cw.view(), cy.view(), given(dx, rx),
                                   given(dw, rw), given(db, rb));
            return ref(rx, rw, rb);
          },
          dx, dw, db);
      break;
    }
    case 14: {  // causal_mask_backward, in place
      out4 ds;
      if (!a.view(c, {B, H, Tq, Tk}, ds)) return;
      auto start = dense(ds);
      check(
          a, pol, [&](const auto& p) { attn::causal_mask_backward(p, ds); },
          [&] {
            attn::causal_mask_backward(attn::reference, start.view());
            return ref(start);
          },
          ds);
      break;
    }
    case 15:  // attention over a padded batch: a key count per row (now and then out of range)
      attention_with_lengths(c, a, pol, opt, {B, H, Hkv, Tq, Tk, D, Dv}, true);
      break;
    case 18: {  // long key ranges: up to 8 queries against 1000-2399 keys (the split-KV decode:
                // one to three of the CPU kernel's chunks, merged), now and then 9-48 (the item
                // kernel: two to five key blocks, rescaled between them), head dims up to 4,
                // key counts or not
      const index_t queries = c.byte() % 4 == 0 ? 9 + c.below(40) : 1 + c.below(8);
      const std::array<index_t, 7> e{
          B, H, Hkv, queries, 1000 + c.below(1400), 1 + c.below(4), c.below(5)};
      attention_with_lengths(c, a, pol, opt, e, c.byte() % 2);
      break;
    }
    case 16: {  // a KV cache: lengths, append (now and then past capacity), attention over it
      const index_t cap = c.extent(70), Tn = c.extent(9);
      std::optional<attn::kv_cache<float>> got, want;
      try {
        const attn::kv_cache_shape cs{
            .batch = B, .kv_heads = Hkv, .capacity = cap, .head_dim = D, .value_dim = Dv};
        got.emplace(cs), want.emplace(cs);
      } catch (const attn::shape_error&) {
        return;
      }
      // The same contents in both (the buffers start as zeros), and random lengths.
      for (index_t b = 0; b < B; ++b) {
        const index_t n = c.below(cap + 1);
        got->set_length(b, n), want->set_length(b, n);
      }
      in4 kn, vn, q;
      out4 o;
      if (!a.view(c, {B, Hkv, Tn, D}, kn) || !a.view(c, {B, Hkv, Tn, Dv}, vn) ||
          !a.view(c, {B, H, Tq, D}, q) || !a.view(c, {B, H, Tq, Dv}, o))
        return;
      const auto keys_of = [](const attn::kv_cache<float>& kc) {
        return std::vector<std::vector<float>>{flat(dense(kc.keys())), flat(dense(kc.values()))};
      };
      const auto before = keys_of(*got);
      const std::vector<float> arena_before = a.data;
      bool appended = true;
      try {
        got->append(pol, kn, vn);
      } catch (const attn::shape_error&) {
        appended = false;
        if (!same_bits(keys_of(*got), before) || !same_bits(a.data, arena_before))
          fail("a kv_cache::append that threw shape_error wrote");
      }
      try {
        auto dkn = dense(kn), dvn = dense(vn);
        want->append(attn::reference, dkn.view(), dvn.view());
      } catch (const attn::shape_error&) {
        if (appended) fail("attn::cpu appended what attn::reference rejects");
      }
      if (!same_bits(keys_of(*got), keys_of(*want))) fail("the caches differ after append");
      for (index_t b = 0; b < B; ++b)
        if (got->length(b) != want->length(b)) fail("the cache lengths differ after append");
      check(
          a, pol, [&](const auto& p) { attn::attention(p, q, *got, o, opt); },
          [&] {
            auto dq = dense(q);
            attn::host_tensor<float, 4> ro(o.extents());
            attn::attention(attn::reference, dq.view(), *want, ro.view(), opt);
            return ref(ro);
          },
          o);
      break;
    }
    case 17: {  // attention_varlen: packed sequences, offsets now and then out of order
      std::vector<std::int32_t> cq(std::size_t(B + 1)), ck(std::size_t(B + 1));
      for (index_t b = 1; b <= B; ++b) {
        cq[std::size_t(b)] = cq[std::size_t(b - 1)] + std::int32_t(c.extent(20));
        ck[std::size_t(b)] = ck[std::size_t(b - 1)] + std::int32_t(c.extent(20));
      }
      if (B > 0 && c.byte() % 8 == 0) cq[std::size_t(c.below(B + 1))] += 3;  // rejected
      const index_t Nq = cq.back(), Nk = ck.back() + (c.byte() % 8 == 0);
      attn::tensor_view<const float, 3> q, k, v;
      attn::tensor_view<float, 3> o;
      if (!a.view(c, {Nq, H, D}, q) || !a.view(c, {Nk, Hkv, D}, k) ||
          !a.view(c, {Nk, Hkv, Dv}, v) || !a.view(c, {Nq, H, Dv}, o))
        return;
      const attn::tensor_view<const std::int32_t, 1> oq{cq.data(), {B + 1}, {1}},
          ok{ck.data(), {B + 1}, {1}};
      check(
          a, pol, [&](const auto& p) { attn::attention_varlen(p, q, k, v, o, oq, ok, opt); },
          [&] {
            auto dq = dense(q), dk = dense(k), dv = dense(v);
            attn::host_tensor<float, 3> ro(o.extents());
            attn::attention_varlen(attn::reference, dq.view(), dk.view(), dv.view(), ro.view(), oq,
                                   ok, opt);
            return ref(ro);
          },
          o);
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  choices c(data, size);
  one_case(c);
  return 0;
}

#ifdef ATTN_FUZZ_REPLAY
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(f), {}};
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %d inputs\n", argc - 1);
  return 0;
}
#endif
