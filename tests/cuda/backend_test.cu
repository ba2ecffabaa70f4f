// attn::cuda against attn::reference: every stage and the fused attention, for float, __half
// and __nv_bfloat16, over odd T, head dims 1 to 256, both mask settings, Tq != Tk and strided
// views. Built twice (tests/emulator's attn_cuda_test): emulated on the CPU (label emulated)
// and by nvcc (label gpu, skipped without a GPU). The bodies run on host views through the
// test-only policy cuda_staged; the last tests use attn::cuda on device memory directly.
//
// 16-bit inputs are generated in fp32 and rounded to T, so the fp32 reference sees the same
// values. Stages round once from an fp32 accumulator and are held to tolerance<T>; the fused
// attention in 16 bits is held to FlashAttention's standard: its error against the fp32
// reference is at most tolerance<T>::fused_factor times that of a naive 16-bit path (every
// stage's output rounded to T), plus tolerance<T>::abs.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../emulator/testing.cuh"  // ATTN_REQUIRE_DEVICE
#include "../support/shape.hpp"
#include "../support/strided.hpp"
#include "../support/tolerance.hpp"
#include "staged.hpp"

namespace attn::test {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

template <class T>
float f32(T x) {
  return cuda_detail::to_float(x);
}
template <class T>
T from(double x) {
  return cuda_detail::from_float<T>(static_cast<float>(x));
}

/// The same values, converted element by element.
template <class To, class From, int R>
host_tensor<To, R> convert(const host_tensor<From, R>& a) {
  host_tensor<To, R> b(a.extents());
  for (index_t i = 0; i < a.size(); ++i) b.data()[i] = from<To>(double(f32(a.data()[i])));
  return b;
}

/// Uniform values in [-amp, amp], rounded to T.
template <class T, int R>
host_tensor<T, R> random(const dims<R>& extents, std::uint32_t seed, double amp = 1.0) {
  host_tensor<T, R> t(extents);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-amp, amp);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = from<T>(u(gen));
  return t;
}

/// Largest |a - ref| over finite references; NaN or a wrong infinity counts as infinite.
template <class A, class B, int R>
double max_error(const host_tensor<A, R>& a, const host_tensor<B, R>& ref) {
  double worst = 0;
  for (index_t i = 0; i < a.size(); ++i) {
    const double x = f32(a.data()[i]), r = f32(ref.data()[i]);
    if (std::isinf(r) && x == r) continue;
    const double e = std::abs(x - r);
    if (!(e <= worst)) worst = std::isnan(e) ? inf : e;
  }
  return worst;
}

/// Every element of `a` within tolerance<T> of `ref` (which may hold +-inf: then equal).
template <class T, class A, class B, int R>
::testing::AssertionResult close(const host_tensor<A, R>& a, const host_tensor<B, R>& ref) {
  double worst = 0;
  index_t worst_i = -1;
  for (index_t i = 0; i < a.size(); ++i) {
    const double x = f32(a.data()[i]), r = f32(ref.data()[i]);
    if (std::isinf(r) && x == r) continue;
    const double err = std::abs(x - r) / (tolerance<T>::abs + tolerance<T>::rel * std::abs(r));
    if (!(err <= worst)) {
      worst = std::isnan(err) ? inf : err;
      worst_i = i;
    }
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst_i << " is " << f32(a.data()[worst_i]) << ", reference "
         << f32(ref.data()[worst_i]) << " (" << worst << "x the tolerance)";
}

/// T in {1, 7, 63, 65, 128, 200}, D in {16, 64, 80, 128} (and 1, 256), Tq < Tk, Tq > Tk (rows
/// that see no key under the mask), Dv != D. Sized for the emulator (~2e8 FLOP/s). With
/// ATTN_CUDA_TEST_SHAPES=small (the ThreadSanitizer run) only the first three.
const std::vector<shape>& shapes() {
  static const std::vector<shape> all = {
      {1, 1, 1, 1, 16, 16},     {2, 1, 7, 65, 64, 64},    {1, 2, 65, 7, 80, 80},
      {2, 3, 7, 7, 64, 64},     {1, 2, 63, 63, 80, 80},   {1, 1, 65, 65, 128, 128},
      {1, 2, 128, 128, 64, 64}, {1, 1, 200, 200, 16, 16}, {1, 1, 63, 200, 128, 64},
      {1, 1, 200, 128, 16, 80}, {1, 1, 65, 65, 256, 256}, {1, 2, 7, 7, 1, 1},
  };
  static const std::vector<shape> small(all.begin(), all.begin() + 3);
  const char* env = std::getenv("ATTN_CUDA_TEST_SHAPES");
  return env != nullptr && std::string(env) == "small" ? small : all;
}

template <class T>
class CudaStages : public ::testing::Test {
 protected:
  void SetUp() override { ATTN_REQUIRE_DEVICE(); }
  cuda_staged policy{};
};
using element_types = ::testing::Types<float, __half, __nv_bfloat16>;
struct element_names {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, float> ? "float" : std::is_same_v<T, __half> ? "half" : "bfloat16";
  }
};
TYPED_TEST_SUITE(CudaStages, element_types, element_names);

