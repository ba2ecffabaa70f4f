#pragma once
/// \file
/// What every test body shares, for every backend: the backend cases, random unit-scale data
/// in the element type and the same values in the reference's type, comparisons that report
/// the worst element, and the registration of one body per (backend, element type). Needs
/// neither Eigen nor CUDA: the CPU suite and the CUDA suite (nvcc) both include it.
///
/// A body is a function template over a backend case C:
///
///     template <class C> void softmax_matches_reference(const shape& s, bool causal);
///
/// and a suite file registers it for the cases it names (Kokkos-style, the suite only names
/// the backends), e.g. register_shape_test<cases>("Stages", "Softmax", body, shapes()).

#include <gtest/gtest.h>

#include <attn/backend/reference/backend.hpp>
#include <attn/core/host_tensor.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "element.hpp"
#include "shape.hpp"
#include "tolerance.hpp"

namespace attn::test {

template <class Policy>
struct policy_name;
template <>
struct policy_name<reference_policy> {
  static constexpr const char* value = "reference";
};
template <>
struct policy_name<cpu_policy> {
  static constexpr const char* value = "cpu";
};

/// One backend and element type under test; `ref` is the type the reference computes in.
template <class Policy, class T>
struct backend_case {
  using policy_type = Policy;
  using value = T;
  using ref = ref_t<T>;
  static Policy policy() { return Policy{}; }
  static std::string name() {
    return std::string(policy_name<Policy>::value) + "_" + element<T>::name();
  }
};

template <class... C>
struct case_list {};

/// Uniform values in [-amp, amp] from a fixed seed, rounded to T.
template <class T, int R>
host_tensor<T, R> random(const dims<R>& extents, std::uint32_t seed, double amp = 1.0) {
  host_tensor<T, R> t(extents);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-amp, amp);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = from_double<T>(u(gen));
  return t;
}

/// The same values in another element type.
template <class To, class From, int R>
host_tensor<To, R> convert(const host_tensor<From, R>& a) {
  host_tensor<To, R> b(a.extents());
  for (index_t i = 0; i < a.size(); ++i) b.data()[i] = from_double<To>(to_double(a.data()[i]));
  return b;
}

/// Every element of `got` within tolerance<T> of `want` (+-inf must match exactly; NaN in
/// `got` fails unless `want` is NaN there too).
template <class T, int R, class U>
::testing::AssertionResult close(const host_tensor<T, R>& got, const host_tensor<U, R>& want,
                                 double scale = 1.0) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  double worst = 0;
  index_t worst_i = -1;
  for (index_t i = 0; i < got.size(); ++i) {
    const double x = to_double(got.data()[i]), r = to_double(want.data()[i]);
    if ((std::isinf(r) && x == r) || (std::isnan(r) && std::isnan(x))) continue;
    const double err =
        std::abs(x - r) / (scale * tolerance<T>::abs + tolerance<T>::rel * std::abs(r));
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst_i << " is " << to_double(got.data()[worst_i]) << ", reference "
         << to_double(want.data()[worst_i]) << " (" << worst << "x the tolerance)";
}

/// Largest |got - want| over the elements; NaN or a mismatched infinity counts as infinite.
template <class A, class B, int R>
double max_error(const host_tensor<A, R>& got, const host_tensor<B, R>& want) {
  double worst = 0;
  for (index_t i = 0; i < got.size(); ++i) {
    const double x = to_double(got.data()[i]), r = to_double(want.data()[i]);
    if (std::isinf(r) && x == r) continue;
    const double e = std::abs(x - r);
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  return worst;
}

/// True when every element is finite.
template <class T, int R>
bool all_finite(const host_tensor<T, R>& t) {
  for (index_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(to_double(t.data()[i]))) return false;
  return true;
}

/// Bitwise equality.
template <class T, int R>
bool identical(const host_tensor<T, R>& a, const host_tensor<T, R>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), std::size_t(a.size()) * sizeof(T)) == 0;
}

