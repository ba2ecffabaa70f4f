// A plain C++ file (g++, no CUDA compiler): it sees the CUDA backend only through
// <attn/attn.hpp> (attn::cuda linked defines ATTN_CUDA_BACKEND) and calls kernels that
// instantiate.cu instantiated. Exit code 77 (skipped) without a GPU.

#include <attn/attn.hpp>
#include <cmath>
#include <cstdio>

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no usable GPU: skipping\n");
    return 77;
  }
  const attn::index_t B = 1, H = 2, T = 65, D = 64;
  attn::host_tensor<float, 4> q({B, H, T, D}), k({B, H, T, D}), v({B, H, T, D}), want({B, H, T, D}),
      got({B, H, T, D});
  for (attn::index_t i = 0; i < q.size(); ++i) {
    q.data()[i] = std::sin(0.1f * float(i));
    k.data()[i] = std::cos(0.07f * float(i));
    v.data()[i] = std::sin(0.03f * float(i) + 1.0f);
  }
  attn::device_tensor<float, 4> dq({B, H, T, D}), dk({B, H, T, D}), dv({B, H, T, D}),
      d_o({B, H, T, D});
  attn::copy(q.view(), dq.view());
  attn::copy(k.view(), dk.view());
  attn::copy(v.view(), dv.view());
  attn::attention(attn::cuda, attn::tensor_view<const float, 4, attn::device_space>(dq.view()),
                  attn::tensor_view<const float, 4, attn::device_space>(dk.view()),
                  attn::tensor_view<const float, 4, attn::device_space>(dv.view()), d_o.view(),
                  {.causal = true});
  attn::copy(d_o.view(), got.view());
  attn::attention(attn::cpu, q.view(), k.view(), v.view(), want.view(), {.causal = true});
  double worst = 0;
  for (attn::index_t i = 0; i < got.size(); ++i)
    worst = std::fmax(worst, std::fabs(double(got.data()[i]) - want.data()[i]));
  std::printf("attn::cuda vs attn::cpu: max |difference| %.3g\n", worst);
  return worst < 1e-4 ? 0 : 1;
}