/// q [B,H,Tq,D], k [B,H,Tk,D], v [B,H,Tk,Dv] in T and the same values in float.
template <class T>
struct qkv {
  host_tensor<T, 4> q, k, v;
  host_tensor<float, 4> q32, k32, v32;
  explicit qkv(const shape& s, std::uint32_t seed = 1)
      : q(random<T, 4>({s.B, s.H, s.Tq, s.D}, seed)),
        k(random<T, 4>({s.B, s.H, s.Tk, s.D}, seed + 1)),
        v(random<T, 4>({s.B, s.H, s.Tk, s.Dv}, seed + 2)),
        q32(convert<float>(q)),
        k32(convert<float>(k)),
        v32(convert<float>(v)) {}
};

TYPED_TEST(CudaStages, ScaledScoresMatchReference) {
  using T = TypeParam;
  for (const shape& s : shapes()) {
    SCOPED_TRACE(s.str());
    const qkv<T> in(s);
    host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Tk});
    host_tensor<float, 4> want({s.B, s.H, s.Tq, s.Tk});
    for (double scale : {1.0 / std::sqrt(double(s.D)), 0.3}) {
      scaled_scores(this->policy, in.q.view(), in.k.view(), got.view(), scale);
      scaled_scores(reference, in.q32.view(), in.k32.view(), want.view(), scale);
      EXPECT_TRUE(close<T>(got, want)) << "scale " << scale;
    }
  }
}

TYPED_TEST(CudaStages, CausalMaskMatchesReference) {
  using T = TypeParam;
  for (const shape& s : shapes()) {
    SCOPED_TRACE(s.str());
    host_tensor<T, 4> got = random<T, 4>({s.B, s.H, s.Tq, s.Tk}, 7);
    host_tensor<float, 4> want = convert<float>(got);
    causal_mask(this->policy, got.view());
    causal_mask(reference, want.view());
    EXPECT_EQ(max_error(got, want), 0.0);
  }
}

TYPED_TEST(CudaStages, SoftmaxMatchesReference) {
  using T = TypeParam;
  for (const shape& s : shapes())
    for (bool causal : {false, true}) {
      SCOPED_TRACE(s.str() + (causal ? " causal" : ""));
      host_tensor<T, 4> got = random<T, 4>({s.B, s.H, s.Tq, s.Tk}, 9, 4.0);
      if (causal) causal_mask(this->policy, got.view());
      host_tensor<float, 4> want = convert<float>(got);
      softmax_rows(this->policy, got.view());
      softmax_rows(reference, want.view());
      EXPECT_TRUE(close<T>(got, want));
    }
}

TYPED_TEST(CudaStages, WeightedValuesMatchReference) {
  using T = TypeParam;
  for (const shape& s : shapes()) {
    SCOPED_TRACE(s.str());
    const qkv<T> in(s);
    const host_tensor<T, 4> p = random<T, 4>({s.B, s.H, s.Tq, s.Tk}, 11, 1.0 / double(s.Tk));
    host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Dv});
    host_tensor<float, 4> want({s.B, s.H, s.Tq, s.Dv});
    weighted_values(this->policy, p.view(), in.v.view(), got.view());
    weighted_values(reference, convert<float>(p).view(), in.v32.view(), want.view());
    EXPECT_TRUE(close<T>(got, want));
  }
}