/// Random q [B,H,Tq,D], k [B,Hkv,Tk,D], v [B,Hkv,Tk,Dv] in T, and the same values in ref.
template <class C>
struct qkv {
  using T = typename C::value;
  using R = typename C::ref;
  host_tensor<T, 4> q, k, v;
  host_tensor<R, 4> rq, rk, rv;
  explicit qkv(const shape& s, std::uint32_t seed = 1, double amp = 1.0)
      : q(random<T, 4>({s.B, s.H, s.Tq, s.D}, seed, amp)),
        k(random<T, 4>({s.B, s.kv_heads(), s.Tk, s.D}, seed + 1, amp)),
        v(random<T, 4>({s.B, s.kv_heads(), s.Tk, s.Dv}, seed + 2)),
        rq(convert<R>(q)),
        rk(convert<R>(k)),
        rv(convert<R>(v)) {}
};

/// The shapes every stage is checked over: T in {1, 2, 7, 9, 63, 64, 65, 127, 200, 1000}, D in
/// {1, 8, 16, 64, 80, 128, 256}, B and H in {1, 2, 3}, Tq < Tk, Tq > Tk, Dv != D and grouped
/// key heads. The CUDA suite, which runs on the emulator, has its own smaller list.
inline const std::vector<shape>& cpu_shapes() {
  static const std::vector<shape> s = {
      {1, 1, 1, 1, 1, 1},         {1, 1, 2, 2, 8, 8},
      {2, 3, 7, 7, 64, 64},       {1, 2, 63, 63, 80, 80},
      {3, 1, 64, 64, 128, 128},   {1, 1, 65, 65, 256, 256},
      {2, 2, 127, 127, 64, 64},   {1, 1, 1000, 1000, 64, 64},
      {1, 1, 1000, 1000, 80, 80}, {1, 1, 7, 65, 8, 8},
      {2, 1, 65, 7, 64, 64},      {1, 3, 63, 127, 256, 256},
      {1, 2, 64, 200, 64, 80},    {3, 3, 2, 1, 1, 8},
      {1, 2, 200, 9, 16, 16},  // causal: rows 0..190 see no key (whole work items)
      {2, 6, 65, 65, 64, 64, 2},  {1, 4, 130, 63, 16, 24, 1},  // grouped-query, multi-query
  };
  return s;
}

/// A suite-wide reason to skip every registered body (empty: run), e.g. "no usable GPU".
inline std::string (*&skip_reason())() {
  static std::string (*reason)() = nullptr;
  return reason;
}

/// A test body registered under a name.
struct test_body : ::testing::Test {
  explicit test_body(std::function<void()> f) : body(std::move(f)) {}
  void TestBody() override {
    if (skip_reason() != nullptr)
      if (const std::string why = skip_reason()(); !why.empty()) GTEST_SKIP() << why;
    body();
  }
  std::function<void()> body;
};

/// Registers `make(C)()` as test `<suite>/<case>.<name>` for every backend case C of the list.
template <class... C, class Make>
void register_test(case_list<C...>, const std::string& suite, const std::string& name, Make make) {
  (::testing::RegisterTest((suite + "/" + C::name()).c_str(), name.c_str(), nullptr, nullptr,
                           __FILE__, __LINE__,
                           [f = make(C{})]() -> ::testing::Test* { return new test_body(f); }),
   ...);
}

/// A body `body<C>(s, causal)` over shapes and mask settings (`masks`: {false} or
/// {false, true}): one test per (case, shape, mask), named `<name>/<shape>[_causal]`.
#define ATTN_REGISTER_SHAPE_TEST(cases, suite, name, body, shapes, masks)                      \
  for (const ::attn::test::shape& s_ : shapes)                                                 \
    for (bool causal_ : std::initializer_list<bool> masks)                                     \
  ::attn::test::register_test(cases, suite,                                                    \
                              std::string(name) + "/" + s_.str() + (causal_ ? "_causal" : ""), \
                              [=](auto c_) { return [=] { body<decltype(c_)>(s_, causal_); }; })

/// A body `body<C>()`: one test per case.
#define ATTN_REGISTER_TEST(cases, suite, name, body) \
  ::attn::test::register_test(cases, suite, name,    \
                              [](auto c_) { return [] { body<decltype(c_)>(); }; })

}  // namespace attn::test
