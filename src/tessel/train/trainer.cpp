#include "tessel/train/trainer.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/hf.h"
#include "tessel/parallel/groups.h"
#include "tessel/core/error.h"
#include "tessel/ckpt/shards.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/transformer.h"
#include "tessel/parallel/data_parallel.h"
#include "tessel/pipeline/executor.h"
#include "tessel/pipeline/stages.h"
#include "tessel/train/plan.h"

namespace tessel {

namespace {

// GEMM throughput over the profiled iterations, and peak memory against what the model needs:
// parameters, gradients and Adam's two moments (4 floats per parameter), one microbatch's saved
// activations, and the scratch shared by all microbatches.
void report_profile(const Kernels& k, TrainLog& log, double seconds, const ParamRegistry& params,
                    const TransformerChunk& model, const ChunkActivations& acts) {
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
  const double state = params.numel() * 4.0 * 4.0, saved = static_cast<double>(acts.bytes()),
               scratch = static_cast<double>(model.scratch_bytes());
  log.message(fmt::format("profile: peak RSS {:.1f} MiB; analytic {:.1f} MiB = parameters, "
                          "gradients, Adam m and v {:.1f} + saved activations {:.1f} + scratch {:.1f}",
                          usage.ru_maxrss / 1024.0, (state + saved + scratch) / mib, state / mib,
                          saved / mib, scratch / mib));
}

// This rank's communication per profiled iteration, by group and kind of call: what moved and how
// long the rank was blocked on it (the part that computation did not hide).
void report_communication(TrainLog& log, const std::map<std::string, IterationStats::Comm>& sums,
                          int iterations, double seconds) {
  if (iterations == 0) return;
  for (const auto& [name, c] : sums)
    log.message(fmt::format("profile: comm {:<22} {:6.1f} calls {:9.3f} MB  blocked {:8.2f} ms "
                            "({:.1f}% of step) per iteration",
                            name, static_cast<double>(c.calls) / iterations, c.bytes / iterations / 1e6,
                            1e3 * c.seconds / iterations, 100 * c.seconds / seconds));
}

// Each pipeline rank's measured idle fraction (time blocked on a receive) and peak number of
// microbatches in flight, gathered to the first rank.
void report_pipeline(TrainLog& log, ProcessGroups& groups, double wait_s, double total_s, int peak) {
  Comm& world = groups.world();
  float mine[3] = {static_cast<float>(total_s > 0 ? wait_s / total_s : 0), static_cast<float>(peak),
                   static_cast<float>(groups.coords().pp)};
  std::vector<float> all(3 * world.size());
  world.all_gather(mine, all.data(), 3);
  for (int r = 0; r < world.size(); ++r)
    log.message(fmt::format("pipeline: rank {} (stage {}): idle {:.1f}% of the step, peak {} "
                            "microbatches in flight", r, static_cast<int>(all[3 * r + 2]),
                            100 * all[3 * r], static_cast<int>(all[3 * r + 1])));
}

// The MoE layers' router statistics of this iteration (the first rank's view; tokens per expert
// are summed over its EP group, the auxiliary losses over the ranks sharing its sequences), then
// reset. Collective over `token_group` (null: none).
void add_router_stats(IterationStats& s, std::vector<std::unique_ptr<TransformerChunk>>& chunks,
                      ProcessGroups& groups, Comm* token_group) {
  RouterTotals totals;
  for (auto& c : chunks) totals.add(c->take_router_totals());
  const std::vector<double>& tokens = totals.tokens_per_expert;
  double aux = totals.aux_loss + totals.z_loss;
  const int64_t forwards = totals.forwards, dropped = totals.dropped;
  if (forwards == 0) return;
  if (token_group != nullptr) token_group->all_reduce(&aux, 1);
  // Each layer-forward's counts cover the rows of the EP group's ranks: per microbatch, divide
  // by EP and, when the token group splits the microbatch's rows (TP under sequence parallel,
  // CP), multiply by its size. The losses are per layer-forward.
  const double per_microbatch = (token_group != nullptr ? token_group->size() : 1) /
                                static_cast<double>(forwards * groups.ep().size());
  s.moe = true;
  s.expert_tokens_min = *std::min_element(tokens.begin(), tokens.end()) * per_microbatch;
  s.expert_tokens_max = *std::max_element(tokens.begin(), tokens.end()) * per_microbatch;
  double sum = 0;
  for (double x : tokens) sum += x;
  s.expert_tokens_mean = sum / tokens.size() * per_microbatch;
  s.dropped_tokens = static_cast<double>(dropped) * per_microbatch;
  s.aux_loss = aux / forwards;
}

// Names and shapes of the parameters of some model chunks, declared as the chunks declare them.
void declare_chunks(const ModelConfig& cfg, const std::vector<ChunkSpec>& specs, ParamRegistry& reg) {
  const Kernels& k = cpu_kernels();  // nothing is computed: only the names and shapes are read
  for (const ChunkSpec& spec : specs)
    TransformerChunk(k, cfg, spec, 1, no_tensor_parallel(k), reg, no_context_parallel(k));
}

// The whole model as Hugging Face tensors, written by world rank 0: TP shards are gathered over
// TP, then the first DP replica's pipeline stages send theirs to stage 0.
// "model.layers.3.mlp.experts.5.up_proj.weight" with the expert index moved by `offset`.
std::string shift_expert(const std::string& name, int offset) {
  const std::string key = ".experts.";
  const size_t at = name.find(key) + key.size(), end = name.find('.', at);
  return name.substr(0, at) + std::to_string(std::stoi(name.substr(at, end - at)) + offset) +
         name.substr(end);
}

// The whole model as Hugging Face tensors, written by world rank 0: TP shards are gathered over
// TP and experts' ETP slices over ETP, the first expert-DP replica's EP ranks send their experts
// to EP rank 0, then the pipeline stages of the first replica send theirs to stage 0 (every
// stage in the order its own chunks declare them, all experts).
void export_gathered(const ParamRegistry& params, const ModelConfig& cfg, const TrainOptions& o,
                     ProcessGroups& groups) {
  std::map<std::string, std::vector<float>> tensors;
  for (const Param& p : params.params())
    tensors[p.name] =
        gather_global(params, p, p.shard.group == ShardGroup::ETP ? groups.etp() : groups.tp());
  const RankCoords& at = groups.coords();
  if (at.etp != 0 || at.edp != 0) return;
  Comm& ep = groups.ep();
  if (ep.size() > 1) {
    const int local_experts = cfg.moe.num_experts / ep.size();
    if (ep.rank() != 0) {
      std::vector<Request> sends;
      int tag = 0;
      for (const Param& p : params.params())
        if (is_expert_param(p)) sends.push_back(ep.isend(tensors[p.name].data(), shape_numel(p.global_shape), 0, tag++));
      wait_all(sends);
      return;
    }
    for (int r = 1; r < ep.size(); ++r) {
      int tag = 0;
      for (const Param& p : params.params()) {
        if (!is_expert_param(p)) continue;
        std::vector<float>& t = tensors[shift_expert(p.name, r * local_experts)];
        t.resize(shape_numel(p.global_shape));
        ep.irecv(t.data(), t.size(), r, tag++).wait();
      }
    }
  }
  if (at.tp != 0 || at.cp != 0) return;
  // The rank of EP coordinate 0 and expert-DP coordinate 0 is the first DP replica.
  Comm& pp = groups.pp();
  const std::vector<ChunkSpec> all = assign_layers(cfg.num_layers, stage_options(o));
  if (pp.rank() != 0) {
    ParamRegistry mine;
    declare_chunks(cfg, rank_chunks(all, pp.size(), pp.rank()), mine);
    std::vector<Request> sends;
    for (size_t i = 0; i < mine.params().size(); ++i) {
      std::vector<float>& t = tensors[mine.params()[i].name];
      sends.push_back(pp.isend(t.data(), t.size(), 0, static_cast<int>(i)));
    }
    wait_all(sends);
    return;
  }
  for (int stage = 1; stage < pp.size(); ++stage) {
    ParamRegistry theirs;
    declare_chunks(cfg, rank_chunks(all, pp.size(), stage), theirs);
    for (size_t i = 0; i < theirs.params().size(); ++i) {
      const Param& p = theirs.params()[i];
      std::vector<float>& t = tensors[p.name];  // a tied head's copy of the embedding overwrites
      t.resize(p.numel());                      // the same values
      pp.irecv(t.data(), p.numel(), stage, static_cast<int>(i)).wait();
    }
  }
  ParamRegistry whole;
  declare_chunks(cfg, {ChunkSpec{0, cfg.num_layers, true, true}}, whole);
  whole.finalize();
  for (Param& p : whole.params()) {
    const std::vector<float>& t = tensors.at(p.name);
    std::copy(t.begin(), t.end(), p.value);
  }
  export_hf(whole, cfg, o.save_hf);
}

}  // namespace

std::vector<IterationStats> train(const ModelConfig& cfg, const TrainOptions& o,
                                  ProcessGroups& groups) {
  validate_training(cfg, o);
  ByteTokenizer tokenizer;
  TokenDataset data(o.data_path, tokenizer);
  Sampler sampler(data, cfg.seq_length, o.global_batch_size, o.sampling, o.seed);
  LrSchedule schedule(o.lr);
  const ParallelConfig& pc = o.parallel;
  const bool first_rank = groups.world_rank() == 0;

  // This rank's model chunks: its pipeline stage's layers (several chunks with VPP), each split
  // over TP; all their parameters in one registry.
  const Kernels& k = cpu_kernels();
  ParamRegistry params;
  const TensorParallel tp{&groups.tp(), pc.sequence_parallel, &k};
  const ContextParallel cp{&groups.cp(), parse_cp_comm_type(o.cp_comm_type), k};
  const RankCoords& at = groups.coords();
  const std::vector<ChunkSpec> all_chunks = assign_layers(cfg.num_layers, stage_options(o));
  std::vector<std::unique_ptr<TransformerChunk>> chunks;
  std::vector<TransformerChunk*> chunk_ptrs;
  // MoE layers: experts over EP and ETP; the ranks holding other rows of the same sequences
  // (TP under sequence parallel, CP) count the auxiliary losses' tokens together.
  const bool split_rows = (pc.sequence_parallel && tp.size() > 1) || cp.size() > 1;
  const MoeGroups moe_groups{.ep = &groups.ep(), .etp = &groups.etp(),
                             .token_group = split_rows ? &groups.tp_cp() : nullptr};
  for (const ChunkSpec& spec : rank_chunks(all_chunks, pc.pp, at.pp)) {
    chunks.push_back(std::make_unique<TransformerChunk>(k, cfg, spec, o.micro_batch_size, tp,
                                                        params, cp, moe_groups));
    chunk_ptrs.push_back(chunks.back().get());
  }
  params.finalize(k.memory);
  for (auto& c : chunks) c->bind(params);
  if (o.init_from.empty()) {
    params.init_values(o.seed);
  } else {
    load_hf_weights(params, cfg, o.init_from);
  }
  // A tied embedding lives on the first and the last stage; both copies start equal (same seed
  // and name, or the same file) and stay equal by summing their gradients over the embedding
  // group, as Megatron does. The norm counts the first stage's copy.
  const int tied_copy = chunks.back()->tied_embedding_copy();
  const int tied_owner = cfg.tied_embeddings() && pc.pp > 1 && at.pp == 0
                             ? params.index("transformer.wte.weight")
                             : -1;
  // Gradients are summed over every rank that saw other tokens of the same global batch: DP and,
  // with context parallelism, the CP ranks holding other positions of the same sequences.
  Comm& dp = groups.dp();
  Comm& dp_cp = groups.dp_cp();
  // Experts (MoE) are summed over expert-DP instead: the ranks holding the same experts.
  DataParallel data_parallel(k, params, dp_cp, pc.distributed_optimizer, o.ddp_bucket_size,
                             [](const Param& p) { return !is_expert_param(p); },
                             o.overlap_grad_reduce);
  DataParallel expert_data_parallel(k, params, groups.edp(), pc.distributed_optimizer,
                                    o.ddp_bucket_size, is_expert_param, o.overlap_grad_reduce);
  std::vector<FlatRange> owned = data_parallel.owned_ranges();
  for (const FlatRange& r : expert_data_parallel.owned_ranges()) owned.push_back(r);
  std::sort(owned.begin(), owned.end(), [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  AdamW optimizer(k, params, o.optimizer, owned);
  // Sampling and the learning rate depend on (seed, iteration) only: resuming needs no more
  // than the weights, the moments and the step count.
  // As Megatron, a --load folder without a save yet starts from scratch: the same command line
  // (--save X --load X) starts a run and resumes it after a crash.
  const bool has_save =
      !o.load.empty() && std::filesystem::exists(o.load + "/latest_checkpointed_iteration.txt");
  const int64_t resumed = has_save ? load_checkpoint(o.load, params, optimizer, cfg) : 0;
  const nlohmann::json run_config = {
      {"tp", pc.tp}, {"pp", pc.pp}, {"vpp", pc.vpp}, {"cp", pc.cp}, {"ep", pc.ep},
      {"etp", pc.expert_tp()},
      {"dp", groups.dp().size()}, {"world", groups.world().size()},
      {"distributed_optimizer", pc.distributed_optimizer},
      {"sequence_parallel", pc.sequence_parallel}, {"micro_batch_size", o.micro_batch_size},
      {"global_batch_size", o.global_batch_size}, {"train_iters", o.lr.train_iters},
      {"data_path", o.data_path}};
  CheckpointSaver saver(o.async_save);
  const auto save = [&](int64_t it) {
    saver.save(o.save, it, params, optimizer, cfg, pc.distributed_optimizer, o.seed, run_config,
               groups);
  };
  // Gradients of parameters replicated over TP come from this rank's rows alone under sequence
  // parallel (and from its heads alone for QK-norm weights): they are summed over TP before the
  // DP reduction sees them.
  const std::function<void(int)> grad_ready = [&](int index) {
    Param& p = params.params()[index];
    if (tp.size() > 1 && p.replicated() && (pc.sequence_parallel || p.grad_partial_over_tp))
      groups.tp().all_reduce(p.grad, p.numel());
    if (index == tied_owner) groups.embedding().all_reduce(p.grad, p.numel());
    data_parallel.grad_ready(index);
    expert_data_parallel.grad_ready(index);
  };

  TrainLog log(o.lr.train_iters, o.log_interval, first_rank ? o.log_json : std::string(),
               o.progress && first_rank, !first_rank);
  log.message(fmt::format("model: {} | {} layers | hidden {} | heads {} | ffn {} | seq {} | vocab {} "
                          "| {:.2f}M parameters{}",
                          arch_name(cfg.arch), cfg.num_layers, cfg.hidden_size,
                          cfg.num_attention_heads, cfg.ffn_size(), cfg.seq_length, cfg.vocab_size,
                          cfg.num_parameters() / 1e6,
                          groups.world().size() > 1
                              ? fmt::format(" ({:.2f}M on rank 0)", params.numel() / 1e6)
                              : std::string()));
  const int microbatches = static_cast<int>(o.global_batch_size / (o.micro_batch_size * dp.size()));
  log.message(fmt::format("data: {} | {} tokens | {} samples of {} | global batch {} = micro "
                          "batch {} × DP {} × {} microbatches",
                          o.data_path, data.size(), sampler.num_samples(), cfg.seq_length,
                          o.global_batch_size, o.micro_batch_size, dp.size(), microbatches));
  const ScheduleConfig sc = schedule_config(o, microbatches);
  if (groups.world().size() > 1)
    log.message(fmt::format("parallel: world {} = TP {} × CP {} × PP {} × DP {}{}{}{}{} | order {}",
                            groups.world().size(), tp.size(), cp.size(), pc.pp, dp.size(),
                            cfg.moe.num_experts > 0
                                ? fmt::format(" | experts: EP {} × ETP {} × EDP {}", pc.ep,
                                              pc.expert_tp(), groups.edp().size())
                                : "",
                            pc.pp > 1 ? " | schedule " + schedule_kind_name(sc.kind) : "",
                            pc.sequence_parallel ? " | sequence parallel" : "",
                            pc.distributed_optimizer ? " | distributed optimizer" : "", pc.order));

  const RankSchedule actions = lower(generate_schedule(sc), sc)[at.pp];
  const int64_t S = cfg.seq_length, mb = o.micro_batch_size;
  const int64_t S_l = S / cp.size();  // this CP rank's rows of every sequence
  PipelineExecutor pipeline(k, chunk_ptrs, groups.pp(), sc, mb * S_l);
  std::vector<int32_t> whole_tokens(mb * S), whole_targets(mb * S);
  // This DP rank's share of the global batch: positions [first, first + G / DP).
  const int64_t first_sample = at.dp * (o.global_batch_size / dp.size());
  const double batch_tokens = static_cast<double>(o.global_batch_size) * S;
  // The loss is the mean over every token of the global batch (DESIGN invariant 1).
  const float grad_scale = static_cast<float>(1.0 / batch_tokens);

  std::vector<IterationStats> history;
  double profiled_seconds = 0, wait_seconds = 0, pipeline_seconds = 0;
  int profiled_iterations = 0;
  std::map<std::string, IterationStats::Comm> profiled_comm;  // by "group op", summed
  int peak_in_flight = 0;
  if (has_save) log.message(fmt::format("resumed from {} after iteration {}", o.load, resumed));
  else if (!o.load.empty()) log.message(fmt::format("no save in {} yet: starting from scratch", o.load));
  for (int64_t it = resumed + 1; it <= o.lr.train_iters; ++it) {
    if (o.profile && it == 2) {  // the first iteration sizes buffers and warms caches: not counted
      k.gemm_stats_reset();
      k.gemm_stats_enable(true);
    }
    groups.reset_comm_stats();
    const auto start = std::chrono::steady_clock::now();
    params.zero_grads();
    const PipelineExecutor::FillFn fill = [&](int m, int32_t* tokens, int32_t* targets) {
      sampler.fill(it - 1, first_sample + m * mb, mb, whole_tokens.data(), whole_targets.data());
      cp.take_local_rows(whole_tokens.data(), tokens, mb, S, 1);
      cp.take_local_rows(whole_targets.data(), targets, mb, S, 1);
    };
    double loss_sum = pipeline.run(actions, microbatches, fill, grad_scale,
                                   [&] {
                                     data_parallel.arm();
                                     expert_data_parallel.arm();
                                   },
                                   grad_ready);
    if (tied_copy >= 0) {
      Param& p = params.params()[tied_copy];
      groups.embedding().all_reduce(p.grad, p.numel());
    }
    data_parallel.finish_grad_reduction();
    expert_data_parallel.finish_grad_reduction();
    // Only the last stage computed losses; every rank learns their sum over stages and DP.
    groups.pp().all_reduce(&loss_sum, 1);
    dp_cp.all_reduce(&loss_sum, 1);
    // The norm counts every parameter once: dense TP shards summed over TP, TP-replicated ones
    // from TP rank 0 only, the distributed optimizer's DP slices summed; experts (each rank its
    // own experts, or their ETP slices) summed over the expert-model-parallel ranks ETP×EP and
    // the expert-DP slices; then stages summed (a tied embedding once).
    const int64_t tied_offset = tied_copy >= 0 ? params.params()[tied_copy].offset : -1;
    double sq = optimizer.grad_sq_sum([&](const Param& p) {
      return !is_expert_param(p) && (tp.rank() == 0 || !p.replicated()) && p.offset != tied_offset;
    });
    double sq_experts = optimizer.grad_sq_sum(is_expert_param);
    if (pc.distributed_optimizer) {
      dp_cp.all_reduce(&sq, 1);
      groups.edp().all_reduce(&sq_experts, 1);
    }
    groups.tp().all_reduce(&sq, 1);
    groups.tp_ep().all_reduce(&sq_experts, 1);
    sq += sq_experts;
    groups.pp().all_reduce(&sq, 1);
    IterationStats s;
    s.iteration = it;
    s.loss = loss_sum / batch_tokens;
    s.grad_norm = std::sqrt(sq);
    optimizer.clip(static_cast<float>(s.grad_norm));
    s.lr = schedule.at(it);
    optimizer.step(static_cast<float>(s.lr));
    data_parallel.gather_params();
    expert_data_parallel.gather_params();
    add_router_stats(s, chunks, groups, moe_groups.token_group);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    s.iteration_time_ms = took.count() * 1000.0;
    s.tokens_per_s = batch_tokens / took.count();
    for (const ProcessGroups::CommUse& use : groups.comm_uses())
      s.comm.push_back({group_kind_name(use.group), comm_op_name(use.op), use.counter.calls,
                        use.counter.bytes, use.counter.seconds});
    if (o.profile && it >= 2) {
      profiled_seconds += took.count();
      profiled_iterations += 1;
      for (const IterationStats::Comm& c : s.comm) {
        IterationStats::Comm& sum = profiled_comm[c.group + " " + c.op];
        sum.calls += c.calls;
        sum.bytes += c.bytes;
        sum.seconds += c.seconds;
      }
    }
    if (it >= 2 || o.lr.train_iters == 1) {
      wait_seconds += pipeline.stats().wait_seconds;
      pipeline_seconds += pipeline.stats().seconds;
    }
    peak_in_flight = std::max(peak_in_flight, pipeline.stats().peak_in_flight);
    log.iteration(s);
    history.push_back(s);
    const bool exiting = o.exit_interval > 0 && it % o.exit_interval == 0;
    if (!o.save.empty() && (exiting || it == o.lr.train_iters ||
                            (o.save_interval > 0 && it % o.save_interval == 0)))
      save(it);
    if (exiting) break;
  }
  saver.finish(groups);
  if (pc.pp > 1 && o.lr.train_iters > 0) report_pipeline(log, groups, wait_seconds, pipeline_seconds, peak_in_flight);
  if (o.profile) {
    ChunkActivations acts = chunks.front()->make_activations();
    report_profile(k, log, profiled_seconds, params, *chunks.front(), acts);
    report_communication(log, profiled_comm, profiled_iterations, profiled_seconds);
  }
  if (!o.save_hf.empty()) {
    export_gathered(params, cfg, o, groups);
    log.message(fmt::format("saved {}/model.safetensors and config.json", o.save_hf));
  }
  return history;
}

}  // namespace tessel