TYPED_TEST(CudaStages, ProjectMatchesReference) {
  using T = TypeParam;
  struct dims3 {
    index_t B, T_, C, E;
  };
  for (const dims3 d :
       {dims3{1, 1, 1, 1}, dims3{2, 7, 64, 8}, dims3{3, 65, 80, 63}, dims3{1, 130, 256, 129}}) {
    SCOPED_TRACE(testing::Message()
                 << "B=" << d.B << " T=" << d.T_ << " C=" << d.C << " E=" << d.E);
    const host_tensor<T, 3> x = random<T, 3>({d.B, d.T_, d.C}, 1);
    const host_tensor<T, 2> w = random<T, 2>({d.C, d.E}, 2, 1.0 / std::sqrt(double(d.C)));
    std::vector<T> bias(static_cast<std::size_t>(d.E));
    std::vector<float> bias32(bias.size());
    for (std::size_t i = 0; i < bias.size(); ++i) {
      bias[i] = from<T>(0.01 * double(i % 17));
      bias32[i] = f32(bias[i]);
    }
    host_tensor<T, 3> got({d.B, d.T_, d.E});
    host_tensor<float, 3> want({d.B, d.T_, d.E});
    project(this->policy, x.view(), w.view(), got.view());
    project(reference, convert<float>(x).view(), convert<float>(w).view(), want.view());
    EXPECT_TRUE(close<T>(got, want));
    project(this->policy, x.view(), w.view(), got.view(), std::span<const T>(bias));
    project(reference, convert<float>(x).view(), convert<float>(w).view(), want.view(),
            std::span<const float>(bias32));
    EXPECT_TRUE(close<T>(got, want));
  }
}

TYPED_TEST(CudaStages, ProjectQkvIntoOneInterleavedBuffer) {
  using T = TypeParam;
  const index_t B = 2, T_ = 65, C = 96, E = 48;
  const host_tensor<T, 3> x = random<T, 3>({B, T_, C}, 1);
  std::vector<host_tensor<T, 2>> w;
  std::vector<std::vector<T>> b(3);
  for (int n = 0; n < 3; ++n) {
    w.push_back(random<T, 2>({C, E}, 10 + n, 1.0 / std::sqrt(double(C))));
    b[n].assign(E, from<T>(0.1 * (n + 1)));
  }
  host_tensor<T, 3> fused({B, T_, 3 * E});  // (B, T, 3E): q | k | v
  auto part = [&](index_t n) {
    return tensor_view<T, 3>{fused.data() + n * E, {B, T_, E}, {T_ * 3 * E, 3 * E, 1}};
  };
  project_qkv(this->policy, x.view(), w[0].view(), w[1].view(), w[2].view(), part(0), part(1),
              part(2), std::span<const T>(b[0]), std::span<const T>(b[1]),
              std::span<const T>(b[2]));
  for (int n = 0; n < 3; ++n) {
    host_tensor<float, 3> want({B, T_, E});
    host_tensor<T, 3> got({B, T_, E});
    std::vector<float> b32(b[n].size());
    for (std::size_t i = 0; i < b32.size(); ++i) b32[i] = f32(b[n][i]);
    project(reference, convert<float>(x).view(), convert<float>(w[n]).view(), want.view(),
            std::span<const float>(b32));
    for (index_t i = 0; i < B; ++i)
      for (index_t t = 0; t < T_; ++t)
        for (index_t e = 0; e < E; ++e) got(i, t, e) = part(n)(i, t, e);
    EXPECT_TRUE(close<T>(got, want)) << "output " << n;
  }
}

