#include "tessel/train/trainer.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "tessel/ckpt/hf.h"
#include "tessel/comm/groups.h"
#include "tessel/core/error.h"
#include "tessel/kernels/cpu/gemm.h"
#include "tessel/model/transformer.h"
#include "tessel/parallel/data_parallel.h"

namespace tessel {

namespace {

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

// The whole model as Hugging Face tensors: TP shards gathered (every TP rank takes part), then
// written by the first rank only.
void export_gathered(const ParamRegistry& params, const ModelConfig& cfg, const std::string& dir,
                     ProcessGroups& groups) {
  ParamRegistry whole;
  for (const Param& p : params.params())
    whole.add(p.name, p.global_shape, p.init, p.init_std, p.weight_decay);
  whole.finalize();
  for (size_t i = 0; i < params.params().size(); ++i) {
    std::vector<float> g = gather_global(params.params()[i], groups.tp());
    std::copy(g.begin(), g.end(), whole.params()[i].value);
  }
  if (groups.world_rank() == 0) export_hf(whole, cfg, dir);
}

}  // namespace

void validate_training(const ModelConfig& model, const TrainOptions& o) {
  std::vector<std::string> v = model.violations();
  if (o.micro_batch_size <= 0) v.push_back("--micro-batch-size must be positive");
  if (o.global_batch_size <= 0) v.push_back("--global-batch-size must be positive");
  if (o.lr.train_iters < 0) v.push_back("--train-iters must not be negative");
  if (model.vocab_size < ByteTokenizer().vocab_size())
    v.push_back(fmt::format("--vocab-size {} is smaller than the byte tokenizer's 256",
                            model.vocab_size));
  if (o.data_path.empty()) v.push_back("--data-path is required");
  if (o.ddp_bucket_size <= 0) v.push_back("--ddp-bucket-size must be positive");
  std::vector<std::string> layout = layout_violations(o.parallel);
  // The model and batch rules need a valid layout (they use DP).
  if (layout.empty())
    layout = training_violations(o.parallel, model, o.micro_batch_size, o.global_batch_size);
  for (std::string& m : layout)
    if (std::find(v.begin(), v.end(), m) == v.end()) v.push_back(std::move(m));
  const ParallelConfig& pc = o.parallel;
  if (pc.pp > 1) v.push_back("--pipeline-model-parallel-size > 1 is not supported yet");
  if (pc.cp > 1) v.push_back("--context-parallel-size > 1 is not supported yet");
  if (pc.ep > 1) v.push_back("--expert-model-parallel-size > 1 is not supported yet (no MoE)");
  if (v.empty()) return;
  std::string msg = "invalid configuration: " + v[0];
  for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
  throw ConfigError(msg);
}

std::vector<IterationStats> train(const ModelConfig& cfg, const TrainOptions& o,
                                  ProcessGroups& groups) {
  validate_training(cfg, o);
  ByteTokenizer tokenizer;
  TokenDataset data(o.data_path, tokenizer);
  Sampler sampler(data, cfg.seq_length, o.global_batch_size, o.sampling, o.seed);
  LrSchedule schedule(o.lr);
  const ParallelConfig& pc = o.parallel;
  const bool first_rank = groups.world_rank() == 0;

  ParamRegistry params;
  const ChunkSpec whole{0, cfg.num_layers, true, true};
  const TensorParallel tp{&groups.tp(), pc.sequence_parallel};
  TransformerChunk model(cfg, whole, o.micro_batch_size, tp, params);
  params.finalize();
  model.bind(params);
  if (o.init_from.empty()) {
    params.init_values(o.seed);
  } else {
    load_hf_weights(params, cfg, o.init_from);
  }
  Comm& dp = groups.dp();
  DataParallel data_parallel(params, dp, pc.distributed_optimizer, o.ddp_bucket_size);
  AdamW optimizer(params, o.optimizer, data_parallel.owned_ranges());
  // Gradients of parameters replicated over TP come from this rank's rows alone under sequence
  // parallel: they are summed over TP before the DP reduction sees them.
  const bool sync_replicated = pc.sequence_parallel && tp.size() > 1;
  const std::function<void(int)> grad_ready = [&](int index) {
    Param& p = params.params()[index];
    if (sync_replicated && p.replicated()) groups.tp().all_reduce(p.grad, p.numel());
    data_parallel.grad_ready(index);
  };

  TrainLog log(o.lr.train_iters, o.log_interval, first_rank ? o.log_json : std::string(),
               o.progress && first_rank, !first_rank);
  log.message(fmt::format("model: {} | {} layers | hidden {} | heads {} | ffn {} | seq {} | vocab {} "
                          "| {:.2f}M parameters",
                          arch_name(cfg.arch), cfg.num_layers, cfg.hidden_size,
                          cfg.num_attention_heads, cfg.ffn_size(), cfg.seq_length, cfg.vocab_size,
                          params.numel() / 1e6));
  const int64_t microbatches = o.global_batch_size / (o.micro_batch_size * dp.size());
  log.message(fmt::format("data: {} | {} tokens | {} samples of {} | global batch {} = micro "
                          "batch {} × DP {} × {} microbatches",
                          o.data_path, data.size(), sampler.num_samples(), cfg.seq_length,
                          o.global_batch_size, o.micro_batch_size, dp.size(), microbatches));
  if (groups.world().size() > 1)
    log.message(fmt::format("parallel: world {} = TP {} × DP {}{}{} | order {}", groups.world().size(),
                            tp.size(), dp.size(), pc.sequence_parallel ? " | sequence parallel" : "",
                            pc.distributed_optimizer ? " | distributed optimizer" : "", pc.order));

  // Sized once; every iteration reuses them.
  ChunkActivations acts = model.make_activations();
  const int64_t S = cfg.seq_length, mb = o.micro_batch_size;
  std::vector<int32_t> tokens(mb * S), targets(mb * S);
  // This DP rank's share of the global batch: positions [first, first + G / DP).
  const int64_t first_sample = groups.coords().dp * (o.global_batch_size / dp.size());
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
      sampler.fill(it - 1, first_sample + m * mb, mb, tokens.data(), targets.data());
      loss_sum += model.forward(acts, tokens.data(), nullptr, targets.data(), grad_scale);
      const bool last = m == microbatches - 1;
      if (last) data_parallel.arm();
      model.backward(acts, nullptr, nullptr, last ? grad_ready : std::function<void(int)>());
    }
    data_parallel.finish_grad_reduction();
    dp.all_reduce(&loss_sum, 1);
    // The norm counts every parameter once: TP shards summed, TP-replicated ones from TP rank 0
    // only, and the distributed optimizer's DP slices summed.
    double sq = optimizer.grad_sq_sum([&](const Param& p) { return tp.rank() == 0 || !p.replicated(); });
    groups.tp().all_reduce(&sq, 1);
    if (pc.distributed_optimizer) dp.all_reduce(&sq, 1);
    IterationStats s;
    s.iteration = it;
    s.loss = loss_sum / batch_tokens;
    s.grad_norm = std::sqrt(sq);
    optimizer.clip(static_cast<float>(s.grad_norm));
    s.lr = schedule.at(it);
    optimizer.step(static_cast<float>(s.lr));
    data_parallel.gather_params();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    s.iteration_time_ms = took.count() * 1000.0;
    s.tokens_per_s = batch_tokens / took.count();
    if (o.profile && it >= 2) profiled_seconds += took.count();
    log.iteration(s);
    history.push_back(s);
  }
  if (o.profile) report_profile(log, profiled_seconds, params, model, acts);
  if (!o.save_hf.empty()) {
    export_gathered(params, cfg, o.save_hf, groups);
    log.message(fmt::format("saved {}/model.safetensors and config.json", o.save_hf));
  }
  return history;
}

}  // namespace tessel
