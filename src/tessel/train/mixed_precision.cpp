#include "tessel/train/mixed_precision.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tessel/kernels/fp8_kernels.h"

namespace tessel {

namespace {

// A block recipe's blocks against the shards: every dimension a layout splits must hold whole
// blocks, or a block of the sharded run would hold other values than the one-process run's block
// at its place. TP splits the attention heads' and the MLP's neurons (each layer's local weight
// columns or rows); CP splits each sequence into 2·CP chunks of tokens, along which the weight
// gradient's operands are blocked. (A size the layout cannot divide at all is its own rule's.)
void check_fp8_blocks(const ModelConfig& model, const TrainOptions& o, int64_t block, std::vector<std::string>& v) {
  const ParallelConfig& c = o.parallel.layout;
  std::vector<std::string> cut;
  const auto check = [&](const char* what, int64_t size, int parts, const char* flag) {
    if (parts > 1 && size % parts == 0 && size / parts % block != 0)
      cut.push_back(fmt::format("{} {} over {} {}", what, size, flag, parts));
  };
  check("the query heads' width", int64_t{model.num_attention_heads} * model.head_dim(), c.tp, "TP");
  check("the key/value heads' width", int64_t{model.query_groups()} * model.head_dim(), c.tp, "TP");
  check("--ffn-hidden-size", model.ffn_size(), c.tp, "TP");
  if (model.moe.num_experts > 0) check("the expert size", model.expert_ffn_size(), c.expert_tp(), "ETP");
  check("each sequence's tokens", model.seq_length, c.cp > 1 ? 2 * c.cp : 1, "CP chunks (2·CP)");
  if (!cut.empty())
    v.push_back(fmt::format("--fp8-recipe {} quantises in blocks of {} along each GEMM operand's dimensions, and a shard "
                      "must hold whole blocks: {} leave a part of a block (give sizes whose shards are multiples of {})",
                            o.fp8.recipe, block, fmt::join(cut, ", "), block));
}

// The FP8 flags' rules: Megatron-LM's (transformer_config.py's __post_init__, arguments.py's
// validate_args), the blocks against the shards, and what is not built.
std::vector<std::string> fp8_violations(const ModelConfig& model, const TrainOptions& o) {
  const Fp8Options& f = o.fp8;
  std::vector<std::string> v;
  if (f.param_gather && !f.on()) v.push_back("--fp8-param-gather needs --fp8-format, as in Megatron-LM");
  if (f.param_gather && !o.parallel.layout.distributed_optimizer)
    v.push_back("--fp8-param-gather needs --use-distributed-optimizer, as in Megatron-LM");
  if (!f.on()) return v;
  if (o.precision == Precision::FP16)
    v.push_back("--fp8-format with --fp16: FP8 is built beside bf16 (--bf16) or fp32, not with fp16's loss scaling");
  if (f.recipe == "custom")
    v.push_back("--fp8-recipe custom takes a Python quantizer factory (--fp8-quantizer-factory): give tensorwise, "
                "delayed, blockwise or mxfp8");
  if (f.amax_history_len < 1)
    v.push_back(fmt::format("--fp8-amax-history-len {} must be at least 1: delayed scaling's scale comes from the "
                            "amaxes it remembers", f.amax_history_len));
  if (f.first_last_layers_bf16 && f.recipe == "delayed")
    v.push_back("--first-last-layers-bf16 with --fp8-recipe delayed: Megatron-LM's delayed scaling does not "
                "support it");
  const int per_stage = model.num_layers / std::max(o.parallel.layout.pp, 1);
  if (f.first_last_layers_bf16)
    for (const auto& [flag, count] : {std::pair{"--num-layers-at-start-in-bf16", f.num_layers_at_start_in_bf16},
                                      {"--num-layers-at-end-in-bf16", f.num_layers_at_end_in_bf16}})
      if (count < 0 || count > per_stage)
        v.push_back(fmt::format("{} {} must be between 0 and the layers per pipeline stage ({}), as in Megatron-LM",
                                flag, count, per_stage));
  if (f.recipe == "blockwise") check_fp8_blocks(model, o, kFp8Block, v);
  if (f.recipe == "mxfp8") check_fp8_blocks(model, o, kMxfp8Block, v);
  // What is not built yet, each its own line.
  const ParallelConfig& c = o.parallel.layout;
  if (f.recipe == "delayed")
    v.push_back("--fp8-recipe delayed (Megatron-LM's default) is not built yet: its amax histories, reduced over the "
                "ranks that hold each tensor and saved in checkpoints; give --fp8-recipe tensorwise, blockwise or mxfp8");
  if (f.recipe == "tensorwise" && (c.tp > 1 || c.cp > 1))
    v.push_back("--fp8-recipe tensorwise under TP or CP is not built yet: each tensor's amax reduced over the ranks "
                "that hold parts of it");
  if (c.ep > 1)
    v.push_back("--fp8-format under EP is not built yet: an expert's tokens come from several ranks' microbatches, "
                "whose scales one process computes per microbatch");
  if (f.first_last_layers_bf16) v.push_back("--first-last-layers-bf16 is not built yet");
  if (model.mtp_num_layers > 0 || model.attention_output_gate || model.linear.enabled())
    v.push_back("--fp8-format with multi-token prediction, --attention-output-gate or Gated DeltaNet layers is not "
                "built yet: their projections do not run through the FP8 linear layer");
  if (o.device == Device::CUDA) v.push_back("--fp8-format with --device cuda is not built yet (cuBLASLt's FP8 GEMMs)");
  return v;
}

}  // namespace

Fp8Recipe fp8_recipe(const Fp8Options& o) {
  const Fp8Scaling scaling = o.recipe == "tensorwise" ? Fp8Scaling::Tensorwise
                             : o.recipe == "blockwise" ? Fp8Scaling::Blockwise
                             : o.recipe == "mxfp8"     ? Fp8Scaling::Mxfp8
                                                       : Fp8Scaling::Delayed;
  return {scaling, o.format == "hybrid"};
}

const Kernels& run_kernels(const TrainOptions& o) {
  return o.fp8.on() ? fp8_kernels_for(o.device, o.precision, fp8_recipe(o.fp8)) : kernels_for(o.device, o.precision);
}

LossScaling run_loss_scaling(const TrainOptions& o) {
  return loss_scaling(o.loss_scale, o.precision, o.parallel.layout.distributed_optimizer);
}

std::vector<std::string> mixed_precision_violations(const ModelConfig& model, const TrainOptions& o) {
  const LossScaling scaling = run_loss_scaling(o);
  std::vector<std::string> v = loss_scale_violations(o.loss_scale, scaling);
  // Post-validation steps before the norm, so before the step's overflow is known; the dynamic
  // scale of the next iteration depends on it.
  if (scaling == LossScaling::Dynamic && o.optim.post_validation)
    v.push_back("--enable-optimizer-post-validation with a dynamic loss scale (--fp16 without --loss-scale): each "
                "scale depends on whether the step before overflowed, which a step taken before its gradient norm "
                "cannot know; give --loss-scale, or leave post-validation off");
  for (std::string& rule : fp8_violations(model, o)) v.push_back(std::move(rule));
  return v;
}

std::vector<std::string> settle_mixed_precision(TrainOptions& o) {
  std::vector<std::string> notes;
  const LossScaling scaling = run_loss_scaling(o);
  if (o.fp8.on() && o.device == Device::CPU)
    notes.push_back(fmt::format("--fp8-format {} --fp8-recipe {}: the linear layers' GEMMs on FP8 operands with fp32 "
                                "accumulation, emulated on the CPU: slower than {}, numerically the recipe's",
                                o.fp8.format, o.fp8.recipe, o.precision == Precision::BF16 ? "bf16" : "fp32"));
  if (o.fp8.param_gather)
    notes.push_back("--fp8-param-gather: the distributed optimizer gathers the fp32 weights here, which the linear "
                    "layers then quantise whole: the FP8 weights Transformer Engine gathers, without the saving");
  if (o.precision == Precision::FP16 && o.device == Device::CPU)
    notes.push_back("--fp16: every GEMM's operands rounded to fp16 and accumulated in fp32, emulated on the CPU: "
                    "slower than fp32, numerically fp16's");
  if (scaling == LossScaling::Dynamic && o.faults.check_nan) {
    o.faults.check_nan = false;
    notes.push_back("--check-for-nan-in-loss-and-grad: off, as Megatron sets it with dynamic loss scaling, where a "
                    "non-finite gradient is the scaler's signal: that iteration's step is skipped");
  }
  if (o.loss_scale.loss_scale && scaling == LossScaling::None)
    notes.push_back(*o.loss_scale.loss_scale == 0.0f
                        ? "--loss-scale 0: no static scale, as in Megatron-LM (0 counts as not given)"
                        : "--loss-scale: no effect without --fp16, --bf16 or --use-distributed-optimizer, as in "
                          "Megatron-LM");
  return notes;
}

}  // namespace tessel
