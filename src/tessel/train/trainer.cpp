#include "tessel/train/trainer.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <chrono>

#include "tessel/ckpt/hf.h"
#include "tessel/core/error.h"
#include "tessel/kernels/cpu/gemm.h"
#include "tessel/model/transformer.h"

namespace tessel {

namespace {

void validate(const ModelConfig& model, const TrainOptions& o, const Tokenizer& tokenizer) {
  std::vector<std::string> v = model.violations();
  if (o.micro_batch_size <= 0) v.push_back("--micro-batch-size must be positive");
  if (o.global_batch_size <= 0) v.push_back("--global-batch-size must be positive");
  if (o.micro_batch_size > 0 && o.global_batch_size % o.micro_batch_size != 0)
    v.push_back(fmt::format("--global-batch-size {} is not divisible by --micro-batch-size {}",
                            o.global_batch_size, o.micro_batch_size));
  if (o.lr.train_iters < 0) v.push_back("--train-iters must not be negative");
  if (model.vocab_size < tokenizer.vocab_size())
    v.push_back(fmt::format("--vocab-size {} is smaller than the tokenizer's {}", model.vocab_size,
                            tokenizer.vocab_size()));
  if (o.data_path.empty()) v.push_back("--data-path is required");
  if (v.empty()) return;
  std::string msg = "invalid configuration: " + v[0];
  for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
  throw Error(msg);
}

// GEMM throughput over the profiled iterations, and peak memory against what the model needs:
// parameters, gradients and Adam's two moments (4 floats per parameter), one microbatch's saved
// activations, and the scratch shared by all microbatches.
void report_profile(TrainLog& log, double seconds, const ParamRegistry& params,
                    const TransformerChunk& model, const ChunkActivations& acts) {
  cpu::gemm_stats_enable(false);
  const cpu::GemmStats g = cpu::gemm_stats();
  if (seconds > 0 && g.seconds > 0) {
    log.message(fmt::format("profile: gemm {:.1f} GFLOP/s over {} calls, {:.1f}% of step time "
                            "(summed over threads); whole step {:.1f} GFLOP/s in gemm flops",
                            g.flops / g.seconds / 1e9, g.calls, 100 * g.seconds / seconds,
                            g.flops / seconds / 1e9));
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double mib = 1024.0 * 1024.0;
  const double state = params.numel() * 4.0 * 4.0, saved = static_cast<double>(acts.bytes()),
               scratch = static_cast<double>(model.scratch_bytes());
  log.message(fmt::format("profile: peak RSS {:.1f} MiB; analytic {:.1f} MiB = parameters, "
                          "gradients, Adam m and v {:.1f} + saved activations {:.1f} + scratch {:.1f}",
                          usage.ru_maxrss / 1024.0, (state + saved + scratch) / mib, state / mib,
                          saved / mib, scratch / mib));
}

}  // namespace

std::vector<IterationStats> train(const ModelConfig& cfg, const TrainOptions& o) {
  ByteTokenizer tokenizer;
  validate(cfg, o, tokenizer);
  TokenDataset data(o.data_path, tokenizer);
  Sampler sampler(data, cfg.seq_length, o.global_batch_size, o.sampling, o.seed);
  LrSchedule schedule(o.lr);

  ParamRegistry params;
  const ChunkSpec whole{0, cfg.num_layers, true, true};
  TransformerChunk model(cfg, whole, o.micro_batch_size, params);
  params.finalize();
  model.bind(params);
  if (o.init_from.empty()) {
    params.init_values(o.seed);
  } else {
    load_hf_weights(params, cfg, o.init_from);
  }
  AdamW optimizer(params, o.optimizer);

  TrainLog log(o.lr.train_iters, o.log_interval, o.log_json, o.progress);
  log.message(fmt::format("model: {} | {} layers | hidden {} | heads {} | ffn {} | seq {} | vocab {} "
                          "| {:.2f}M parameters",
                          arch_name(cfg.arch), cfg.num_layers, cfg.hidden_size,
                          cfg.num_attention_heads, cfg.ffn_size(), cfg.seq_length, cfg.vocab_size,
                          params.numel() / 1e6));
  log.message(fmt::format("data: {} | {} tokens | {} samples of {} | global batch {} = {} "
                          "microbatches of {}",
                          o.data_path, data.size(), sampler.num_samples(), cfg.seq_length,
                          o.global_batch_size, o.global_batch_size / o.micro_batch_size,
                          o.micro_batch_size));

  // Sized once; every iteration reuses them.
  ChunkActivations acts = model.make_activations();
  const int64_t S = cfg.seq_length, mb = o.micro_batch_size;
  std::vector<int32_t> tokens(mb * S), targets(mb * S);
  const int64_t microbatches = o.global_batch_size / mb;
  const double batch_tokens = static_cast<double>(o.global_batch_size) * S;
  // The loss is the mean over every token of the global batch (DESIGN invariant 1).
  const float grad_scale = static_cast<float>(1.0 / batch_tokens);

  std::vector<IterationStats> history;
  double profiled_seconds = 0;
  for (int64_t it = 1; it <= o.lr.train_iters; ++it) {
    if (o.profile && it == 2) {  // the first iteration sizes buffers and warms caches: not counted
      cpu::gemm_stats_reset();
      cpu::gemm_stats_enable(true);
    }
    const auto start = std::chrono::steady_clock::now();
    params.zero_grads();
    double loss_sum = 0;
    for (int64_t m = 0; m < microbatches; ++m) {
      sampler.fill(it - 1, m * mb, mb, tokens.data(), targets.data());
      loss_sum += model.forward(acts, tokens.data(), nullptr, targets.data(), grad_scale);
      model.backward(acts, nullptr, nullptr);
    }
    IterationStats s;
    s.iteration = it;
    s.loss = loss_sum / batch_tokens;
    s.grad_norm = optimizer.grad_norm();
    optimizer.clip(static_cast<float>(s.grad_norm));
    s.lr = schedule.at(it);
    optimizer.step(static_cast<float>(s.lr));
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    s.iteration_time_ms = took.count() * 1000.0;
    s.tokens_per_s = batch_tokens / took.count();
    if (o.profile && it >= 2) profiled_seconds += took.count();
    log.iteration(s);
    history.push_back(s);
  }
  if (o.profile) report_profile(log, profiled_seconds, params, model, acts);
  if (!o.save_hf.empty()) {
    export_hf(params, cfg, o.save_hf);
    log.message(fmt::format("saved {}/model.safetensors and config.json", o.save_hf));
  }
  return history;
}

}  // namespace tessel