/// The naive 16-bit attention: every stage's output rounded to T (fp32 math in between).
template <class T>
host_tensor<float, 4> naive_attention(const qkv<T>& in, const shape& s, bool causal) {
  host_tensor<float, 4> sc({s.B, s.H, s.Tq, s.Tk}), o({s.B, s.H, s.Tq, s.Dv});
  scaled_scores(reference, in.q32.view(), in.k32.view(), sc.view());
  sc = convert<float>(convert<T>(sc));
  if (causal) causal_mask(reference, sc.view());
  softmax_rows(reference, sc.view());
  sc = convert<float>(convert<T>(sc));
  weighted_values(reference, sc.view(), in.v32.view(), o.view());
  return convert<float>(convert<T>(o));
}

/// Fused output against the fp32 reference: tolerance<float> for float, FlashAttention's
/// criterion for 16-bit types.
template <class T>
::testing::AssertionResult attention_close(const host_tensor<T, 4>& got,
                                           const host_tensor<float, 4>& want, const qkv<T>& in,
                                           const shape& s, bool causal) {
  if constexpr (std::is_same_v<T, float>) {
    return close<T>(got, want);
  } else {
    const double fast = max_error(got, want);
    const double naive = max_error(naive_attention(in, s, causal), want);
    if (fast <= tolerance<T>::fused_factor * naive + tolerance<T>::abs)
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "fused error " << fast << " > " << tolerance<T>::fused_factor
           << " x naive 16-bit error " << naive << " + " << tolerance<T>::abs;
  }
}

/// The fused attention (with log-sum-exp) of one case against the fp32 reference.
template <class T>
void check_attention(const shape& s, bool causal) {
  const qkv<T> in(s);
  host_tensor<T, 4> got({s.B, s.H, s.Tq, s.Dv});
  host_tensor<float, 4> want({s.B, s.H, s.Tq, s.Dv});
  host_tensor<float, 3> lse_got({s.B, s.H, s.Tq}), lse_want({s.B, s.H, s.Tq});
  const attention_options opt{.causal = causal};
  attention(cuda_staged{}, in.q.view(), in.k.view(), in.v.view(), got.view(), lse_got.view(), opt);
  attention(reference, in.q32.view(), in.k32.view(), in.v32.view(), want.view(), lse_want.view(),
            opt);
  EXPECT_TRUE(attention_close(got, want, in, s, causal));
  // The log-sum-exp is fp32 in every type: only the fp32 score sums differ.
  EXPECT_TRUE(close<float>(lse_got, lse_want) ||
              (!std::is_same_v<T, float> && max_error(lse_got, lse_want) < 1e-3))
      << max_error(lse_got, lse_want);
}

/// One fused-attention case, named in the test list (e.g. half_B1H2_Tq65_Tk7_D80_Dv80_causal).
struct attention_case {
  int type;  // 0 float, 1 __half, 2 __nv_bfloat16
  shape s;
  bool causal;
};

void PrintTo(const attention_case& c, std::ostream* os) {
  *os << (c.causal ? "causal " : "") << c.s.str();
}

std::vector<attention_case> attention_cases() {
  std::vector<attention_case> cases;
  for (int type = 0; type < 3; ++type)
    for (const shape& s : shapes())
      for (bool causal : {false, true}) cases.push_back({type, s, causal});
  return cases;
}

std::string attention_case_name(const ::testing::TestParamInfo<attention_case>& info) {
  const attention_case& c = info.param;
  std::ostringstream n;
  n << (c.type == 0   ? "float"
        : c.type == 1 ? "half"
                      : "bfloat16")
    << "_B" << c.s.B << "H" << c.s.H << "_Tq" << c.s.Tq << "_Tk" << c.s.Tk << "_D" << c.s.D << "_Dv"
    << c.s.Dv << (c.causal ? "_causal" : "");
  return n.str();
}

class CudaAttention : public ::testing::TestWithParam<attention_case> {
 protected:
  void SetUp() override { ATTN_REQUIRE_DEVICE(); }
};

TEST_P(CudaAttention, MatchesReference) {
  const attention_case& c = GetParam();
  if (c.type == 0) check_attention<float>(c.s, c.causal);
  if (c.type == 1) check_attention<__half>(c.s, c.causal);
  if (c.type == 2) check_attention<__nv_bfloat16>(c.s, c.causal);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention, ::testing::ValuesIn(attention_cases()),
                         attention_case_name);

