#include "plan_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "parallel_flags.h"
#include "tessel/core/error.h"
#include "tessel/core/writable.h"
#include "tessel/model/config.h"
#include "tessel/plan/calibrate.h"
#include "tessel/plan/model.h"
#include "tessel/plan/published.h"
#include "tessel/plan/report.h"
#include "tessel/train/plan.h"
#include "tessel/train/planned_run.h"
#include "thread_flags.h"

namespace tessel {

namespace {

// Every layout holds the weights at least once over all its devices: a model whose weights alone
// exceed the devices' memory fits none, and is refused before a search that would declare every
// stage of every layout (minutes for a million layers).
void require_room_for_the_weights(const PlanModel& model, const PlanRun& run, const Cluster& cluster) {
  const double bytes = run.precision == PlannedPrecision::FP32 ? 4 : 2;
  const double weights_gib = static_cast<double>(total_params(model)) * bytes / (1 << 30);
  const double devices_gib = run.parallel.world * cluster.memory_gib;
  if (run.parallel.world >= 1 && weights_gib > devices_gib)  // a bad count is the rules' to name
    throw ConfigError(fmt::format(
        "no layout of {} fits on {} × {}: its {:.3g} parameters take {:.0f} GiB for their {} "
        "weights alone, more than all {} devices hold ({:.0f} GiB each)",
        model.name, run.parallel.world, cluster.name, static_cast<double>(total_params(model)),
        weights_gib, precision_name(run.precision), run.parallel.world, cluster.memory_gib));
}

}  // namespace

PlanCommand::PlanCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("plan", "predict memory and step time of a layout, or search the best one");
  CLI::App& c = *cmd_;
  // Model: --model PRESET or --model-config FILE (tessel's JSON or a Hugging Face config.json),
  // then `tessel train`'s model flags on top, and the planner's own for what tessel cannot train.
  std::string presets;
  for (const std::string& n : model_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  c.add_option("--model", preset_, "model preset: " + presets);
  model_.add_to(c);
  auto set_int = [&](const char* name, auto member, const char* help) {
    c.add_option_function<int>(name, [this, member](const int& v) { overrides_.push_back([v, member](PlanModel& m) { member(m) = v; }); }, help);
  };
  set_int("--q-lora-rank", [](PlanModel& m) -> int& { return m.mla.q_lora_rank; }, "MLA query latent");
  set_int("--kv-lora-rank", [](PlanModel& m) -> int& { return m.mla.kv_lora_rank; }, "MLA key/value latent");
  set_int("--qk-head-dim", [](PlanModel& m) -> int& { return m.mla.qk_head_dim; }, "MLA query/key head dimension");
  set_int("--qk-pos-emb-head-dim", [](PlanModel& m) -> int& { return m.mla.qk_pos_emb_head_dim; }, "MLA RoPE dimension");
  set_int("--v-head-dim", [](PlanModel& m) -> int& { return m.mla.v_head_dim; }, "MLA value head dimension");
  c.add_flag_callback("--multi-latent-attention", [this]() { overrides_.push_back([](PlanModel& m) { m.multi_latent_attention = true; }); },
                      "MLA (DeepSeek-V2/V3)");

  // Layout and run: `tessel train`'s flags.
  const LayoutFlags layout = add_layout_flags(c, parallel_);
  layout_opts_ = {layout.tp, layout.pp, layout.cp, layout.ep};
  etp_opt_ = layout.etp;
  vpp_opt_ = layout.vpp;
  dist_opt_ = layout.distributed_optimizer;
  // A search compares every layout at one global batch, where Megatron's default (micro batch ×
  // DP) would change with each layout's DP: the plan keeps a fixed one.
  batch_.global_batch_size = 32;
  mb_opt_ = add_batch_flags(c, batch_).micro_batch;
  recompute_opt_ = add_recompute_flags(c, recompute_);
  add_stage_flags(c, pipeline_);
  add_schedule_flags(c, pipeline_.schedule, pipeline_.microbatch_group);
  add_overlap_flags(c, overlap_grad_reduce_, post_validation_);
  c.add_flag("--no-async-tensor-model-parallel-allreduce", no_async_tp_, "GPU: wait for the backward's TP all-reduces");
  c.add_flag("--bf16", bf16_, "bf16 mixed precision (the default on GPU clusters)");
  c.add_flag("--fp16", fp16_, "fp16 mixed precision");
  c.add_option("--attention-backend", attention_, "GPU core attention: flash (default) | unfused");
  add_thread_count_flag(c, "--threads", threads_, "CPU: threads per rank")->capture_default_str();
  c.add_option("--moe-load-factor", moe_load_factor_,
               "dropless MoE: the busiest rank's routed rows over a balanced load")
      ->capture_default_str();
  c.add_option("--engine", engine_,
               "the engine whose run is planned: tessel | megatron (default: tessel on a CPU cluster, megatron on a GPU one)");
  c.add_option("--cluster", cluster_, "a100-80gb | h100 | h200 | b200 | cpu | a cluster JSON file")->capture_default_str();
  num_gpus_opt_ = c.add_option("--num-gpus", num_gpus_, "GPUs (CPU: ranks) to plan for (default: one node)");
  runtime_memory_opt_ = c.add_option("--runtime-memory-gib", runtime_memory_gib_,
                                     "memory per rank outside the model (GPU: CUDA context, workspaces, NCCL buffers; "
                                     "CPU: the process's baseline resident memory; default: the cluster's, 1 GiB on "
                                     "the GPU presets)");
  c.add_option("--memory-margin", memory_margin_,
               "search: list the layouts over the memory limit by at most this fraction of it as near misses")
      ->capture_default_str();

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
  c.footer("A search gives every layout with TP > 1 --sequence-parallel.");
}

bool PlanCommand::layout_given() const {
  for (CLI::Option* o : layout_opts_)
    if (o->count() > 0) return true;
  return false;
}

PlanModel PlanCommand::resolve_model() const {
  TESSEL_CHECK(preset_.empty() || model_.model_file().empty(), "give --model or --model-config, not both");
  PlanModel m;
  if (!preset_.empty()) m = model_preset(preset_);
  if (!model_.model_file().empty()) m = load_plan_model(model_.model_file());
  const ModelConfig named = m.cfg;
  model_.apply(m.cfg);
  for (const auto& apply : overrides_) apply(m);
  // Titles and tables name the model by what it is: the preset or file, resized when the flags
  // change its depth or width, or one sized by the flags alone.
  const std::string size = fmt::format("{} layers, {} hidden", m.cfg.num_layers, m.cfg.hidden_size);
  if (m.name.empty()) m.name = "custom (" + size + ")";
  else if (m.cfg.num_layers != named.num_layers || m.cfg.hidden_size != named.hidden_size)
    m.name += " resized (" + size + ")";
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
  r.micro_batch = batch_.micro_batch_size;
  r.global_batch = batch_.global_batch_size;
  r.recompute = parse_planned_recompute(recompute_);
  TESSEL_CHECK(!(bf16_ && fp16_), "give --bf16 or --fp16, not both");
  if (!engine_.empty()) r.engine = parse_engine(engine_);
  const bool tessel = r.engine_on(cluster) == PlannedEngine::Tessel;
  r.precision = tessel ? PlannedPrecision::FP32 : fp16_ ? PlannedPrecision::FP16 : PlannedPrecision::BF16;
  if (tessel && (bf16_ || fp16_)) r.precision = fp16_ ? PlannedPrecision::FP16 : PlannedPrecision::BF16;  // refused by the rules
  r.attention = tessel ? AttentionBackend::Tessel
                       : attention_.empty() ? AttentionBackend::Flash : parse_attention_backend(attention_);
  const std::vector<std::string> chunks = resolve_virtual_stages(model.cfg.num_layers, pipeline_, r.parallel);
  if (!chunks.empty()) throw ConfigError(fmt::format("invalid layout: {}", fmt::join(chunks, "; ")));
  r.first_stage_layers = pipeline_.first_stage_layers, r.last_stage_layers = pipeline_.last_stage_layers;
  r.pipeline_layout = pipeline_.layout;
  r.schedule = pipeline_.schedule;
  r.microbatch_group = pipeline_.microbatch_group;
  r.overlap_grad_reduce = overlap_grad_reduce_;
  r.post_validation = post_validation_;
  r.async_tp_allreduce = !no_async_tp_;
  r.threads = threads_;
  // The busiest rank's routed rows over a balanced load: a maximum over the mean, never below 1.
  // 0, a negative or NaN factor shrank the experts' time and reported an MFU past 100 %.
  if (!(std::isfinite(moe_load_factor_) && moe_load_factor_ >= 1))
    throw ConfigError(fmt::format("--moe-load-factor {} must be a finite number ≥ 1 (the busiest rank's routed rows "
                                  "over a balanced load)", moe_load_factor_));
  r.moe_load_factor = moe_load_factor_;
  return r;
}

Cluster PlanCommand::resolve_cluster() const {
  Cluster c = load_cluster(cluster_);
  if (runtime_memory_opt_->count() > 0) {
    // An infinite allowance passed "not negative" and put every layout over the limit; 0 is allowed,
    // as a calibrated CPU cluster's own value may be.
    if (!(std::isfinite(runtime_memory_gib_) && runtime_memory_gib_ >= 0))
      throw ConfigError(fmt::format("--runtime-memory-gib {} must be a finite number ≥ 0 (GiB per rank outside the "
                                    "model)", runtime_memory_gib_));
    c.runtime_memory_gib = runtime_memory_gib_;
  }
  if (!(memory_margin_ >= 0 && memory_margin_ < 1))
    throw ConfigError(fmt::format("--memory-margin is a fraction of the limit in [0, 1) (got {})", memory_margin_));
  return c;
}

void PlanCommand::write_svgs(const Estimate& est, const Cluster& cluster, const std::string& title) const {
  // Plots: a rerun of the command draws them again, no fsync.
  const Durability plot = Durability::kReplaceable;
  if (!svg_memory_.empty()) write_file_atomically(svg_memory_, memory_svg(est, cluster, title), plot);
  if (!svg_time_.empty()) write_file_atomically(svg_time_, time_svg(est, title), plot);
}

void PlanCommand::evaluate(const PlanModel& model, const Cluster& cluster, const PlanRun& run) const {
  const std::vector<std::string> v = run_violations(model, run, cluster, planned_run_violations);
  if (!v.empty()) {
    std::string msg = "invalid layout " + run.describe() + ": " + v[0];
    for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
    throw ConfigError(msg);
  }
  const Estimate est = estimate(model, run, cluster);
  write_svgs(est, cluster, model.name + " | " + run.describe());
  // A layout that does not fit is still predicted, with what would make it fit.
  const std::vector<MemoryFix> fixes = est.fits() ? std::vector<MemoryFix>{}
                                                  : memory_fixes(model, run, cluster, planned_run_violations, !json_);
  if (json_) {
    nlohmann::json j = single_json(model, cluster, est);
    nlohmann::json list = nlohmann::json::array();
    for (const MemoryFix& f : fixes) list.push_back({{"change", f.change}, {"peak_gib", f.peak_gib}});
    j["layouts"][0]["fixes"] = list;
    fmt::print("{}\n", j.dump(2));
    return;
  }
  if (explain_) print_explain(model, cluster, est);
  else print_estimate(model, cluster, est);
  if (!est.fits()) print_memory_fixes(est, fixes);
}

void PlanCommand::search_layouts(const PlanModel& model, const Cluster& cluster, const PlanRun& base) const {
  // The sizes a search keeps fixed are checked here: the search divides by them.
  std::vector<std::string> fixed;
  if (vpp_opt_->count() > 0 && parallel_.vpp < 1)
    fixed.push_back(fmt::format("--num-virtual-stages-per-pipeline-rank must be at least 1 (got {})", parallel_.vpp));
  if (pipeline_.layers_per_virtual_stage != 0)
    fixed.push_back("--num-layers-per-virtual-pipeline-stage gives VPP for one PP: plan a layout (--pp, ...) with it, "
                    "or search with --num-virtual-stages-per-pipeline-rank");
  if (mb_opt_->count() > 0 && batch_.micro_batch_size < 1)
    fixed.push_back(fmt::format("--micro-batch-size must be at least 1 (got {})", batch_.micro_batch_size));
  if (!fixed.empty()) throw ConfigError(fmt::format("invalid search: {}", fmt::join(fixed, "; ")));
  SearchSpace space;
  space.top = top_;
  space.memory_margin = memory_margin_;
  if (mb_opt_->count() > 0) space.micro_batch = batch_.micro_batch_size;
  if (recompute_opt_->count() > 0) space.recompute = parse_recompute(recompute_.granularity);
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
  write_svgs(result.ranked.front(), cluster, model.name + " | best: " + result.ranked.front().run.describe());
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
    const Cluster cluster = resolve_cluster();
    const PlanModel model = resolve_model();
    const PlanRun run = resolve_run(model, cluster);
    require_room_for_the_weights(model, run, cluster);
    if (layout_given()) evaluate(model, cluster, run);
    else search_layouts(model, cluster, run);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {  // bad files and sizes are the user's input too: a clean exit
    throw ConfigError(e.what());
  }
}

}  // namespace tessel
