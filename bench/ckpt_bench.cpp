// Checkpoint bandwidth: save_checkpoint and load_checkpoint of one process's model (weights and
// Adam's two moments, F32) against a plain copy of the same bytes (read, write, fsync), in MB/s
// of the checkpoint file. The save writes through a temporary file with fsync and computes its
// CRC-32; the load checks the CRC-32 and rebuilds every tensor from its slice.
//
//   build/bench/ckpt_bench --num-layers 8 --hidden-size 512 --rounds 3 --dir /tmp/ckpt_bench

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/parallel/groups.h"
#include "tessel/core/error.h"
#include "tessel/model/transformer.h"

namespace {

using namespace tessel;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The plain copy a save competes with: copy, then fsync the copy.
void copy_and_sync(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  const int fd = ::open(to.c_str(), O_WRONLY);
  TESSEL_CHECK(fd >= 0 && ::fsync(fd) == 0, "{}: fsync failed", to);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("checkpoint save/load bandwidth against a plain file copy");
  ModelConfig cfg;
  cfg.arch = Arch::GPT2;
  cfg.num_layers = 8;
  cfg.hidden_size = 512;
  cfg.num_attention_heads = 8;
  cfg.seq_length = 256;
  cfg.vocab_size = 256;
  int rounds = 3;
  std::string dir = "/tmp/tessel_ckpt_bench";
  app.add_option("--num-layers", cfg.num_layers)->capture_default_str();
  app.add_option("--hidden-size", cfg.hidden_size)->capture_default_str();
  app.add_option("--rounds", rounds)->capture_default_str();
  app.add_option("--dir", dir)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const Kernels& k = cpu_kernels();
    ParamRegistry params;
    TransformerChunk model(k, params, cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}},
                           ChunkGroups::one_process(k));
    params.finalize(k.memory);
    params.init_values(1);
    AdamW optimizer(k, params, OptimizerConfig{});
    ProcessGroups groups = ProcessGroups::single();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);  // as the trainer makes --save's folder before its first save
    const std::string file = checkpoint_iteration_dir(dir, 1) + "/rank_00000.safetensors";
    std::vector<double> save, load, copy;
    // What a run records besides the weights; a save's reader needs its tokenizer entry.
    const nlohmann::json run_config = {{"tokenizer", nlohmann::json::object()}};
    for (int r = 0; r < rounds; ++r) {
      auto start = std::chrono::steady_clock::now();
      save_checkpoint(dir, 1, params, optimizer, cfg, false, 1, run_config, groups);
      save.push_back(seconds_since(start));
      start = std::chrono::steady_clock::now();
      load_checkpoint(dir, params, optimizer, cfg);
      load.push_back(seconds_since(start));
      start = std::chrono::steady_clock::now();
      copy_and_sync(file, dir + "/copy.safetensors");
      copy.push_back(seconds_since(start));
    }
    const double mb = static_cast<double>(std::filesystem::file_size(file)) / 1e6;
    auto best = [](const std::vector<double>& t) { return *std::min_element(t.begin(), t.end()); };
    fmt::print("{:.1f}M parameters, checkpoint file {:.1f} MB (weights + m + v), best of {}\n",
               params.numel() / 1e6, mb, rounds);
    fmt::print("save  {:7.3f} s  {:8.1f} MB/s\n", best(save), mb / best(save));
    fmt::print("load  {:7.3f} s  {:8.1f} MB/s\n", best(load), mb / best(load));
    fmt::print("copy  {:7.3f} s  {:8.1f} MB/s  (read + write + fsync of the same file)\n",
               best(copy), mb / best(copy));
    std::filesystem::remove_all(dir);
  } catch (const Error& e) {
    fmt::print(stderr, "ckpt_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
