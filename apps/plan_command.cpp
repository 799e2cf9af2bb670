#include "plan_command.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/model/config.h"
#include "tessel/plan/calibrate.h"
#include "tessel/plan/published.h"
#include "tessel/plan/report.h"
#include "tessel/train/planned_run.h"

namespace tessel {

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  TESSEL_CHECK(out.good(), "{}: cannot create", path);
  out << text;
  TESSEL_CHECK(out.good(), "{}: write failed", path);
}

}  // namespace

PlanCommand::PlanCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("plan", "predict memory and step time of a layout, or search the best one");
  CLI::App& c = *cmd_;
  // Model: --model PRESET or --model-config FILE (tessel's JSON or a Hugging Face config.json),
  // then `tessel train`'s model flags on top.
  std::string presets;
  for (const std::string& n : model_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  c.add_option("--model", preset_, "model preset: " + presets);
  c.add_option("--model-config", model_file_, "model file: tessel's JSON (flag names with _) or a Hugging Face config.json");
  auto set_int = [&](const char* name, auto member, const char* help) {
    c.add_option_function<int>(name, [this, member](const int& v) { overrides_.push_back([v, member](PlanModel& m) { member(m) = v; }); }, help);
  };
  set_int("--num-layers", [](PlanModel& m) -> int& { return m.cfg.num_layers; }, "Transformer layers");
  set_int("--hidden-size", [](PlanModel& m) -> int& { return m.cfg.hidden_size; }, "hidden size");
  set_int("--num-attention-heads", [](PlanModel& m) -> int& { return m.cfg.num_attention_heads; }, "attention heads");
  set_int("--num-query-groups", [](PlanModel& m) -> int& { return m.cfg.num_query_groups; }, "key/value heads (GQA)");
  set_int("--ffn-hidden-size", [](PlanModel& m) -> int& { return m.cfg.ffn_hidden_size; }, "MLP hidden size");
  set_int("--seq-length", [](PlanModel& m) -> int& { return m.cfg.seq_length; }, "sequence length");
  set_int("--max-position-embeddings", [](PlanModel& m) -> int& { return m.cfg.max_position_embeddings; }, "maximum positions");
  set_int("--vocab-size", [](PlanModel& m) -> int& { return m.cfg.vocab_size; }, "vocabulary size");
  set_int("--make-vocab-size-divisible-by", [](PlanModel& m) -> int& { return m.cfg.make_vocab_size_divisible_by; }, "vocabulary padding, × TP");
  set_int("--num-experts", [](PlanModel& m) -> int& { return m.cfg.moe.num_experts; }, "MoE experts per layer");
  set_int("--moe-router-topk", [](PlanModel& m) -> int& { return m.cfg.moe.topk; }, "experts per token");
  set_int("--moe-ffn-hidden-size", [](PlanModel& m) -> int& { return m.cfg.moe.ffn_hidden_size; }, "an expert's MLP size");
  set_int("--moe-shared-expert-intermediate-size", [](PlanModel& m) -> int& { return m.cfg.moe.shared_expert_size; }, "shared expert size");
  set_int("--kv-channels", [](PlanModel& m) -> int& { return m.kv_channels; }, "head dimension (0: hidden / heads)");
  set_int("--q-lora-rank", [](PlanModel& m) -> int& { return m.mla.q_lora_rank; }, "MLA query latent");
  set_int("--kv-lora-rank", [](PlanModel& m) -> int& { return m.mla.kv_lora_rank; }, "MLA key/value latent");
  set_int("--qk-head-dim", [](PlanModel& m) -> int& { return m.mla.qk_head_dim; }, "MLA query/key head dimension");
  set_int("--qk-pos-emb-head-dim", [](PlanModel& m) -> int& { return m.mla.qk_pos_emb_head_dim; }, "MLA RoPE dimension");
  set_int("--v-head-dim", [](PlanModel& m) -> int& { return m.mla.v_head_dim; }, "MLA value head dimension");
  for (auto [name, member] : {std::pair{"--hidden-dropout", &PlanModel::hidden_dropout},
                              {"--attention-dropout", &PlanModel::attention_dropout}})
    c.add_option_function<double>(name, [this, member](const double& v) { overrides_.push_back([v, member](PlanModel& m) { m.*member = v; }); },
                                  "dropout probability (its masks take memory)");
  c.add_option_function<std::string>("--arch", [this](const std::string& a) {
    overrides_.push_back([a](PlanModel& m) { m.cfg.arch = parse_arch(a); });
  }, "gpt2 | llama");
  c.add_option_function<std::string>("--moe-router-score-function", [this](const std::string& f) {
    overrides_.push_back([f](PlanModel& m) { m.cfg.moe.score_sigmoid = f == "sigmoid"; });
  }, "softmax | sigmoid");
  for (auto [name, member] : {std::pair{"--moe-aux-loss-coeff", &MoeConfig::aux_loss_coeff}, {"--moe-z-loss-coeff", &MoeConfig::z_loss_coeff}})
    c.add_option_function<float>(name, [this, member](const float& v) { overrides_.push_back([v, member](PlanModel& m) { m.cfg.moe.*member = v; }); },
                                 "router loss coefficient (its scores take memory)");
  c.add_flag_callback("--moe-router-pre-softmax", [this]() { overrides_.push_back([](PlanModel& m) { m.cfg.moe.pre_softmax = true; }); },
                      "softmax over all experts before the top-k");
  c.add_option("--moe-layer-freq", moe_layer_freq_, "MoE every N layers, or a 0/1 list such as [1,0,1,0]");
  for (auto [name, member] : {std::pair{"--add-qkv-bias", &ModelConfig::add_qkv_bias}, {"--qk-layernorm", &ModelConfig::qk_layernorm}})
    c.add_flag_callback(name, [this, member]() { overrides_.push_back([member](PlanModel& m) { m.cfg.*member = true; }); },
                        "attention option (llama)");
  c.add_flag_callback("--multi-latent-attention", [this]() { overrides_.push_back([](PlanModel& m) { m.multi_latent_attention = true; }); },
                      "MLA (DeepSeek-V2/V3)");

  // Layout and run: `tessel train`'s flags.
  ParallelConfig& p = parallel_;
  layout_opts_ = {c.add_option("--tp,--tensor-model-parallel-size", p.tp, "tensor parallel size"),
                  c.add_option("--pp,--pipeline-model-parallel-size", p.pp, "pipeline parallel size"),
                  c.add_option("--cp,--context-parallel-size", p.cp, "context parallel size"),
                  c.add_option("--ep,--expert-model-parallel-size", p.ep, "expert parallel size")};
  etp_opt_ = c.add_option("--etp,--expert-tensor-parallel-size", p.etp, "expert tensor parallel size (0: = TP)");
  vpp_opt_ = c.add_option("--vpp,--num-virtual-stages-per-pipeline-rank", p.vpp, "virtual pipeline stages");
  c.add_option("--order", p.order, "rank order, first axis fastest")->capture_default_str();
  c.add_flag("--sequence-parallel", p.sequence_parallel, "sequence parallel (searched layouts always use it with TP)");
  dist_opt_ = c.add_flag("--use-distributed-optimizer", p.distributed_optimizer, "shard the optimizer state over DP");
  mb_opt_ = c.add_option("--micro-batch-size", micro_batch_, "samples per microbatch")->capture_default_str();
  c.add_option("--global-batch-size", global_batch_, "samples per iteration")->capture_default_str();
  recompute_opt_ = c.add_option("--recompute-granularity", recompute_, "none | selective | full")->capture_default_str();
  c.add_option("--recompute-method", recompute_method_, "full recompute: uniform (the one planned)");
  c.add_option("--recompute-num-layers", recompute_num_layers_, "full recompute: layers per group (1, the one planned)");
  c.add_option("--decoder-first-pipeline-num-layers", first_layers_, "layers of the first stage");
  c.add_option("--decoder-last-pipeline-num-layers", last_layers_, "layers of the last stage");
  c.add_option("--pipeline-model-parallel-layout", pipeline_layout_, "Megatron's layout string");
  c.add_option("--schedule", schedule_, "gpipe | 1f1b | interleaved | zb-h1 | zb-v | dualpipev (default: 1f1b, interleaved with --vpp)");
  c.add_option("--microbatch-group-size-per-virtual-pipeline-stage", microbatch_group_, "interleaved group (0: PP)");
  c.add_flag("--overlap-grad-reduce", overlap_grad_reduce_, "overlap the DP reduction with the last backward");
  c.add_flag("--enable-optimizer-post-validation", post_validation_, "step before the gradient norm is known (zero-bubble): keeps a copy of the step's state");
  c.add_flag("--no-async-tensor-model-parallel-allreduce", no_async_tp_, "GPU: wait for the backward's TP all-reduces");
  c.add_flag("--bf16", bf16_, "bf16 mixed precision (the default on GPU clusters)");
  c.add_flag("--fp16", fp16_, "fp16 mixed precision");
  c.add_option("--attention-backend", attention_, "GPU core attention: flash (default) | unfused");
  c.add_option("--threads", threads_, "CPU: threads per rank")->capture_default_str();
  c.add_option("--moe-load-factor", moe_load_factor_, "dropless MoE: the busiest rank's routed rows over a balanced load")
      ->capture_default_str();
  c.add_option_function<double>("--moe-expert-capacity-factor", [this](const double& f) {
    overrides_.push_back([f](PlanModel& m) { m.cfg.moe.capacity_factor = f; });
  }, "expert capacity factor (0: dropless)");
  c.add_flag_callback("--moe-pad-expert-input-to-capacity", [this]() {
    overrides_.push_back([](PlanModel& m) { m.cfg.moe.pad_to_capacity = true; });
  }, "pad every expert's input to its capacity");
  c.add_option("--cluster", cluster_, "a100-80gb | h100 | h200 | b200 | cpu | a cluster JSON file")->capture_default_str();
  num_gpus_opt_ = c.add_option("--num-gpus", num_gpus_, "GPUs (CPU: ranks) to plan for (default: one node)");

  c.add_flag("--json", json_, "print JSON instead of tables");
  c.add_flag("--explain", explain_, "print every figure with the formula that gave it");
  c.add_option("--top", top_, "layouts to rank")->capture_default_str();
  c.add_flag("--all-rejected", all_rejected_, "list every rejected layout, not one per rule");
  c.add_option("--svg-memory", svg_memory_, "draw the memory per stage here (SVG)");
  c.add_option("--svg-time", svg_time_, "draw the step-time breakdown here (SVG)");
  c.add_flag("--calibrate", calibrate_, "measure this machine (GEMM, memory, MPI, a short tessel train) and write a cluster file");
  c.add_option("--out", calibrate_out_, "--calibrate: where to write (default $TESSEL_CLUSTER_FILE or tessel-cpu-cluster.json)");
  c.add_flag("--calibrate-comm", calibrate_comm_, "(internal) MPI measurements, run under mpirun by --calibrate")->group("");
  c.add_flag("--published", published_, "predict the published Megatron-LM runs and print the errors");
}

