// A consumer of attn::cuda: causal bf16 attention on the GPU against the reference on the host.
// Exit code 77 (skipped) without a usable GPU.
#include <attn/backend/reference/backend.hpp>
#include <attn/cuda.cuh>
#include <cmath>
#include <cstdio>

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("cuda consumer: built; no usable GPU, so not run\n");
    return 77;
  }
  const int B = 1, H = 2, T = 33, D = 64;
  attn::host_tensor<float, 4> q({B, H, T, D}), k({B, H, T, D}), v({B, H, T, D}), ref({B, H, T, D});
  attn::host_tensor<__nv_bfloat16, 4> hq({B, H, T, D}), hk({B, H, T, D}), hv({B, H, T, D}),
      ho({B, H, T, D});
  for (attn::index_t i = 0; i < q.size(); ++i) {
    hq.data()[i] = __float2bfloat16(std::sin(0.37f * float(i)));
    hk.data()[i] = __float2bfloat16(std::cos(0.11f * float(i)));
    hv.data()[i] = __float2bfloat16(std::sin(0.05f * float(i) + 1.0f));
    q.data()[i] = __bfloat162float(hq.data()[i]);
    k.data()[i] = __bfloat162float(hk.data()[i]);
    v.data()[i] = __bfloat162float(hv.data()[i]);
  }
  attn::device_tensor<__nv_bfloat16, 4> dq({B, H, T, D}), dk({B, H, T, D}), dv({B, H, T, D}),
      d_o({B, H, T, D});
  attn::copy(hq.view(), dq.view());
  attn::copy(hk.view(), dk.view());
  attn::copy(hv.view(), dv.view());
  attn::attention(attn::cuda, dq.view(), dk.view(), dv.view(), d_o.view(), {.causal = true});
  attn::copy(d_o.view(), ho.view());
  attn::attention(attn::reference, q.view(), k.view(), v.view(), ref.view(), {.causal = true});
  double worst = 0;
  for (attn::index_t i = 0; i < ref.size(); ++i)
    worst = std::fmax(worst, std::fabs(double(__bfloat162float(ho.data()[i])) - ref.data()[i]));
  std::printf("cuda consumer: max |cuda bf16 - reference| = %.3g\n", worst);
  return worst < 2e-2 ? 0 : 1;
}
