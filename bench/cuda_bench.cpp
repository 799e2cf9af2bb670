// cuda_bench: the CUDA kernel table's speed on GPT-2 124M's shapes (V 50304, C 768, 12 heads of
// 64, T 1024), fp32: every linear layer's forward and backward (cuBLASLt, TFLOP/s), causal
// attention forward and backward (TFLOP/s), and the memory-bound kernels of a step (GB/s).
// Timed with CUDA events on the backend's stream: warm-up, then the median of --rounds rounds of
// --reps calls each, on random data. Prints a table; --json FILE writes one object per line.
//
// FLOP counts: a linear layer 2·N·in·out forward, twice that backward; causal attention
// 2·B·H·T²·D forward (QKᵀ and PV over the visible half) and 2.5× that backward (FlashAttention's
// convention: five products, one recomputed). Bytes: each input read once, each output written
// once.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tessel/core/cuda.h"
#include "tessel/kernels/cuda/kernels.h"

namespace {

using tessel::Kernels;
using tessel::Tensor;

struct Result {
  std::string group, name;
  double ms, rate;  // median ms per call; TFLOP/s or GB/s
  const char* unit;
};

// Random values in [-1, 1), so that nothing runs on zeros.
Tensor random_tensor(const Kernels& k, int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> host(n);
  for (float& x : host) x = dist(rng);
  Tensor t = k.zeros({n});
  k.memory.from_host(t.data(), host.data(), n * 4);
  return t;
}

double median_ms(const std::function<void()>& call, int reps, int rounds) {
  cudaStream_t stream = tessel::cuda_stream();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) call();  // warm-up: plans, scratch, module load
  std::vector<double> per_call;
  for (int r = 0; r < rounds; ++r) {
    cudaEventRecord(start, stream);
    for (int i = 0; i < reps; ++i) call();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    per_call.push_back(ms / reps);
  }
  tessel::cuda_check(cudaGetLastError(), "cuda_bench");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CUDA kernel table speed on GPT-2 124M shapes"};
  int64_t B = 8, T = 1024, C = 768, V = 50304, H = 12;
  int reps = 20, rounds = 5;
  std::string json;
  app.add_option("--batch", B, "sequences per call");
  app.add_option("--seq", T, "sequence length");
  app.add_option("--hidden", C, "hidden size");
  app.add_option("--vocab", V, "vocabulary (padded)");
  app.add_option("--heads", H, "attention heads");
  app.add_option("--reps", reps, "calls per timed round");
  app.add_option("--rounds", rounds, "timed rounds (the median is reported)");
  app.add_option("--json", json, "also write the results as JSON lines to this file");
  CLI11_PARSE(app, argc, argv);
  if (tessel::cuda_device_count() == 0) {
    std::fprintf(stderr, "cuda_bench: no CUDA device\n");
    return 1;
  }
  const Kernels& k = tessel::cuda_kernels();
  std::mt19937 rng(1);
  const int64_t N = B * T, D = C / H;
  std::vector<Result> results;
  auto time = [&](const std::string& group, const std::string& name, double work, const char* unit,
                  const std::function<void()>& call) {
    const double ms = median_ms(call, reps, rounds);
    results.push_back(
        {group, name, ms, work / (ms * 1e-3) / 1e12 * (unit[0] == 'G' ? 1e3 : 1.0), unit});
    const Result& r = results.back();
    std::printf("%-10s %-28s %9.3f ms %9.2f %s\n", r.group.c_str(), r.name.c_str(), r.ms, r.rate,
                r.unit);
    std::fflush(stdout);
  };