bool PlanCommand::layout_given() const {
  for (CLI::Option* o : layout_opts_)
    if (o->count() > 0) return true;
  return false;
}

PlanModel PlanCommand::resolve_model() const {
  TESSEL_CHECK(preset_.empty() || model_file_.empty(), "give --model or --model-config, not both");
  PlanModel m;
  m.name = "tessel default (gpt2, 4 layers, hidden 256)";
  if (!preset_.empty()) m = model_preset(preset_);
  if (!model_file_.empty()) m = load_plan_model(model_file_);
  for (const auto& apply : overrides_) apply(m);
  if (!moe_layer_freq_.empty()) m.cfg.moe.layer_pattern = parse_moe_layer_freq(moe_layer_freq_, m.cfg.num_layers);
  std::vector<std::string> v = m.violations();
  if (!v.empty()) {
    std::string msg = "invalid model: " + v[0];
    for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
    throw ConfigError(msg);
  }
  return m;
}

PlanRun PlanCommand::resolve_run(const PlanModel& model, const Cluster& cluster) const {
  PlanRun r;
  r.parallel = parallel_;
  r.parallel.world = num_gpus_opt_->count() > 0 ? num_gpus_ : cluster.devices_per_node;
  r.micro_batch = micro_batch_;
  r.global_batch = global_batch_;
  r.recompute = parse_recompute(recompute_);
  // tessel train's flags for the one full recompute the planner models (Korthikanti's: every
  // layer keeps only its input).
  const bool method_given = !recompute_method_.empty() || recompute_num_layers_ != 0;
  if (r.recompute != Recompute::Full && method_given)
    throw ConfigError("--recompute-method and --recompute-num-layers need --recompute-granularity full");
  if (r.recompute == Recompute::Full && ((recompute_method_ != "uniform" && !recompute_method_.empty()) ||
                                         recompute_num_layers_ > 1 || recompute_num_layers_ < 0))
    throw ConfigError(fmt::format("tessel plan models full recompute as --recompute-method uniform --recompute-num-layers 1 "
                                  "(got --recompute-method '{}' --recompute-num-layers {})", recompute_method_, recompute_num_layers_));
  TESSEL_CHECK(!(bf16_ && fp16_), "give --bf16 or --fp16, not both");
  r.precision = cluster.cpu() ? PlannedPrecision::FP32 : fp16_ ? PlannedPrecision::FP16 : PlannedPrecision::BF16;
  if (cluster.cpu() && (bf16_ || fp16_)) r.precision = fp16_ ? PlannedPrecision::FP16 : PlannedPrecision::BF16;  // refused by the rules
  r.attention = cluster.cpu() ? AttentionBackend::Tessel
                              : attention_.empty() ? AttentionBackend::Flash : parse_attention_backend(attention_);
  r.first_stage_layers = first_layers_, r.last_stage_layers = last_layers_;
  r.pipeline_layout = pipeline_layout_;
  r.schedule = schedule_;
  r.microbatch_group = microbatch_group_;
  r.overlap_grad_reduce = overlap_grad_reduce_;
  r.post_validation = post_validation_;
  r.async_tp_allreduce = !no_async_tp_;
  r.threads = threads_;
  r.moe_load_factor = moe_load_factor_;
  return r;
}

