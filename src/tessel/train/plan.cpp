#include "tessel/train/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "tessel/ckpt/hf.h"
#include "tessel/core/error.h"
#include "tessel/data/dataset_builder.h"
#include "tessel/data/tokenizer.h"
#include "tessel/train/mixed_precision.h"
#include "tessel/train/numerics.h"
#include "tessel/train/output_paths.h"
#include "tessel/train/resume.h"

namespace tessel {

namespace {

void append(std::vector<std::string>& v, std::vector<std::string> more) {
  for (std::string& m : more) v.push_back(std::move(m));
}

// Every floating-point setting is a finite number: a flag or a JSON value such as inf, nan or
// 1e39 (past float's range) would otherwise train on it.
std::vector<std::string> non_finite_violations(const ModelConfig& model, const TrainOptions& o) {
  std::vector<std::string> v;
  auto finite = [&](const char* flag, double value) {
    if (!std::isfinite(value)) v.push_back(fmt::format("{} {} is not a finite number", flag, value));
  };
  finite("--lr", o.optim.lr.lr);
  finite("--min-lr", o.optim.lr.min_lr);
  finite("--weight-decay", o.optim.adamw.weight_decay);
  finite("--adam-beta1", o.optim.adamw.beta1);
  finite("--adam-beta2", o.optim.adamw.beta2);
  finite("--adam-eps", o.optim.adamw.eps);
  finite("--clip-grad", o.optim.adamw.clip_grad);
  for (const ModelField& field : model_fields())  // the model's real-valued settings
    visit_model_field(field, model, [&](const auto& value) {
      if constexpr (std::is_floating_point_v<std::decay_t<decltype(value)>>) finite(field.flag, value);
    });
  return v;
}

// The rules of the options alone: what the run reads, how long it runs, how it reduces.
// `tokenizer` is null where its own rules are broken: the rules that ask it are left out.
std::vector<std::string> option_violations(const ModelConfig& model, const TrainOptions& o,
                                           const Tokenizer* tokenizer) {
  std::vector<std::string> v = non_finite_violations(model, o);
  append(v, fault_violations(o.faults));
  append(v, output_path_violations(o));
  if (o.log.straggler_minmax_count < 1) v.push_back("--straggler-minmax-count must be at least 1");
  // The dropout site word (kernels/dropout.h) holds the layer below 2^16 − 1 and the head below
  // 2^14: a rule of the masks a run draws (the planner draws none), and of the forced router's
  // random logits, keyed by the same word.
  if ((model.hidden_dropout > 0 || model.attention_dropout > 0) &&
      (model.num_layers + model.mtp_num_layers >= 65535 || model.num_attention_heads >= 16384))
    v.push_back("dropout keys hold at most 65534 layers and 16383 attention heads");
  if (model.moe.force_load_balancing && model.num_layers + model.mtp_num_layers >= 65535)
    v.push_back("--moe-router-force-load-balancing keys its random logits by at most 65534 layers");
  if (o.log.tensorboard.interval < 1)
    v.push_back(fmt::format("--tensorboard-log-interval {} must be at least 1", o.log.tensorboard.interval));
  // Megatron takes each modulo the iteration: 0 divides by zero there, and a negative
  // --save-interval saves at every iteration in Python, never here.
  if (o.log.interval < 1) v.push_back(fmt::format("--log-interval {} must be at least 1", o.log.interval));
  for (const auto& [flag, value] : {std::pair{"--save-interval", o.checkpoint.save_interval},
                                    {"--exit-interval", o.checkpoint.exit_interval}})
    if (value < 0) v.push_back(fmt::format("{} {} is negative (0: none)", flag, value));
  if (o.log.tensorboard.queue_size < 1)
    v.push_back(fmt::format("--tensorboard-queue-size {} must be at least 1", o.log.tensorboard.queue_size));
  for (int rank : o.log.profile.ranks)
    if (rank < 0 || rank >= o.parallel.layout.world)
      v.push_back(fmt::format("--profile-ranks {}: the job's ranks are 0 to {}", rank, o.parallel.layout.world - 1));
  if (o.optim.lr.sample_based() && o.batch.step_schedule.empty() && o.batch.global_batch_size > 0 &&
      o.optim.lr.iterations() == 0)
    v.push_back(fmt::format("--train-samples {} is less than one --global-batch-size {}: no iteration",
                            o.optim.lr.train_samples, o.batch.global_batch_size));
  const DataOptions& d = o.data;
  append(v, data_source_violations(!d.path.empty(),
                                   !d.train_path.empty() || !d.valid_path.empty() || !d.test_path.empty(),
                                   d.mock_data));
  if (d.path.empty() && d.train_path.empty() && !d.mock_data)
    v.push_back("--data-path (or --train-data-path, or --mock-data) is required");
  if (tokenizer != nullptr) {
    if (model.vocab_size < tokenizer->vocab_size())
      v.push_back(fmt::format("--vocab-size {} is smaller than the {}'s {}", model.vocab_size,
                              tokenizer->type(), tokenizer->vocab_size()));
    append(v, mock_data_tokenizer_violations(d.mock_data, tokenizer));
    if ((d.reset_position_ids || d.reset_attention_mask || d.eod_mask_loss) && tokenizer->special_ids().eod < 0)
      v.push_back(fmt::format("--reset-position-ids, --reset-attention-mask and --eod-mask-loss find "
                              "documents by their end-of-document token, which the {} has none of",
                              tokenizer->type()));
  }
  if (o.seed > 0xffffffffull)  // numpy's RandomState, which the datasets' shuffles reproduce
    v.push_back(fmt::format("--seed {} must be below 2^32", o.seed));
  if (o.device == Device::CUDA && model.attention_dropout > 0)  // hidden dropout runs on CUDA
    v.push_back(fmt::format("--attention-dropout {} is built for the CPU only: give --attention-dropout 0 with "
                            "--device cuda", model.attention_dropout));
  if (o.eval.iters < 0) v.push_back(fmt::format("--eval-iters {} is negative", o.eval.iters));
  if (o.eval.interval < 1)
    v.push_back(fmt::format("--eval-interval {} must be at least 1", o.eval.interval));
  else if (const int64_t runs = o.optim.lr.iterations() / o.eval.interval + 1, G = o.batch.global_batch_size;
           o.eval.iters > 0 && G > 0 && o.eval.iters > std::numeric_limits<int64_t>::max() / runs / G)
    v.push_back(fmt::format("--eval-iters {} × {} evaluations × --global-batch-size {} is past 2^63 samples",
                            o.eval.iters, runs, G));
  if (o.parallel.ddp.bucket_size <= 0) v.push_back("--ddp-bucket-size must be positive");
  if (!o.checkpoint.save_hf.empty())
    for (const std::string& m : hf_export_violations(model)) v.push_back("--save-hf: " + m);
  if (!o.checkpoint.save_hf_model_type.empty() && (o.checkpoint.save_hf.empty() || !model.linear.enabled()))
    v.push_back(fmt::format("--save-hf-model-type {} needs --save-hf and a model with Gated DeltaNet layers",
                            o.checkpoint.save_hf_model_type));
  append(v, optimizer_violations(o.optim.adamw));
  append(v, lr_schedule_violations(o.optim.lr));
  append(v, decoupled_lr_violations(o.optim.lr, o.optim.decoupled_lr, o.optim.decoupled_min_lr));
  append(v, mixed_precision_violations(model, o));
  return v;
}

// Mixture of Experts against the layout: the MoE settings, experts only in a llama model, EP
// only with experts, and the expert and shared-expert sizes against ETP and TP.
std::vector<std::string> expert_violations(const ParallelConfig& c, const ModelConfig& model) {
  std::vector<std::string> v;
  const MoeConfig& moe = model.moe;
  if (moe.num_experts > 0) append(v, moe.violations(c.ep, model.num_layers));
  if (c.ep > 1 && moe.num_experts == 0)
    v.push_back("--expert-model-parallel-size > 1 needs --num-experts (a Mixture-of-Experts model)");
  if (moe.num_experts > 0 && model.arch != Arch::Llama)
    v.push_back("--num-experts needs --arch llama (Qwen-MoE style experts)");
  if (c.expert_tp() != 1 && c.expert_tp() != c.tp)
    v.push_back(fmt::format("--expert-tensor-parallel-size {} must be 1 or the TP size {}",
                            c.expert_tp(), c.tp));
  const int moe_ffn = moe.ffn_hidden_size > 0 ? moe.ffn_hidden_size : model.ffn_size();
  if (moe.num_experts > 0 && c.expert_tp() >= 1 && moe_ffn % c.expert_tp() != 0)
    v.push_back(fmt::format("the expert size (--moe-ffn-hidden-size) {} is not divisible by "
                            "--expert-tensor-parallel-size {}", moe_ffn, c.expert_tp()));
  if (moe.num_experts > 0 && c.tp >= 1 && moe.shared_expert_size % c.tp != 0)
    v.push_back(fmt::format("--moe-shared-expert-intermediate-size {} is not divisible by "
                            "--tensor-model-parallel-size {}", moe.shared_expert_size, c.tp));
  return v;
}

}  // namespace

std::vector<std::string> batch_violations(const ParallelConfig& c, int64_t micro_batch,
                                          int64_t global_batch) {
  std::vector<std::string> v;
  if (micro_batch < 1) v.push_back(fmt::format("--micro-batch-size must be positive (got {})", micro_batch));
  if (global_batch < 1) v.push_back(fmt::format("--global-batch-size must be positive (got {})", global_batch));
  if (micro_batch > 0 && global_batch > 0 && layout_violations(c).empty()) {
    // Compared by division: the flags take any 64-bit number, and micro batch × DP past the
    // global batch could wrap. The count is an int in the schedules, bounded by theirs before it
    // is narrowed (2^32 wrapped to a negative count, 2^33 + 2 to one microbatch).
    const int64_t dp = c.dp();
    const bool fits = micro_batch <= global_batch / dp;
    if (!fits || global_batch % (micro_batch * dp) != 0)
      v.push_back(fmt::format("--global-batch-size {} is not divisible by --micro-batch-size {} × DP {}{}",
                              global_batch, micro_batch, dp, fits ? fmt::format(" = {}", micro_batch * dp) : ""));
    else if (global_batch / (micro_batch * dp) > kMaxSchedulePairs)
      v.push_back(fmt::format("--global-batch-size {} is {} microbatches of --micro-batch-size {} × DP {}, past "
                              "tessel's bound of {}", global_batch, global_batch / (micro_batch * dp),
                              micro_batch, dp, kMaxSchedulePairs));
  }
  return v;
}

int microbatch_count(const ParallelConfig& c, int64_t micro_batch, int64_t global_batch) {
  return static_cast<int>(global_batch / (micro_batch * c.dp()));
}

std::vector<std::string> training_violations(const ParallelConfig& c, const ModelConfig& model,
                                             int64_t micro_batch, int64_t global_batch) {
  std::vector<std::string> v = batch_violations(c, micro_batch, global_batch);
  append(v, model_split_violations(c, model, micro_batch));
  return v;
}

std::vector<std::string> model_split_violations(const ParallelConfig& c, const ModelConfig& model,
                                                int64_t micro_batch) {
  std::vector<std::string> v;
  // A microbatch's tokens, bounded before the data indices or any activation is sized by them
  // (10^9 samples built indices for a minute, then ran out of memory): 8 times the longest
  // published training sequence, 2^20 tokens, as the model's bounds. --seq-length's own bound
  // (2^24) is the positions' a model takes; a training microbatch holds at most this.
  if (micro_batch > 0 && model.seq_length > 0 && micro_batch > kMaxMicrobatchTokens / model.seq_length)
    v.push_back(fmt::format("--micro-batch-size {} × --seq-length {} is past tessel's bound of {} tokens a "
                            "microbatch", micro_batch, model.seq_length, kMaxMicrobatchTokens));
  if (c.tp >= 1) {
    auto split_by_tp = [&](const char* flag, int count) {
      if (count > 0 && count % c.tp != 0)
        v.push_back(fmt::format("{} {} is not divisible by --tensor-model-parallel-size {}", flag, count, c.tp));
    };
    split_by_tp("--num-attention-heads", model.num_attention_heads);
    const int groups = model.num_query_groups;
    if (groups > 0 && groups != model.num_attention_heads) {
      // Fewer groups than TP ranks: each group replicated on TP / G ranks (model/attention.h),
      // k_proj and v_proj still split evenly over TP.
      if (groups >= c.tp)
        split_by_tp("--num-query-groups", groups);
      else if (c.tp % groups != 0 || (int64_t{groups} * model.head_dim()) % c.tp != 0)
        v.push_back(fmt::format("--num-query-groups {} below --tensor-model-parallel-size {} replicates each group "
                                "on TP / groups ranks: {} must divide {}, and groups × head dim {} = {} too",
                                groups, c.tp, groups, c.tp, model.head_dim(), int64_t{groups} * model.head_dim()));
    }
    split_by_tp("--ffn-hidden-size", model.ffn_size());
  }

  // Megatron's GDN split (ssm/gated_delta_net): each TP·CP rank owns whole key heads and the value
  // heads that read them.
  if (model.linear.enabled() && c.tp >= 1 && c.cp >= 1) {
    const LinearAttentionConfig& la = model.linear;
    const int ranks = c.tp * c.cp;
    if ((la.num_key_heads > 0 && la.num_key_heads % ranks != 0) ||
        (la.num_value_heads > 0 && la.num_value_heads % ranks != 0))
      v.push_back(fmt::format("the GDN heads (--linear-num-key-heads {}, --linear-num-value-heads {}) are "
                              "not divisible by --tensor-model-parallel-size {} × --context-parallel-size {} = {}",
                              la.num_key_heads, la.num_value_heads, c.tp, c.cp, ranks));
  }

  // Megatron's load-balanced causal split cuts each sequence into 2·CP chunks.
  if (c.cp > 1 && model.seq_length > 0 && model.seq_length % (2 * c.cp) != 0)
    v.push_back(fmt::format("--seq-length {} is not divisible by 2 × --context-parallel-size {} = {}",
                            model.seq_length, c.cp, 2 * c.cp));

  if (c.sequence_parallel) {
    // (With TP 1 there is nothing to split: check_training turns it off, as Megatron does.)
    if (c.tp > 1 && c.cp >= 1 && micro_batch > 0 && model.seq_length > 0 &&
        micro_batch <= kMaxMicrobatchTokens / model.seq_length && model.seq_length % c.cp == 0) {
      // Each TP rank keeps its share of the rows (micro batch × this CP rank's positions).
      int64_t rows = micro_batch * (model.seq_length / c.cp);
      if (rows % c.tp != 0)
        v.push_back(fmt::format("--sequence-parallel splits --micro-batch-size {} × --seq-length {}{} "
                                "= {} rows, not divisible by --tensor-model-parallel-size {}",
                                micro_batch, model.seq_length,
                                c.cp > 1 ? fmt::format(" / --context-parallel-size {}", c.cp) : "",
                                rows, c.tp));
    }
  }
  // Megatron's ModelParallelConfig: expert layers under TP exchange tokens in sequence-parallel
  // form (and take this rank's rows), whether the experts are split over EP or not.
  if (c.tp > 1 && !c.sequence_parallel && (c.ep > 1 || model.moe.num_experts > 0))
    v.push_back(c.ep > 1 ? fmt::format("--expert-model-parallel-size {} with --tensor-model-parallel-size {} "
                                       "needs --sequence-parallel", c.ep, c.tp)
                         : fmt::format("--num-experts with --tensor-model-parallel-size {} needs "
                                       "--sequence-parallel", c.tp));
  return v;
}

std::vector<ChunkSpec> TrainPlan::stage_chunks(int stage) const {
  return rank_chunks(chunks, stages, stage);
}

BatchShape TrainPlan::batch_shape(int dp_rank) const {
  return {.micro_batch = options.batch.micro_batch_size, .data_parallel = dp, .dp_rank = dp_rank,
          .microbatches = microbatches};
}

Packing TrainPlan::packing() const {
  const DataOptions& d = options.data;
  return {.reset_position_ids = d.reset_position_ids, .reset_attention_mask = d.reset_attention_mask,
          .eod_mask_loss = d.eod_mask_loss, .eod = tokenizer->special_ids().eod};
}

double TrainPlan::batch_tokens(int64_t global_batch) const {
  return static_cast<double>(global_batch) * model.seq_length;
}

int64_t TrainPlan::train_iters() const {
  const LrScheduleConfig& lr = options.optim.lr;
  if (lr.sample_based() && !options.batch.step_schedule.empty()) return batches.iterations_for(lr.train_samples);
  return lr.iterations();
}

int64_t TrainPlan::valid_samples_before(int64_t evaluation) const {
  return resumed_valid_samples +
         (evaluation - resumed_evaluations) * options.eval.iters * options.batch.global_batch_size;
}

BatchSpan TrainPlan::batch_span(int64_t it) const {
  const int64_t first = batches.consumed_before(it);
  return {.first = first, .microbatches = batches.batch_at(first) / (options.batch.micro_batch_size * dp)};
}

ScheduleConfig TrainPlan::schedule_of(int microbatches) const {
  const PipelineOptions& p = options.parallel.pipeline;
  return chosen_schedule(p.schedule, layout().pp, microbatches, layout().vpp, p.microbatch_group);
}

namespace {

// What Megatron's checkpoint format flags come to here, one line each given.
std::vector<std::string> checkpoint_format_notes(const CheckpointOptions& c) {
  std::vector<std::string> notes;
  if (!c.ckpt_format.empty())
    notes.push_back(fmt::format("--ckpt-format {}: tessel saves in its own format (metadata.json and one shard file "
                                "a rank, resumable under any layout) and does not write or read Megatron-LM's",
                                c.ckpt_format));
  if (c.auto_detect_ckpt_format)
    notes.push_back("--auto-detect-ckpt-format: --load tells a tessel save from a Megatron-LM checkpoint by its "
                    "files, and names the latter");
  if (!c.dist_ckpt_strictness.empty())
    notes.push_back(fmt::format("--dist-ckpt-strictness {}: tessel's --load is always strict (every tensor, "
                                "shape and checksum checked, nothing unexpected)",
                                c.dist_ckpt_strictness));
  return notes;
}

// The microbatches of a global batch (`batch_named` and its size), named by the flags that give
// them, for the pipeline schedule's rules: train has no --microbatches, as `tessel schedule` has.
std::string microbatches_named(const char* batch_named, int64_t global_batch, const TrainPlan& plan) {
  const int64_t micro_batch = plan.options.batch.micro_batch_size, count = global_batch / (micro_batch * plan.dp);
  return fmt::format("{} {} / (--micro-batch-size {} × DP {}) = {} microbatch{}", batch_named, global_batch,
                     micro_batch, plan.dp, count, count == 1 ? "" : "es");
}

// A step schedule's rules beyond its text and flags: every batch the run reaches a multiple of
// micro batch × DP, and never below the one before (Megatron's training loop refuses fewer
// microbatches); the pipeline schedule valid for each count of microbatches. For a plan whose
// schedule, layout and batch are valid.
std::vector<std::string> step_schedule_violations(const TrainPlan& plan) {
  const BatchOptions& b = plan.options.batch;
  std::vector<std::string> v, seen;  // seen: the pipeline schedule's messages, each said once
  const int64_t per_step = b.micro_batch_size * plan.dp;
  int64_t before = 0;
  for (const BatchStep& step : plan.batches.steps_reached(plan.train_iters())) {
    if (step.global_batch % per_step != 0)
      v.push_back(fmt::format("--step-batch-size-schedule: global batch {} (from sample {}) is not divisible by "
                              "--micro-batch-size {} × DP {} = {}",
                              step.global_batch, step.from_sample, b.micro_batch_size, plan.dp, per_step));
    else if (step.global_batch / per_step > kMaxSchedulePairs)  // checked before narrowing, as batch_violations
      v.push_back(fmt::format("--step-batch-size-schedule: global batch {} (from sample {}) is {} microbatches, "
                              "past tessel's bound of {}", step.global_batch, step.from_sample,
                              step.global_batch / per_step, kMaxSchedulePairs));
    else
      for (std::string& m : schedule_violations(plan.schedule_of(static_cast<int>(step.global_batch / per_step)),
                                                microbatches_named("global batch", step.global_batch, plan)))
        if (std::find(seen.begin(), seen.end(), m) == seen.end()) {
          v.push_back("--step-batch-size-schedule: " + m);
          seen.push_back(m);
        }
    if (step.global_batch < before)
      v.push_back(fmt::format("--step-batch-size-schedule: the global batch falls from {} to {} at sample {}; "
                              "the number of microbatches must not decrease",
                              before, step.global_batch, step.from_sample));
    before = step.global_batch;
  }
  return v;
}

// With a step schedule and --train-iters, what Megatron's learning-rate schedule counts.
std::string iteration_unit_note(int64_t global_batch) {
  return fmt::format("--step-batch-size-schedule with --train-iters: as Megatron, the learning-rate schedule counts "
                     "an iteration of its flags as --global-batch-size's default, micro batch × DP = {} samples, "
                     "so the rate depends on DP; --train-samples and the _samples flags count samples",
                     global_batch);
}

// Megatron's loading and saving switches that change nothing in this run, one line each given.
std::vector<std::string> unused_switch_notes(const TrainOptions& o) {
  const CheckpointOptions& c = o.checkpoint;
  std::vector<std::string> notes;
  if (c.no_load_rng || c.no_save_rng)
    notes.push_back("--no-load-rng, --no-save-rng: no effect: tessel keeps no generator state (the data order and "
                    "the initialisation are functions of --seed and the iteration)");
  if (c.finetune && c.load.empty()) notes.push_back("--finetune: no effect without --load");
  if (c.no_load_optim && c.load.empty()) notes.push_back("--no-load-optim: no effect without --load");
  if (o.optim.decoupled_min_lr && !o.optim.decoupled_lr)
    notes.push_back("--decoupled-min-lr: no effect without --decoupled-lr, as in Megatron");
  return notes;
}

// The plan as far as the rules allow, and every rule broken on the way.
struct CheckedPlan {
  TrainPlan plan;
  std::vector<std::string> violations;
};

CheckedPlan check_training(ModelConfig model, const TrainOptions& given) {
  // As Megatron's argument validation: sequence parallel without TP is turned off, said once.
  TrainOptions o = given;
  std::vector<std::string> notes = o.notes;
  if (o.parallel.layout.tp == 1 && o.parallel.layout.sequence_parallel) {
    o.parallel.layout.sequence_parallel = false;
    notes.push_back("--sequence-parallel: disabled, because tensor model parallelism is disabled (TP 1), as Megatron does");
  }
  std::vector<std::string> v = resolve_virtual_stages(model.num_layers, o.parallel.pipeline, o.parallel.layout);
  const bool virtual_stages_resolved = v.empty();
  append(notes, checkpoint_format_notes(o.checkpoint));
  append(notes, unused_switch_notes(o));
  append(notes, settle_mixed_precision(o));
  const ParallelConfig& c = o.parallel.layout;
  const BatchOptions& batch = o.batch;
  // The model's --vocab-size is the tokenizer's too where it reads one (NullTokenizer), as Megatron.
  if (o.data.tokenizer.vocab_size == 0) o.data.tokenizer.vocab_size = static_cast<int32_t>(model.vocab_size);
  const std::vector<std::string> layout = layout_violations(c);
  // Not given: Megatron's default, micro batch × DP (an invalid layout is reported on its own).
  const bool global_batch_given = batch.global_batch_size != 0;
  if (!global_batch_given) o.batch.global_batch_size = batch.micro_batch_size * (layout.empty() ? c.dp() : 1);
  o.optim.lr.global_batch = o.batch.global_batch_size;  // the schedule counts samples
  // What keeps the tokenizer from being made (its flags, or a file it names) joins the other rules;
  // without it, the rules that ask the tokenizer are not asked.
  std::shared_ptr<const Tokenizer> tokenizer;
  try {
    tokenizer = make_tokenizer(o.data.tokenizer);
  } catch (const Error& e) {
    v.push_back(e.what());
  }
  // As Megatron, the model's vocabulary is the tokenizer's (padded per TP) unless one is given.
  // Left to a tokenizer that could not be made, it is unknown: the model's rules are asked as if
  // it held one token, so that none of them restates the tokenizer's problem.
  if (model.vocab_size == 0) model.vocab_size = tokenizer ? tokenizer->vocab_size() : 1;
  append(v, model.violations());
  append(v, option_violations(model, o, tokenizer.get()));
  append(v, layout);
  append(v, training_violations(c, model, batch.micro_batch_size, batch.global_batch_size));
  const bool stepped = !batch.step_schedule.empty();
  // Megatron's training passes --seq-length: the thresholds are tokens.
  const size_t parsed = v.size();
  const BatchSchedule batches = stepped ? BatchSchedule::parse(batch.step_schedule, model.seq_length, v)
                                        : BatchSchedule::constant(batch.global_batch_size);
  const bool schedule_valid = v.size() == parsed;
  if (stepped && global_batch_given) v.push_back("--step-batch-size-schedule and --global-batch-size: give one");
  if (stepped && batch.decrease_if_needed)
    v.push_back("--step-batch-size-schedule and --decrease-batch-size-if-needed: give one");
  if (stepped) {
    notes.push_back(batches.describe(model.seq_length));
    if (!o.optim.lr.sample_based()) notes.push_back(iteration_unit_note(o.batch.global_batch_size));
  }
  TrainPlan plan{.model = model, .options = o, .tokenizer = tokenizer, .notes = notes, .batches = batches};
  plan.stages = stage_options(c, o.parallel.pipeline, model.mtp_num_layers);
  const std::vector<std::string> stage_rules =
      virtual_stages_resolved ? stage_violations(model.num_layers, plan.stages) : std::vector<std::string>{};
  append(v, stage_rules);
  // The schedule's rules need the microbatch count, which needs a valid layout and batch.
  if (layout.empty() && batch_violations(c, batch.micro_batch_size, batch.global_batch_size).empty()) {
    plan.dp = c.dp();
    plan.microbatches = microbatch_count(c, batch.micro_batch_size, batch.global_batch_size);
    try {
      plan.schedule = plan.schedule_of(plan.microbatches);
      // With a step schedule this count is the evaluation's alone (of --global-batch-size's
      // default, micro batch × DP); the iterations have theirs.
      const std::string named =
          microbatches_named(stepped ? "the evaluation's batch" : "--global-batch-size", batch.global_batch_size, plan);
      for (const std::string& m : schedule_violations(plan.schedule, named))
        if (!stepped) v.push_back(m);
        else if (o.eval.iters > 0) v.push_back("--eval-iters: " + m);
      if (stepped && schedule_valid) append(v, step_schedule_violations(plan));
    } catch (const Error& e) {
      v.push_back(e.what());  // an unknown --schedule name
    }
  }
  try {
    plan.cp_comm = parse_cp_comm_type(o.parallel.cp_comm_type);
  } catch (const Error& e) {
    v.push_back(e.what());
  }
  const std::string& dispatcher = o.parallel.moe_token_dispatcher_type;
  if (dispatcher == "allgather") {
    plan.moe_dispatcher = MoeDispatcherType::AllGather;
  } else if (dispatcher == "flex") {
    plan.notes.push_back("--moe-token-dispatcher-type flex: its DeepEP and HybridEP backends are not present here; "
                         "the tokens travel by all-to-all");
  } else if (dispatcher != "alltoall") {
    v.push_back(fmt::format("--moe-token-dispatcher-type {}: not one of allgather, alltoall, flex", dispatcher));
  }
  append(v, expert_violations(c, model));
  // Recompute's layer count is bounded by the largest model chunk, known once the split is valid.
  int chunk_layers = model.num_layers;
  if (virtual_stages_resolved && stage_rules.empty()) {
    chunk_layers = 0;
    for (const ChunkSpec& chunk : assign_layers(model.num_layers, plan.stages))
      chunk_layers = std::max(chunk_layers, chunk.num_layers);
  }
  append(v, recompute_violations(o.recompute, chunk_layers, model.moe.num_experts > 0,
                                 model.moe.shared_expert_size > 0, model.linear.enabled()));
  return {std::move(plan), std::move(v)};
}

}  // namespace

TrainPlan plan_training(ModelConfig model, const TrainOptions& o) {
  CheckedPlan checked = check_training(std::move(model), o);
  const std::vector<std::string>& v = checked.violations;
  if (!v.empty()) throw ConfigError(fmt::format("invalid configuration: {}", fmt::join(v, "; ")));
  TrainPlan& plan = checked.plan;
  plan.chunks = assign_layers(plan.model.num_layers, plan.stages);
  resume_from_save(plan);  // --load's consumed samples and schedule
  return plan;
}

std::vector<std::string> training_plan_violations(ModelConfig model, const TrainOptions& o) {
  return check_training(std::move(model), o).violations;
}

}  // namespace tessel
