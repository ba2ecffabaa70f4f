// Backward benchmarks: the fused attention's backward and forward + backward, every stage's
// backward beside Eigen GEMMs of the same FLOPs, and the multi-head layer forward + backward,
// at ANDREA-120M's shapes (H 12, d 64, d_model 768). FLOPs follow FlashAttention's
// convention: a backward is 2.5 forwards (5 matmuls against 2), forward + backward 3.5.
//   build/release/benchmarks/attn_bench --benchmark_filter=attention_backward/

#include <Eigen/Core>

#include "bench.hpp"

namespace attn::bench {
namespace {

/// q, k, v, d_o random, o and lse from a forward, and the three gradients.
struct backward_problem {
  host_tensor<float, 4> q, k, v, o, d_o, dq, dk, dv;
  host_tensor<float, 3> lse;
  backward_problem(index_t B, index_t T_, bool causal)
      : q(random_tensor<float, 4>({B, H, T_, d})),
        k(random_tensor<float, 4>({B, H, T_, d})),
        v(random_tensor<float, 4>({B, H, T_, d})),
        o({B, H, T_, d}),
        d_o(random_tensor<float, 4>({B, H, T_, d})),
        dq({B, H, T_, d}),
        dk({B, H, T_, d}),
        dv({B, H, T_, d}),
        lse({B, H, T_}) {
    attn::attention(cpu, q.view(), k.view(), v.view(), o.view(), lse.view(), {.causal = causal});
  }
  void backward(const cpu_policy& p, bool causal) {
    attn::attention_backward(p, q.view(), k.view(), v.view(), o.view(), lse.view(), d_o.view(),
                             dq.view(), dk.view(), dv.view(), {.causal = causal});
  }
};

void attention_backward(benchmark::State& st, int threads, index_t B, index_t T_, bool causal) {
  backward_problem pr(B, T_, causal);
  const cpu_policy p{.threads = threads};
  timed(st, 2.5 * attention_flops(B, T_, causal), threads, [&] {
    pr.backward(p, causal);
    benchmark::DoNotOptimize(pr.dq.data());
  });
}

void attention_fwd_bwd(benchmark::State& st, int threads, index_t B, index_t T_, bool causal) {
  backward_problem pr(B, T_, causal);
  const cpu_policy p{.threads = threads};
  timed(st, 3.5 * attention_flops(B, T_, causal), threads, [&] {
    attn::attention(p, pr.q.view(), pr.k.view(), pr.v.view(), pr.o.view(), pr.lse.view(),
                    {.causal = causal});
    pr.backward(p, causal);
    benchmark::DoNotOptimize(pr.dq.data());
  });
}

using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// `count` pairs of Eigen GEMMs (m x k)(k x n), single-threaded: the anchor of a stage
/// backward that does two products of that shape per head.
void eigen_gemm_pairs(benchmark::State& st, index_t m, index_t k, index_t n, index_t count) {
  const matrix a = matrix::Random(m, k), b = matrix::Random(k, n);
  matrix c(m, n);
  timed(st, 2 * 2.0 * double(m * k * n * count), 1, [&] {
    for (index_t i = 0; i < 2 * count; ++i) {
      c.noalias() = a * b;
      benchmark::DoNotOptimize(c.data());
    }
  });
}

void project_backward(benchmark::State& st) {
  const cpu_policy one{.threads = 1};
  const auto x = random_tensor<float, 3>({1, 1024, d_model});
  const auto w = random_tensor<float, 2>({d_model, d_model}, 0.036);
  const auto dy = random_tensor<float, 3>({1, 1024, d_model});
  host_tensor<float, 3> dx({1, 1024, d_model});
  host_tensor<float, 2> dw({d_model, d_model});
  host_tensor<float, 1> db(dims<1>{d_model});
  timed(st, 2 * 2.0 * 1024 * d_model * d_model, 1, [&] {
    attn::project_backward(one, x.view(), w.view(), dy.view(), dx.view(), dw.view(), db.view());
  });
}

/// A [1, H, 1024, 1024] probability matrix, q/v-shaped inputs and outputs.
struct stage_problem {
  host_tensor<float, 4> q = random_tensor<float, 4>({1, H, 1024, d}),
                        k = random_tensor<float, 4>({1, H, 1024, d}),
                        g = random_tensor<float, 4>({1, H, 1024, d}), dq{{1, H, 1024, d}},
                        dk{{1, H, 1024, d}}, p{{1, H, 1024, 1024}}, dp{{1, H, 1024, 1024}};
  stage_problem() {
    attn::scaled_scores(cpu, q.view(), k.view(), p.view());
    attn::softmax_rows(cpu, p.view());
    dp = random_tensor<float, 4>({1, H, 1024, 1024});
  }
};

}  // namespace

void register_backward() {
  for (index_t B : {1, 8})
    for (index_t T_ : {1024, 4096})
      for (bool causal : {false, true})
        for (int t : thread_counts()) {
          if (B == 8 && T_ == 4096 && t == 1) continue;  // minutes per run; threads:2 stands in
          add("attention_backward/cpu_float" + shape_name(B, T_, causal, t), attention_backward, t,
              B, T_, causal);
          add("attention_fwd_bwd/cpu_float" + shape_name(B, T_, causal, t), attention_fwd_bwd, t, B,
              T_, causal);
        }

  // Stage backwards, B = 1, T = 1024, one thread, each beside Eigen GEMMs of its FLOPs.
  const cpu_policy one{.threads = 1};
  add("stage_backward/project/T:1024/C:768/E:768", project_backward);
  add("eigen_gemm/project_backward/2x(1024x768x768)", eigen_gemm_pairs, 1024, d_model, d_model, 1);
  add("stage_backward/scaled_scores/H:12/T:1024", [=](benchmark::State& st) {
    stage_problem s;
    timed(st, 2 * 2.0 * H * 1024 * 1024 * d, 1, [&] {
      attn::scaled_scores_backward(one, s.q.view(), s.k.view(), s.dp.view(), s.dq.view(),
                                   s.dk.view());
    });
  });
  add("eigen_gemm/scores_backward/12x2x(1024x1024x64)", eigen_gemm_pairs, 1024, 1024, d, H);
  add("stage_backward/softmax_rows/H:12/T:1024", [=](benchmark::State& st) {
    stage_problem s;
    host_tensor<float, 4> ds({1, H, 1024, 1024});
    timed(st, 0, 1, [&] { attn::softmax_rows_backward(one, s.p.view(), s.dp.view(), ds.view()); });
  });
  add("stage_backward/weighted_values/H:12/T:1024", [=](benchmark::State& st) {
    stage_problem s;
    host_tensor<float, 4> dpo({1, H, 1024, 1024});
    timed(st, 2 * 2.0 * H * 1024 * 1024 * d, 1, [&] {
      attn::weighted_values_backward(one, s.p.view(), s.k.view(), s.g.view(), dpo.view(),
                                     s.dk.view());
    });
  });

  // The layer, forward + backward.
  for (bool causal : {false, true})
    for (int t : thread_counts())
      add("multi_head_attention_fwd_bwd/cpu_float" + shape_name(1, 1024, causal, t),
          [=](benchmark::State& st) {
            const cpu_policy p{.threads = t};
            const auto x = random_tensor<float, 3>({1, 1024, d_model});
            const auto w = random_tensor<float, 2>({d_model, d_model}, 0.036);
            const auto dout = random_tensor<float, 3>({1, 1024, d_model});
            host_tensor<float, 3> out({1, 1024, d_model}), dx({1, 1024, d_model});
            host_tensor<float, 2> dw[4] = {host_tensor<float, 2>({d_model, d_model}),
                                           host_tensor<float, 2>({d_model, d_model}),
                                           host_tensor<float, 2>({d_model, d_model}),
                                           host_tensor<float, 2>({d_model, d_model})};
            const mha_weights<float> weights{w.view(), w.view(), w.view(), w.view(), {},
                                             {},       {},       {},       H};
            const mha_gradients<float> g{dx.view(), dw[0].view(), dw[1].view(), dw[2].view(),
                                         dw[3].view()};
            mha_workspace<float> ws;
            const attention_options opt{.causal = causal};
            // 4 projections forward, 8 GEMMs of their size backward, and the attention's 3.5.
            const double flops =
                3 * 4 * 2.0 * 1024 * d_model * d_model + 3.5 * attention_flops(1, 1024, causal);
            timed(st, flops, t, [&] {
              multi_head_attention(p, x.view(), weights, out.view(), opt, ws);
              multi_head_attention_backward(p, x.view(), weights, ws, dout.view(), g, opt);
            });
          });
}

}  // namespace attn::bench