void PlanCommand::write_svgs(const Estimate& est, const std::string& title) const {
  if (!svg_memory_.empty()) write_file(svg_memory_, memory_svg(est, title));
  if (!svg_time_.empty()) write_file(svg_time_, time_svg(est, title));
}

void PlanCommand::evaluate(const PlanModel& model, const Cluster& cluster, const PlanRun& run) const {
  const std::vector<std::string> v = run_violations(model, run, cluster, planned_run_violations);
  if (!v.empty()) {
    std::string msg = "invalid layout " + run.describe() + ": " + v[0];
    for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
    throw ConfigError(msg);
  }
  const Estimate est = estimate(model, run, cluster);
  write_svgs(est, model.name + " | " + run.describe());
  if (json_) fmt::print("{}\n", single_json(model, cluster, est).dump(2));
  else if (explain_) print_explain(model, cluster, est);
  else print_estimate(model, cluster, est);
}

void PlanCommand::search_layouts(const PlanModel& model, const Cluster& cluster, const PlanRun& base) const {
  SearchSpace space;
  space.top = top_;
  if (mb_opt_->count() > 0) space.micro_batch = micro_batch_;
  if (recompute_opt_->count() > 0) space.recompute = parse_recompute(recompute_);
  if (dist_opt_->count() > 0) space.distributed_optimizer = true;
  if (etp_opt_->count() > 0 && parallel_.etp > 0) space.etp = parallel_.etp;
  if (vpp_opt_->count() > 0) space.vpp = parallel_.vpp;
  const std::vector<std::string> gpus = gpu_count_violations(base.parallel.world, cluster);
  if (!gpus.empty()) throw ConfigError(gpus.front());
  const SearchResult result = search(model, base, space, cluster, planned_run_violations);
  if (result.ranked.empty()) {
    std::string why;
    for (const Rejection& j : result.rejected)
      if (j.reasons.front().rfind("memory", 0) == 0) {
        why = j.reasons.front() + " (" + j.run.describe() + ")";
        break;
      }
    if (why.empty() && !result.rejected.empty()) why = result.rejected.front().reasons.front();
    throw ConfigError(fmt::format("no layout of {} fits on {} × {} with global batch {}: all {} layouts are rejected, "
                                  "e.g. {}", model.name, base.parallel.world, cluster.name, base.global_batch,
                                  result.considered, why));
  }
  write_svgs(result.ranked.front(), model.name + " | best: " + result.ranked.front().run.describe());
  if (json_) fmt::print("{}\n", search_json(model, cluster, result).dump(2));
  else if (explain_) print_explain(model, cluster, result.ranked.front());
  else print_search(model, cluster, result, all_rejected_);
}

void PlanCommand::run(MpiRuntime& runtime) {
  try {
    if (calibrate_comm_) return measure_comm(runtime);
    if (published_) return print_published(json_, planned_run_violations);
    if (calibrate_) {
      const Cluster c = calibrate_cpu(calibrate_out_.empty() ? cpu_cluster_file() : calibrate_out_);
      if (json_) fmt::print("{}\n", cluster_to_json(c).dump(2));
      return;
    }
    const Cluster cluster = load_cluster(cluster_);
    const PlanModel model = resolve_model();
    const PlanRun run = resolve_run(model, cluster);
    if (layout_given()) evaluate(model, cluster, run);
    else search_layouts(model, cluster, run);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {  // bad files and sizes are the user's input too: a clean exit
    throw ConfigError(e.what());
  }
}

}  // namespace tessel