TYPED_TEST(CudaStages, FullyMaskedRowsAreZeroWithMinusInfinityLse) {
  using T = TypeParam;
  const shape s{1, 2, 70, 5, 64, 64};  // causal: rows 0..64 see no key
  const qkv<T> in(s);
  host_tensor<T, 4> o({s.B, s.H, s.Tq, s.Dv});
  host_tensor<float, 3> lse({s.B, s.H, s.Tq});
  attention(this->policy, in.q.view(), in.k.view(), in.v.view(), o.view(), lse.view(),
            {.causal = true});
  for (index_t h = 0; h < s.H; ++h)
    for (index_t i = 0; i < s.Tq; ++i) {
      if (i < s.Tq - s.Tk) {
        ASSERT_EQ(lse(0, h, i), -std::numeric_limits<float>::infinity()) << i;
        for (index_t d = 0; d < s.Dv; ++d) ASSERT_EQ(f32(o(0, h, i, d)), 0.0f) << i << "," << d;
      } else {
        ASSERT_TRUE(std::isfinite(lse(0, h, i))) << i;
      }
    }
}

// q, v, o as [B, T, H, D] in memory seen as [B, H, T, D] (16-byte rows: the cp.async path for
// 16-bit types), k as [B, H, D, T] (column stride != 1: the element-wise path).
TYPED_TEST(CudaStages, StridedViewsMatchReference) {
  using T = TypeParam;
  for (const shape& s : {shape{2, 3, 65, 65, 64, 64}, shape{1, 2, 7, 130, 80, 80}})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(s.str() + (causal ? " causal" : ""));
      const qkv<T> in(s);
      strided_qkv<T> st(s, in.q, in.k, in.v);
      for (bool contiguous_k : {false, true}) {
        const tensor_view<const T, 4> kv = contiguous_k ? in.k.view() : st.k();
        attention(this->policy, st.q(), kv, st.v(), st.o(), {.causal = causal});
        host_tensor<float, 4> want({s.B, s.H, s.Tq, s.Dv});
        attention(reference, in.q32.view(), in.k32.view(), in.v32.view(), want.view(),
                  {.causal = causal});
        EXPECT_TRUE(attention_close(st.o_bhtd(), want, in, s, causal))
            << "contiguous k " << contiguous_k;
      }

      // The stages through the same strided views.
      host_tensor<T, 4> sc({s.B, s.H, s.Tq, s.Tk});
      host_tensor<float, 4> sc_want({s.B, s.H, s.Tq, s.Tk});
      scaled_scores(this->policy, st.q(), st.k(), sc.view());
      scaled_scores(reference, in.q32.view(), in.k32.view(), sc_want.view());
      EXPECT_TRUE(close<T>(sc, sc_want));
      softmax_rows(reference, sc_want.view());
      const host_tensor<T, 4> p = convert<T>(sc_want);
      host_tensor<T, 4> wv({s.B, s.H, s.Tq, s.Dv});
      host_tensor<float, 4> wv_want({s.B, s.H, s.Tq, s.Dv});
      weighted_values(this->policy, p.view(), st.v(), wv.view());
      weighted_values(reference, convert<float>(p).view(), in.v32.view(), wv_want.view());
      EXPECT_TRUE(close<T>(wv, wv_want));
    }
}

// attn::cuda on device memory directly: device_tensor, copy, and multi_head_attention, whose
// workspaces are device_tensors (owning_tensor<device_space>).
class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override { ATTN_REQUIRE_DEVICE(); }
};

TEST_F(CudaDevice, CopyRoundTripsStridedViews) {
  const host_tensor<float, 3> a = random<float, 3>({3, 5, 7}, 4);
  device_tensor<float, 3> d({3, 7, 5});
  // Transposed on the way in (strided device destination), back through a strided source.
  const tensor_view<float, 3, device_space> d_t{d.data(), {3, 5, 7}, {35, 1, 5}};
  copy(a.view(), d_t);
  host_tensor<float, 3> back({3, 5, 7});
  copy(tensor_view<const float, 3, device_space>(d_t), back.view());
  EXPECT_EQ(max_error(back, a), 0.0);
  host_tensor<float, 3> plain({3, 7, 5});
  copy(d.view(), plain.view());
  EXPECT_EQ(plain(1, 6, 4), a(1, 4, 6));
  EXPECT_THROW(copy(a.view(), d.view()), shape_error);
}

