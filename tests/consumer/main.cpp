// A consumer of attn: causal attention on the CPU backend against the reference.
#include <attn/attn.hpp>
#include <cmath>
#include <cstdio>

int main() {
  const int B = 1, H = 2, T = 33, D = 16;
  attn::host_tensor<float, 4> q({B, H, T, D}), k({B, H, T, D}), v({B, H, T, D});
  attn::host_tensor<float, 4> o({B, H, T, D}), ref({B, H, T, D});
  for (attn::index_t i = 0; i < q.size(); ++i) {
    q.data()[i] = std::sin(0.37f * float(i));
    k.data()[i] = std::cos(0.11f * float(i));
    v.data()[i] = std::sin(0.05f * float(i) + 1.0f);
  }
  attn::attention(attn::cpu, q.view(), k.view(), v.view(), o.view(), {.causal = true});
  attn::attention(attn::reference, q.view(), k.view(), v.view(), ref.view(), {.causal = true});
  double worst = 0;
  for (attn::index_t i = 0; i < o.size(); ++i)
    worst = std::fmax(worst, std::fabs(double(o.data()[i]) - double(ref.data()[i])));
  std::printf("consumer: max |cpu - reference| = %.3g\n", worst);
  return worst < 1e-5 ? 0 : 1;
}
