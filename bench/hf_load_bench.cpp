// Memory and reads of a pipelined start from a Hugging Face folder: under mpirun -n PP·TP, each
// rank builds its part of stage rank / TP of PP (an even split, as `tessel train --pp` makes it),
// its TP slices too, the way the trainer does (its parameters declared, then the registry
// allocated: values and gradients, zeroed), and loads it with load_hf_weights. Each rank reports
// its weights S, the largest tensor of its stage T, the bytes it read from the files (rchar of
// /proc/self/io) and the files it opened, and its peak resident memory during the load (VmHWM,
// reset just before) over the memory it held before the registry existed, less the gradient
// buffer: what the weights and their import cost, against the bound S + T.
//
//   mpirun -n 4 build/bench/hf_load_bench --folder DIR --num-layers 8 --hidden-size 1024 ...
// bench/hf_load_bench.sh makes the folders with `tessel export` and runs it.

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tessel/ckpt/hf_import.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"
#include "tessel/model/transformer.h"

namespace {

using namespace tessel;

// A field of /proc/self/status or /proc/self/io ("VmHWM:", "rchar:"), in its own unit.
int64_t proc_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(key)) return std::stoll(line.substr(key.size()));
  fail("{}: no {}", file, key);
}
double rss_mb() { return proc_field("/proc/self/status", "VmRSS:") / 1024.0; }
double peak_mb() { return proc_field("/proc/self/status", "VmHWM:") / 1024.0; }

// The peak resident size starts again from the current one (Linux's clear_refs 5).
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime runtime(&argc, &argv);
  CLI::App app{"peak memory and bytes read of each pipeline stage loading a Hugging Face folder"};
  std::string folder;
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  app.add_option("--folder", folder, "the Hugging Face folder (model.safetensors or an index)")->required();
  app.add_option("--num-layers", cfg.num_layers)->required();
  app.add_option("--hidden-size", cfg.hidden_size)->required();
  app.add_option("--num-attention-heads", cfg.num_attention_heads)->required();
  app.add_option("--ffn-hidden-size", cfg.ffn_hidden_size)->required();
  app.add_option("--vocab-size", cfg.vocab_size)->required();
  app.add_option("--seq-length", cfg.seq_length)->required();
  int tp = 1;
  app.add_option("--tp", tp, "tensor-parallel ranks a stage (the world is PP x TP)");
  CLI11_PARSE(app, argc, argv);
  try {
    cfg.validate();
    Comm& world = runtime.world();
    TESSEL_CHECK(tp >= 1 && world.size() % tp == 0, "--tp {} does not divide the world of {}", tp, world.size());
    const int P = world.size() / tp, stage = world.rank() / tp, tp_rank = world.rank() % tp;
    TESSEL_CHECK(cfg.num_layers % P == 0, "{} layers do not split evenly over {} stages", cfg.num_layers, P);
    const int per_stage = cfg.num_layers / P;

    const double before_registry = rss_mb();
    ParamRegistry params;
    TransformerChunk::declare(cfg, {.spec = ChunkSpec{stage * per_stage, per_stage, stage == 0, stage == P - 1}},
                              ChunkPlace{.tp = tp, .tp_rank = tp_rank}, params);
    params.finalize();
    int64_t largest = 0;  // the whole tensor of the largest parameter
    for (const Param& p : params.params()) largest = std::max(largest, shape_numel(p.global_shape));
    const double weights_mb = params.numel() * 4 / 1048576.0, largest_mb = largest * 4 / 1048576.0;
    const double before_load = rss_mb();
    const int64_t read_before = proc_field("/proc/self/io", "rchar:");
    reset_peak();
    const auto start = std::chrono::steady_clock::now();
    const std::vector<std::string> opened = load_hf_weights(params, cfg, folder);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double read_mb = (proc_field("/proc/self/io", "rchar:") - read_before) / 1048576.0;
    const double peak = peak_mb();
    // What the weights and the import hold at the peak: all above the memory before the registry
    // but the gradient buffer (the same size as the weights, zeroed by finalize).
    const double held = peak - before_registry - weights_mb;
    const std::string line = fmt::format(
        "stage {}/{} TP rank {}/{}: weights S {:.1f} MB, largest tensor T {:.1f} MB | at the peak, weights + "
        "import {:.1f} MB = S + {:.1f} MB = {:.3f} (S + T); the load's own {:+.1f} MB | read {:.1f} MB from {} "
        "file(s) in {:.2f} s\n",
        stage, P, tp_rank, tp, weights_mb, largest_mb, held, held - weights_mb, held / (weights_mb + largest_mb),
        peak - before_load, read_mb, opened.size(), seconds);
    // Printed in stage order.
    for (int r = 0; r < P; ++r) {
      world.barrier();
      if (r == stage) std::fputs(line.c_str(), stdout), std::fflush(stdout);
    }
  } catch (const Error& e) {
    abort_job(e.what());
  }
  return 0;
}