TEST_F(CudaDevice, PolicyOnAStreamQueuesThere) {
  const shape s{1, 2, 65, 65, 64, 64};
  const qkv<float> in(s);
  device_tensor<float, 4> q({s.B, s.H, s.Tq, s.D}), k({s.B, s.H, s.Tk, s.D}),
      v({s.B, s.H, s.Tk, s.Dv}), o({s.B, s.H, s.Tq, s.Dv});
  copy(in.q.view(), q.view());
  copy(in.k.view(), k.view());
  copy(in.v.view(), v.view());
  cudaStream_t stream = nullptr;
  ATTN_CUDA_CHECK(cudaStreamCreate(&stream));
  const cuda_policy on_stream = cuda.on(stream);
  EXPECT_EQ(on_stream.stream, stream);
  attention(on_stream, tensor_view<const float, 4, device_space>(q.view()),
            tensor_view<const float, 4, device_space>(k.view()),
            tensor_view<const float, 4, device_space>(v.view()), o.view(), {.causal = true});
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  ATTN_CUDA_CHECK(cudaStreamDestroy(stream));
  host_tensor<float, 4> got({s.B, s.H, s.Tq, s.Dv});
  host_tensor<float, 4> want({s.B, s.H, s.Tq, s.Dv});
  copy(o.view(), got.view());
  attention(reference, in.q32.view(), in.k32.view(), in.v32.view(), want.view(), {.causal = true});
  EXPECT_TRUE(close<float>(got, want));
}

TEST_F(CudaDevice, ErrorsBecomeBackendErrorsWithFileLineAndCudaString) {
  try {
    ATTN_CUDA_CHECK(cudaErrorMemoryAllocation);
    FAIL() << "no exception";
  } catch (const backend_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("backend_test.cu:"), std::string::npos) << what;
    EXPECT_NE(what.find(cudaGetErrorString(cudaErrorMemoryAllocation)), std::string::npos) << what;
  }
}

TEST_F(CudaDevice, MultiHeadAttentionOnDeviceMatchesReference) {
  const index_t B = 2, T_ = 63, C = 96, H = 3;
  const host_tensor<float, 3> x = random<float, 3>({B, T_, C}, 3);
  std::vector<host_tensor<float, 2>> w;
  std::vector<device_tensor<float, 2>> dw;
  std::vector<std::vector<float>> b(4);
  std::vector<device_tensor<float, 2>> db;  // biases as [1, C]
  for (int n = 0; n < 4; ++n) {
    w.push_back(random<float, 2>({C, C}, 20 + n, 1.0 / std::sqrt(double(C))));
    dw.emplace_back(dims<2>{C, C});
    copy(w[n].view(), dw[n].view());
    b[n].assign(std::size_t(C), 0.05f * float(n + 1));
    db.emplace_back(dims<2>{1, C});
    copy(tensor_view<const float, 2>{b[n].data(), {1, C}}, db[n].view());
  }
  device_tensor<float, 3> dx({B, T_, C}), dout({B, T_, C});
  copy(x.view(), dx.view());
  auto span = [&](int n) { return std::span<const float>(db[n].data(), std::size_t(C)); };
  const mha_weights<float, device_space> dweights{dw[0].view(), dw[1].view(), dw[2].view(),
                                                  dw[3].view(), span(0),      span(1),
                                                  span(2),      span(3),      H};
  const mha_weights<float> weights{
      w[0].view(), w[1].view(), w[2].view(), w[3].view(), b[0], b[1], b[2], b[3], H};
  host_tensor<float, 3> got({B, T_, C}), want({B, T_, C});
  multi_head_attention(cuda, tensor_view<const float, 3, device_space>(dx.view()), dweights,
                       dout.view(), {.causal = true});
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
  copy(dout.view(), got.view());
  multi_head_attention(reference, x.view(), weights, want.view(), {.causal = true});
  EXPECT_TRUE(close<float>(got, want));
}

}  // namespace
}  // namespace attn::test
