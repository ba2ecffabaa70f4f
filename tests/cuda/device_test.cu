// attn::cuda on device memory directly: device_tensor, copy (strided, through the device copy
// kernel), a policy on a stream, CUDA errors, and multi_head_attention with device workspaces.
// Built twice like suite.cu (emulated and gpu).

#include "../emulator/testing.cuh"  // ATTN_REQUIRE_DEVICE
#include "../support/element_cuda.hpp"
#include "../support/testing.hpp"
#include "staged.hpp"

namespace attn::test {
namespace {

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
  // Device to device, strided on both sides.
  device_tensor<float, 3> e({3, 5, 7});
  copy(tensor_view<const float, 3, device_space>(d_t), e.view());
  host_tensor<float, 3> again({3, 5, 7});
  copy(e.view(), again.view());
  EXPECT_EQ(max_error(again, a), 0.0);
  EXPECT_THROW(copy(a.view(), d.view()), shape_error);
}

TEST_F(CudaDevice, PolicyOnAStreamQueuesThere) {
  using C = backend_case<cuda_staged, float>;
  const shape s{1, 2, 65, 65, 64, 64};
  const qkv<C> in(s);
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
  host_tensor<float, 4> got({s.B, s.H, s.Tq, s.Dv}), want({s.B, s.H, s.Tq, s.Dv});
  copy(o.view(), got.view());
  attention(reference, in.q.view(), in.k.view(), in.v.view(), want.view(), {.causal = true});
  EXPECT_TRUE(close(got, want));
}

TEST_F(CudaDevice, ErrorsBecomeBackendErrorsWithFileLineAndCudaString) {
  try {
    ATTN_CUDA_CHECK(cudaErrorMemoryAllocation);
    FAIL() << "no exception";
  } catch (const backend_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("device_test.cu:"), std::string::npos) << what;
    EXPECT_NE(what.find(cudaGetErrorString(cudaErrorMemoryAllocation)), std::string::npos) << what;
  }
}

// The layer on device memory with a device workspace (reused: the second call allocates
// nothing) and device biases (rank-1 device views).
TEST_F(CudaDevice, MultiHeadAttentionOnDeviceMatchesReference) {
  const index_t B = 2, T_ = 63, Cm = 96, H = 3;
  const host_tensor<float, 3> x = random<float, 3>({B, T_, Cm}, 3);
  std::vector<host_tensor<float, 2>> w;
  std::vector<host_tensor<float, 1>> b;
  std::vector<device_tensor<float, 2>> dw;
  std::vector<device_tensor<float, 1>> db;
  for (int n = 0; n < 4; ++n) {
    w.push_back(random<float, 2>({Cm, Cm}, 20 + n, 1.0 / std::sqrt(double(Cm))));
    b.push_back(random<float, 1>({Cm}, 30 + n, 0.1));
    dw.emplace_back(dims<2>{Cm, Cm});
    db.emplace_back(dims<1>{Cm});
    copy(w[n].view(), dw[n].view());
    copy(b[n].view(), db[n].view());
  }
  device_tensor<float, 3> dx({B, T_, Cm}), dout({B, T_, Cm});
  copy(x.view(), dx.view());
  const mha_weights<float, device_space> dweights{dw[0].view(), dw[1].view(), dw[2].view(),
                                                  dw[3].view(), db[0].view(), db[1].view(),
                                                  db[2].view(), db[3].view(), H};
  const mha_weights<float> weights{w[0].view(), w[1].view(), w[2].view(),
                                   w[3].view(), b[0].view(), b[1].view(),
                                   b[2].view(), b[3].view(), H};
  host_tensor<float, 3> got({B, T_, Cm}), want({B, T_, Cm});
  mha_workspace<float, device_space> ws;
  for (int call = 0; call < 2; ++call) {
    multi_head_attention(cuda, tensor_view<const float, 3, device_space>(dx.view()), dweights,
                         dout.view(), {.causal = true}, ws);
    ATTN_CUDA_CHECK(cudaDeviceSynchronize());
    copy(dout.view(), got.view());
    multi_head_attention(reference, x.view(), weights, want.view(), {.causal = true});
    EXPECT_TRUE(close(got, want)) << "call " << call;
  }
}

}  // namespace
}  // namespace attn::test
