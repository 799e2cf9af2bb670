// The Gated DeltaNet mixer's forward + backward on one thread: seconds per call and GFLOP/s
// against the core's fp32 FMA peak (bench/README.md, MACHINE.md). The FLOPs are those of its
// gemm calls (the six projections and the chunked delta rule's matrix products, tessel's gemm
// counters); the chunks' triangular inverses (C³/3 each), the convolution, the norms and the
// gates are not counted, their time is: the figure is a lower bound of the work done per second.
//
//   OMP_NUM_THREADS=1 build/bench/gdn_bench [--batch 4 --seq 256 --hidden 256 --key-heads 2
//       --value-heads 4 --key-dim 64 --value-dim 64 --reps 10 --peak 205]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <vector>

#include "tessel/core/philox.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/gated_delta_net.h"

int main(int argc, char** argv) {
  using namespace tessel;
  int64_t B = 4, T = 256, C = 256;
  int Hk = 2, Hv = 4, dk = 64, dv = 64, reps = 10;
  double peak = 205;  // GFLOP/s: one AMD Zen core's fp32 FMA peak (MACHINE.md)
  CLI::App app{"Gated DeltaNet layer forward + backward: time and GFLOP/s"};
  app.add_option("--batch", B);
  app.add_option("--seq", T);
  app.add_option("--hidden", C);
  app.add_option("--key-heads", Hk);
  app.add_option("--value-heads", Hv);
  app.add_option("--key-dim", dk);
  app.add_option("--value-dim", dv);
  app.add_option("--reps", reps);
  app.add_option("--peak", peak, "the core's fp32 FMA peak in GFLOP/s");
  CLI11_PARSE(app, argc, argv);

  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  cfg.hidden_size = static_cast<int>(C);
  cfg.num_layers = 1;
  cfg.linear = {.layer_pattern = {1}, .conv_kernel_dim = 4, .key_head_dim = dk, .value_head_dim = dv,
                .num_key_heads = Hk, .num_value_heads = Hv};
  const Kernels& k = cpu_kernels();
  ParamRegistry registry;
  TensorList scratch, shared, kept;
  GatedDeltaNet mixer(one_process_context(k, registry, cfg, LayerBuffers{scratch, shared}, B, T), 0);
  scratch.allocate(k);
  registry.finalize();
  registry.init_values(1);
  GatedDeltaNet::Saved s;
  SavedLists lists{kept, kept};
  mixer.list_saved(s, lists, LayerRecompute{});
  kept.allocate(k);
  const int64_t N = B * T;
  std::vector<float> x(N * C), d_out(N * C), out(N * C), dx(N * C), partial(N * C);
  for (int64_t i = 0; i < N * C; ++i) {
    x[i] = random_normal(1, 1, i);
    d_out[i] = random_normal(1, 2, i);
  }
  auto call = [&] {
    registry.zero_grads();
    std::fill(dx.begin(), dx.end(), 0.0f);
    mixer.forward(s, out.data(), x.data(), partial.data(), PackedRows{});
    mixer.backward_input(s, dx.data(), d_out.data(), x.data());
    mixer.backward_weight(s, x.data());
  };
  call();  // warm-up: the threads' chunk scratch, oneDNN's kernels
  k.gemm_stats_reset();
  k.gemm_stats_enable(true);
  call();
  const GemmStats counted = k.gemm_stats();
  k.gemm_stats_enable(false);
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    call();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const double gflops = counted.flops / median / 1e9;
  fmt::print("GDN layer B{} T{} C{} Hk{}×{} Hv{}×{}: forward + backward {:.2f} ms (median of {}), "
             "{:.3f} GFLOP in {} gemm calls, {:.1f} GFLOP/s = {:.0f} % of the {:.0f} GFLOP/s FMA peak; "
             "gemm calls alone {:.1f} GFLOP/s\n",
             B, T, C, Hk, dk, Hv, dv, median * 1e3, reps, counted.flops / 1e9, counted.calls, gflops,
             100 * gflops / peak, peak, counted.flops / counted.seconds / 1e9);
}