  // Linear layers, GPT-2's Conv1D layout (in, out); the LM head is the tied embedding (V, C).
  struct Linear {
    const char* name;
    int64_t in, out;
    tessel::WeightLayout layout;
  };
  const Linear linears[] = {{"qkv", C, 3 * C, tessel::WeightLayout::InOut},
                            {"attn-proj", C, C, tessel::WeightLayout::InOut},
                            {"mlp-up", C, 4 * C, tessel::WeightLayout::InOut},
                            {"mlp-down", 4 * C, C, tessel::WeightLayout::InOut},
                            {"lm-head", C, V, tessel::WeightLayout::OutIn}};
  double layer_flops = 0, layer_ms = 0;
  for (const Linear& l : linears) {
    Tensor x = random_tensor(k, N * l.in, rng), w = random_tensor(k, l.in * l.out, rng, 0.02f);
    Tensor y = k.zeros({N * l.out}), dy = random_tensor(k, N * l.out, rng),
           dx = k.zeros({N * l.in});
    Tensor dw = k.zeros({l.in * l.out});
    const double flops = 2.0 * N * l.in * l.out;
    time("gemm", std::string(l.name) + " fwd", flops, "TFLOP/s", [&] {
      k.linear_forward(y.data(), x.data(), w.data(), nullptr, N, l.in, l.out, l.layout);
    });
    time("gemm", std::string(l.name) + " bwd", 2 * flops, "TFLOP/s", [&] {
      k.linear_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), N, l.in,
                        l.out, l.layout);
    });
    const size_t n = results.size();
    const double ms = results[n - 2].ms + results[n - 1].ms;
    time("gemm", std::string(l.name) + " fwd+bwd", 3 * flops, "TFLOP/s", [&] {
      k.linear_forward(y.data(), x.data(), w.data(), nullptr, N, l.in, l.out, l.layout);
      k.linear_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), N, l.in,
                        l.out, l.layout);
    });
    // --bf16's GEMMs: the operands rounded to bf16 (their conversion included), fp32 accumulation.
    const Kernels& kb = tessel::cuda_kernels(tessel::Precision::BF16);
    time("gemm", std::string(l.name) + " fwd+bwd, bf16", 3 * flops, "TFLOP/s", [&] {
      kb.linear_forward(y.data(), x.data(), w.data(), nullptr, N, l.in, l.out, l.layout);
      kb.linear_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), N, l.in,
                         l.out, l.layout);
    });
    if (std::string(l.name) != "lm-head") layer_flops += 3 * flops, layer_ms += ms;
  }
  results.push_back(
      {"gemm", "one layer's linears", layer_ms, layer_flops / (layer_ms * 1e-3) / 1e12, "TFLOP/s"});
  std::printf("%-10s %-28s %9.3f ms %9.2f %s\n", "gemm", "one layer's linears", layer_ms,
              results.back().rate, "TFLOP/s");

  {  // causal attention over a fused qkv buffer, as the model calls it
    Tensor qkv = random_tensor(k, N * 3 * C, rng), out = k.zeros({N * C}),
           lse = k.zeros({B * H * T});
    Tensor dout = random_tensor(k, N * C, rng), dqkv = k.zeros({N * 3 * C});
    const float* q = qkv.data();
    const double flops = 2.0 * B * H * T * T * D;
    time("attention", "causal fwd", flops, "TFLOP/s", [&] {
      k.attention_forward(out.data(), lse.data(), q, q + C, q + 2 * C, B, T, H, H, D, 3 * C, 3 * C,
                          3 * C, true, tessel::DropoutSite{});
    });
    time("attention", "causal bwd", 2.5 * flops, "TFLOP/s", [&] {
      k.attention_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, dout.data(), q, q + C,
                           q + 2 * C, out.data(), lse.data(), B, T, H, H, D, 3 * C, 3 * C, 3 * C,
                           true, tessel::DropoutSite{});
    });
  }
  {  // memory-bound kernels of a step
    Tensor x = random_tensor(k, N * C, rng), w = random_tensor(k, C, rng),
           b = random_tensor(k, C, rng);
    Tensor y = k.zeros({N * C}), mean = k.zeros({N}), rstd = k.zeros({N}), dx = k.zeros({N * C});
    Tensor dw = k.zeros({C}), db = k.zeros({C}), h = random_tensor(k, N * 4 * C, rng),
           g = k.zeros({N * 4 * C});
    time("memory", "layernorm fwd", 2.0 * N * C * 4, "GB/s", [&] {
      k.layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                          1e-5f);
    });
    time("memory", "layernorm bwd", 3.0 * N * C * 4, "GB/s", [&] {
      k.layernorm_backward(dx.data(), dw.data(), db.data(), y.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), N, C);
    });
    time("memory", "gelu fwd", 2.0 * N * 4 * C * 4, "GB/s",
         [&] { k.gelu_forward(g.data(), h.data(), N * 4 * C); });
    time("memory", "gelu bwd", 3.0 * N * 4 * C * 4, "GB/s",
         [&] { k.gelu_backward(g.data(), h.data(), h.data(), N * 4 * C); });
    Tensor logits = random_tensor(k, N * V, rng, 4.0f), rmax = k.zeros({N}), rsum = k.zeros({N});
    Tensor tl = k.zeros({N}), lse = k.zeros({N}), targets = k.zeros({N}, tessel::DType::I32);
    time("memory", "cross-entropy fwd", 1.0 * N * V * 4, "GB/s", [&] {
      k.cross_entropy_partial_forward(rmax.data(), rsum.data(), tl.data(), logits.data(),
                                      targets.ints(), 0, N, V, V);
    });
    k.cross_entropy_finish(lse.data(), rmax.data(), rsum.data(), tl.data(), targets.ints(), N);
    time("memory", "cross-entropy bwd (in place)", 2.0 * N * V * 4, "GB/s", [&] {
      k.cross_entropy_backward(logits.data(), logits.data(), lse.data(), targets.ints(), 0, 1e-4f,
                               N, V, V);
    });
    const int64_t P = 124'475'904;  // GPT-2 124M's parameters (padded vocabulary)
    Tensor p = random_tensor(k, P, rng), gp = random_tensor(k, P, rng), m = k.zeros({P}),
           v = k.zeros({P});
    time("memory", "adamw (124M params)", 7.0 * P * 4, "GB/s", [&] {
      k.adamw_update(p.data(), gp.data(), m.data(), v.data(), P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                     10);
    });
  }
  if (!json.empty()) {
    std::FILE* f = std::fopen(json.c_str(), "w");
    for (const Result& r : results)
      std::fprintf(
          f,
          "{\"group\": \"%s\", \"name\": \"%s\", \"ms\": %.5f, \"rate\": %.3f, \"unit\": \"%s\"}\n",
          r.group.c_str(), r.name.c_str(), r.ms, r.rate, r.unit);
    std::fclose(f);
  }
  return 0;
}
