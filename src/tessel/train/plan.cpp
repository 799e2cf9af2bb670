#include "tessel/train/plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "tessel/ckpt/hf.h"
#include "tessel/core/error.h"
#include "tessel/data/tokenizer.h"

namespace tessel {

std::vector<std::string> training_violations(const ParallelConfig& c, const ModelConfig& model,
                                             int64_t micro_batch, int64_t global_batch) {
  std::vector<std::string> v;
  if (micro_batch < 1) v.push_back(fmt::format("--micro-batch-size must be positive (got {})", micro_batch));
  if (global_batch < 1) v.push_back(fmt::format("--global-batch-size must be positive (got {})", global_batch));

  if (c.tp >= 1) {
    auto split_by_tp = [&](const char* flag, int count) {
      if (count > 0 && count % c.tp != 0)
        v.push_back(fmt::format("{} {} is not divisible by --tensor-model-parallel-size {}", flag, count, c.tp));
    };
    split_by_tp("--num-attention-heads", model.num_attention_heads);
    if (model.num_query_groups > 0 && model.num_query_groups != model.num_attention_heads)
      split_by_tp("--num-query-groups", model.num_query_groups);
    split_by_tp("--ffn-hidden-size", model.ffn_size());
  }

  // Megatron's load-balanced causal split cuts each sequence into 2·CP chunks.
  if (c.cp > 1 && model.seq_length > 0 && model.seq_length % (2 * c.cp) != 0)
    v.push_back(fmt::format("--seq-length {} is not divisible by 2 × --context-parallel-size {} = {}",
                            model.seq_length, c.cp, 2 * c.cp));

  if (c.sequence_parallel) {
    if (c.tp == 1) {
      v.push_back("--sequence-parallel needs --tensor-model-parallel-size > 1");
    } else if (c.tp > 1 && c.cp >= 1 && micro_batch > 0 && model.seq_length > 0 &&
               model.seq_length % c.cp == 0) {
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
  // Megatron's ModelParallelConfig: expert layers under TP exchange tokens in sequence-parallel form.
  if (c.ep > 1 && c.tp > 1 && !c.sequence_parallel)
    v.push_back(fmt::format("--expert-model-parallel-size {} with --tensor-model-parallel-size {} "
                            "needs --sequence-parallel", c.ep, c.tp));

  if (micro_batch > 0 && global_batch > 0 && layout_violations(c).empty()) {
    int64_t per_step = micro_batch * c.dp();
    if (global_batch % per_step != 0)
      v.push_back(fmt::format("--global-batch-size {} is not divisible by --micro-batch-size {} × DP {} = {}",
                              global_batch, micro_batch, c.dp(), per_step));
  }
  return v;
}

StageOptions stage_options(const TrainOptions& o) {
  return {o.parallel.pp, o.parallel.vpp, o.first_stage_layers, o.last_stage_layers,
          o.pipeline_layout};
}

ScheduleConfig schedule_config(const TrainOptions& o, int microbatches) {
  const ParallelConfig& pc = o.parallel;
  ScheduleKind kind = pc.vpp > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB;
  if (!o.schedule.empty()) kind = parse_schedule_kind(o.schedule);
  return {kind, pc.pp, microbatches, pc.vpp, o.microbatch_group};
}

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
  if (!o.save_hf.empty())
    for (const std::string& m : hf_export_violations(model)) v.push_back("--save-hf: " + m);
  std::vector<std::string> layout = layout_violations(o.parallel);
  // The model and batch rules need a valid layout (they use DP).
  if (layout.empty())
    layout = training_violations(o.parallel, model, o.micro_batch_size, o.global_batch_size);
  for (std::string& m : layout)
    if (std::find(v.begin(), v.end(), m) == v.end()) v.push_back(std::move(m));
  const ParallelConfig& pc = o.parallel;
  for (std::string& m : stage_violations(model.num_layers, stage_options(o))) v.push_back(std::move(m));
  if (layout.empty() && o.micro_batch_size > 0 && o.global_batch_size % (o.micro_batch_size * pc.dp()) == 0) {
    const int microbatches = static_cast<int>(o.global_batch_size / (o.micro_batch_size * pc.dp()));
    try {
      for (std::string& m : schedule_violations(schedule_config(o, microbatches))) v.push_back(std::move(m));
    } catch (const Error& e) {
      v.push_back(e.what());  // an unknown --schedule name
    }
  }
  try {
    parse_cp_comm_type(o.cp_comm_type);
  } catch (const Error& e) {
    v.push_back(e.what());
  }
  if (model.moe.num_experts > 0)
    for (std::string& m : model.moe.violations(pc.ep, model.num_layers)) v.push_back(std::move(m));
  if (pc.ep > 1 && model.moe.num_experts == 0)
    v.push_back("--expert-model-parallel-size > 1 needs --num-experts (a Mixture-of-Experts model)");
  if (model.moe.num_experts > 0 && model.arch != Arch::Llama)
    v.push_back("--num-experts needs --arch llama (Qwen-MoE style experts)");
  // Megatron asserts it: under TP the MoE layers take sequence-parallel rows. (With EP > 1 the
  // layout rules already say so.)
  if (model.moe.num_experts > 0 && pc.tp > 1 && !pc.sequence_parallel && pc.ep == 1)
    v.push_back(fmt::format("--num-experts with --tensor-model-parallel-size {} needs "
                            "--sequence-parallel", pc.tp));
  if (pc.expert_tp() != 1 && pc.expert_tp() != pc.tp)
    v.push_back(fmt::format("--expert-tensor-parallel-size {} must be 1 or the TP size {}",
                            pc.expert_tp(), pc.tp));
  const int moe_ffn = model.moe.ffn_hidden_size > 0 ? model.moe.ffn_hidden_size : model.ffn_size();
  if (model.moe.num_experts > 0 && pc.expert_tp() >= 1 && moe_ffn % pc.expert_tp() != 0)
    v.push_back(fmt::format("the expert size (--moe-ffn-hidden-size) {} is not divisible by "
                            "--expert-tensor-parallel-size {}", moe_ffn, pc.expert_tp()));
  if (model.moe.num_experts > 0 && pc.tp >= 1 && model.moe.shared_expert_size % pc.tp != 0)
    v.push_back(fmt::format("--moe-shared-expert-intermediate-size {} is not divisible by "
                            "--tensor-model-parallel-size {}", model.moe.shared_expert_size, pc.tp));
  if (v.empty()) return;
  std::string msg = "invalid configuration: " + v[0];
  for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
  throw ConfigError(msg);
}

}  // namespace tessel
