#include "tessel/train/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>

#include "tessel/train/timeline.h"

namespace tessel {

namespace {

// GEMM throughput over the profiled iterations, and peak memory against what the model needs:
// parameters, gradients and Adam's two moments (4 floats per parameter), one microbatch's saved
// activations, and the scratch shared by all microbatches, as the chunk declares them.
void report_profile(const Kernels& k, TrainLog& log, double seconds, const ParamRegistry& params,
                    const TransformerChunk& model) {
  k.gemm_stats_enable(false);
  const GemmStats g = k.gemm_stats();
  if (seconds > 0 && g.seconds > 0) {
    log.message(fmt::format("profile: gemm {:.1f} GFLOP/s over {} calls, {:.1f}% of step time "
                            "(summed over threads); whole step {:.1f} GFLOP/s in gemm flops",
                            g.flops / g.seconds / 1e9, g.calls, 100 * g.seconds / seconds,
                            g.flops / seconds / 1e9));
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double mib = 1024.0 * 1024.0;
  const double state = params.numel() * 4.0 * 4.0,
               saved = static_cast<double>(declared_bytes(model.tensors().slot)),
               scratch = static_cast<double>(declared_bytes(model.tensors().scratch));
  log.message(fmt::format("profile: peak RSS {:.1f} MiB; analytic {:.1f} MiB = parameters, "
                          "gradients, Adam m and v {:.1f} + saved activations {:.1f} + scratch {:.1f}",
                          usage.ru_maxrss / 1024.0, (state + saved + scratch) / mib, state / mib,
                          saved / mib, scratch / mib));
}

// What the data loader costs the step: the wait for each batch (the loader reads the next batch
// on its thread while this one trains) and, for comparison, the reading itself.
void report_data_loader(TrainLog& log, double wait_seconds, double read_seconds, int iterations,
                        double seconds) {
  if (iterations == 0) return;
  const double step_ms = 1e3 * seconds / iterations;
  const double wait_ms = 1e3 * wait_seconds / iterations, read_ms = 1e3 * read_seconds;
  log.message(
      fmt::format("profile: data loader waited {:.3f} ms per iteration, {:.3f}% of the "
                  "{:.1f} ms step; reading a batch took {:.3f} ms on its thread ({:.3f}%)",
                  wait_ms, 100 * wait_ms / step_ms, step_ms, read_ms, 100 * read_ms / step_ms));
}

// Every rank's communication per profiled iteration, by group and kind of call: what moved and
// how long the rank was blocked on it (the part that computation did not hide), and with whom.
void report_communication(TrainLog& log, const std::map<CommKey, IterationStats::PeerComm>& sums, int iterations,
                          double seconds) {
  if (iterations == 0) return;
  const auto per_iteration = [&](const IterationStats::PeerComm& c) {
    return fmt::format("{:6.1f} calls {:9.3f} MB  blocked {:8.2f} ms", static_cast<double>(c.calls) / iterations,
                       c.bytes / iterations / 1e6, 1e3 * c.seconds / iterations);
  };
  for (const auto& [key, c] : sums) {
    if (c.peer >= 0) continue;  // the rank's peers follow its counter's line
    std::string peers;
    for (auto it = sums.upper_bound(key); it != sums.end() && it->second.rank == c.rank && it->second.group == c.group &&
                                          it->second.op == c.op;
         ++it)
      peers += fmt::format("\n    with rank {}: {}", it->second.peer, per_iteration(it->second));
    log.message(fmt::format("profile: comm rank {} {:<10} {:<14} {} ({:.1f}% of step) per iteration{}", c.rank,
                            c.group, c.op, per_iteration(c), 100 * c.seconds / seconds, peers));
  }
}

// Each rank's measured idle share of the iterations (the time from the first action to the last on
// any rank, summed over the counted iterations, it did not compute in), and with PP > 1 their mean,
// the bubble as `tessel schedule` and `tessel plan` have it; peak microbatches in flight, mean time
// per compute action (PP > 1) and peak saved activations (the slots and the memory the recomputed
// ones share), gathered to the first rank.
void report_pipeline(TrainLog& log, ProcessGroups& groups, double idle, int peak,
                     const PipelineExecutor::Stats& actions, int64_t activation_bytes) {
  Comm& world = groups.world();
  const bool pipelined = groups.pp().size() > 1;
  constexpr int kFields = 8;
  float mine[kFields] = {static_cast<float>(idle), static_cast<float>(peak),
                         static_cast<float>(groups.coords().pp), static_cast<float>(activation_bytes / 1048576.0)};
  for (int kind = 0; kind < 4; ++kind)  // ms per action, 0 where none ran
    if (actions.compute_count[kind] > 0)
      mine[4 + kind] = static_cast<float>(1e3 * actions.compute_seconds[kind] / actions.compute_count[kind]);
  std::vector<float> all(kFields * world.size());
  world.all_gather(mine, all.data(), kFields);
  if (pipelined) {
    double idle_sum = 0;
    for (int r = 0; r < world.size(); ++r) idle_sum += all[kFields * r];
    log.message(fmt::format("pipeline: bubble {:.1f}% = the ranks' idle share of the iterations (mean of the {} "
                            "ranks' idle below; `tessel schedule` simulates it)",
                            100 * idle_sum / world.size(), world.size()));
  }
  for (int r = 0; r < world.size(); ++r) {
    const float* a = all.data() + kFields * r;
    std::string per_action;
    for (int kind = 0; kind < 4; ++kind)
      if (a[4 + kind] > 0) per_action += fmt::format("{}{} {:.2f}", per_action.empty() ? "" : ", ", "FBIW"[kind], a[4 + kind]);
    if (pipelined)
      log.message(fmt::format("pipeline: rank {} (stage {}): idle {:.1f}% of the iterations, peak {} "
                              "microbatches in flight, peak activations {:.3f} MiB; ms per action {}",
                              r, static_cast<int>(a[2]), 100 * a[0], static_cast<int>(a[1]), a[3], per_action));
    else
      log.message(fmt::format("memory: rank {}: peak activations {:.3f} MiB", r, a[3]));
  }
}

}  // namespace

void report_run(TrainLog& log, const TrainPlan& plan, ProcessGroups& groups,
                const ParamRegistry& params, const GptDataSplits& data) {
  const ModelConfig& cfg = plan.model;
  const ParallelConfig& pc = plan.layout();
  const BatchOptions& batch = plan.options.batch;
  log.message(fmt::format("model: {} | {} layers | hidden {} | heads {} | ffn {} | seq {} | vocab {} "
                          "| {:.2f}M parameters{}",
                          arch_name(cfg.arch), cfg.num_layers, cfg.hidden_size,
                          cfg.num_attention_heads, cfg.ffn_size(), cfg.seq_length, cfg.vocab_size,
                          cfg.num_parameters() / 1e6,
                          pc.world > 1 ? fmt::format(" ({:.2f}M on rank 0)", params.numel() / 1e6)
                                       : std::string()));
  const DataOptions& d = plan.options.data;
  std::vector<std::string> splits;
  for (int i = 0; i < kNumSplits; ++i)
    if (const SampleDataset* s = data.splits[i].get())
      splits.push_back(fmt::format("{} {}", split_name(static_cast<Split>(i)), s->size()));
  const std::string microbatches = batch.step_schedule.empty()
                                       ? fmt::format("{} = micro batch {} × DP {} × {} microbatches",
                                                     batch.global_batch_size, batch.micro_batch_size, plan.dp,
                                                     plan.microbatches)
                                       : fmt::format("by the step schedule = micro batch {} × DP {} × its microbatches",
                                                     batch.micro_batch_size, plan.dp);
  log.message(fmt::format("data: {} | {} (vocabulary {}) | samples of {}: {} | global batch {}",
                          d.mock_data ? "mock data (Megatron's MockGPTDataset, split 1,1,1)"
                                      : fmt::format("{}", fmt::join(d.path.empty() ? d.train_path : d.path, " ")),
                          plan.tokenizer->type(), plan.tokenizer->vocab_size(), cfg.seq_length,
                          fmt::join(splits, ", "), microbatches));
  if (pc.world == 1) return;
  log.message(fmt::format("parallel: world {} = TP {} × CP {} × PP {} × DP {}{}{}{}{} | order {}",
                          pc.world, pc.tp, pc.cp, pc.pp, plan.dp,
                          cfg.moe.num_experts > 0
                              ? fmt::format(" | experts: EP {} × ETP {} × EDP {}", pc.ep,
                                            pc.expert_tp(), pc.expert_dp())
                              : "",
                          pc.pp > 1 ? " | schedule " + schedule_kind_name(plan.schedule.kind) : "",
                          pc.sequence_parallel ? " | sequence parallel" : "",
                          pc.strategy() == ShardingStrategy::NoShard ? ""
                          : pc.strategy() == ShardingStrategy::Optim
                              ? " | distributed optimizer"
                              : fmt::format(" | sharded {}", sharding_strategy_name(pc.strategy())),
                          pc.order));
}

void RunTotals::start_iteration(int64_t it) {
  if (plan_.options.log.profile_report && it == 2) {
    k_.gemm_stats_reset();
    k_.gemm_stats_enable(true);
  }
}

void RunTotals::add(const IterationStats& s, const PipelineExecutor::Stats& pipeline) {
  if (plan_.options.log.profile_report && s.iteration >= 2) {
    profiled_seconds_ += s.iteration_time_ms / 1000.0;
    profiled_data_wait_seconds_ += s.data_wait_ms / 1000.0;
    profiled_iterations_ += 1;
    for (const IterationStats::PeerComm& c : s.traffic) {
      auto [sum, fresh] = profiled_comm_.try_emplace({c.rank, c.group, c.op, c.peer}, c);
      if (fresh) continue;
      sum->second.calls += c.calls;
      sum->second.bytes += c.bytes;
      sum->second.seconds += c.seconds;
    }
  }
  // The iteration's span over the world, from the first compute on any rank to the last (the
  // earliest start, as −max(−t), and the latest end), added once it arrives: waiting for it
  // would make every rank wait for the slowest.
  add_span();
  const double started = std::chrono::duration<double>(pipeline.started.time_since_epoch()).count();
  const std::vector<PipelineExecutor::Stats::TimedAction>& actions = pipeline.timeline;
  span_ = {-(started + (actions.empty() ? 0 : actions.front().start)),
           started + (actions.empty() ? pipeline.seconds : actions.back().end)};
  span_request_ = groups_.world().all_reduce_async(span_.data(), 2, ReduceOp::Max);
  span_pending_ = true;
  span_counted_ = s.iteration >= 2 || plan_.train_iters() == 1;
  if (span_counted_) {
    for (int kind = 0; kind < 4; ++kind) {
      actions_.compute_seconds[kind] += pipeline.compute_seconds[kind];
      actions_.compute_count[kind] += pipeline.compute_count[kind];
    }
  }
  if (!plan_.options.log.pipeline_timeline.empty()) last_ = {{s.iteration, pipeline, groups_.comm_calls()}};
  // Megatron's window: its profiler starts after step_start iterations and stops after step_end.
  const ProfileWindow& window = plan_.options.log.profile;
  if (window.on && s.iteration > window.step_start && s.iteration <= window.step_end)
    profiled_.push_back({s.iteration, pipeline, groups_.comm_calls()});
  peak_in_flight_ = std::max(peak_in_flight_, pipeline.peak_in_flight);
  peak_activation_bytes_ = std::max(peak_activation_bytes_, pipeline.peak_activation_bytes);
}

void RunTotals::add_span() {
  if (!span_pending_) return;
  span_request_.wait();
  span_pending_ = false;
  // Without a wait for the norm between iterations (post-validation) the first stage starts the
  // next one while the last finishes this one: the time both spans cover counts once.
  const double start = std::max(-span_[0], last_end_), end = span_[1];
  if (span_counted_) span_seconds_ += std::max(0.0, end - start);
  last_end_ = std::max(last_end_, end);
}

void RunTotals::report_profile_window(TrainLog& log) {
  const ProfileWindow& window = plan_.options.log.profile;
  if (!window.on) return;
  if (profiled_.empty()) {
    log.message(fmt::format("--profile: no trace, the run ended before iteration {} (--profile-step-start {})",
                            window.step_start + 1, window.step_start));
    return;
  }
  const std::vector<int>& ranks = window.ranks;
  const bool shown = ranks.empty() || std::find(ranks.begin(), ranks.end(), groups_.world_rank()) != ranks.end();
  write_pipeline_timeline(window.path, "--profile", profiled_, shown, groups_);
  log.message(fmt::format("--profile: iterations {} to {} of {}: {}", profiled_.front().iteration,
                          profiled_.back().iteration, ranks.empty() ? "every rank" : fmt::format("ranks {}", fmt::join(ranks, ", ")),
                          window.path));
}

void RunTotals::report(TrainLog& log, const ParamRegistry& params, const TransformerChunk& chunk,
                       double read_seconds) {
  add_span();
  double computed = 0;
  for (double seconds : actions_.compute_seconds) computed += seconds;
  if (plan_.train_iters() > 0)
    report_pipeline(log, groups_, span_seconds_ > 0 ? 1 - computed / span_seconds_ : 0, peak_in_flight_,
                    actions_, peak_activation_bytes_);
  const LogOptions& o = plan_.options.log;
  if (!o.pipeline_timeline.empty() && !last_.empty()) {
    write_pipeline_timeline(o.pipeline_timeline, "--pipeline-timeline", last_, true, groups_);
    log.message(fmt::format("pipeline timeline of iteration {}: {}", last_.front().iteration, o.pipeline_timeline));
  }
  report_profile_window(log);
  if (!o.profile_report) return;
  report_profile(k_, log, profiled_seconds_, params, chunk);
  report_communication(log, profiled_comm_, profiled_iterations_, profiled_seconds_);
  report_data_loader(log, profiled_data_wait_seconds_, read_seconds, profiled_iterations_,
                     profiled_seconds_);
}

}  // namespace tessel
