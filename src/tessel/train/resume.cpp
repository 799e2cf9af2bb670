#include "tessel/train/resume.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/core/error.h"
#include "tessel/core/json_values.h"
#include "tessel/data/batches.h"
#include "tessel/data/tokenizer_files.h"

namespace tessel {

namespace {

using nlohmann::json;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
// A consumed-samples count of the save's run_config: one tessel's loader could have reached,
// else refused here naming the file and the field (a larger one, hand-edited or foreign, failed
// later naming neither: 2^62 as "cannot draw 4611686018427387912 samples").
int64_t saved_sample_count(const json& run_config, const char* key, const std::string& where) {
  const int64_t count = json_whole_number(run_config[key], where, key, 0, kMax);
  TESSEL_CHECK(count <= kSampleIdLimit,
               "{}: {} {} is past 2^31 samples: tessel numbers a run's samples below 2^31 (dropout keys them "
               "by an int32), so no run consumed that many", where, key, count);
  return count;
}

// Megatron's OptimizerParamScheduler.state_dict, without num_steps: the schedule's position is
// the optimizer's step count, saved beside it. tessel's weight decay is constant (start = end).
json scheduler_state(const TrainOptions& o) {
  const LrScheduleConfig& lr = o.optim.lr;
  return {{"max_lr", lr.lr}, {"min_lr", lr.min_lr},
          {"lr_warmup_steps", lr.warmup_steps()}, {"lr_decay_steps", lr.decay_steps()},
          {"lr_decay_style", lr_decay_style_name(lr.style)},
          {"start_wd", o.optim.adamw.weight_decay}, {"end_wd", o.optim.adamw.weight_decay},
          {"wd_incr_style", "constant"}};
}

// One parameter of the schedule: its state_dict key, the flags that set it, and its values.
struct SchedulerValue {
  const char* key;
  const char* flags;
  json current, saved;
};

// The values the save's schedule and the flags' disagree on.
std::vector<SchedulerValue> scheduler_differences(const json& current, const json& saved, const std::string& source) {
  static const std::pair<const char*, const char*> kFlags[] = {
      {"max_lr", "--lr"},
      {"min_lr", "--min-lr"},
      {"lr_warmup_steps", "--lr-warmup-iters × --global-batch-size, --lr-warmup-samples or --lr-warmup-fraction"},
      {"lr_decay_steps", "--lr-decay-iters (else --train-iters) × --global-batch-size, or --lr-decay-samples "
                         "(else --train-samples)"},
      {"lr_decay_style", "--lr-decay-style"},
      {"start_wd", "--weight-decay"},
      {"end_wd", "--weight-decay"},
      {"wd_incr_style", "the weight decay's increment (constant in tessel)"}};
  std::vector<SchedulerValue> differ;
  for (const auto& [key, flags] : kFlags) {
    TESSEL_CHECK(saved.contains(key), "{}: opt_param_scheduler has no {}", source, key);
    // Unchanged values are equal bits: a float's double written by nlohmann reads back exact.
    if (saved[key] != current[key]) differ.push_back({key, flags, current[key], saved[key]});
  }
  return differ;
}

// A value as the flags spell it: a rate as the float it is, not its double's digits.
std::string shown(const json& value) {
  if (value.is_number_float()) return fmt::format("{}", static_cast<float>(value.get<double>()));
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// "max_lr: the flags' 0.001 (--lr), the save's 0.003; ...".
std::string describe(const std::vector<SchedulerValue>& differ) {
  std::vector<std::string> parts;
  for (const SchedulerValue& d : differ)
    parts.push_back(fmt::format("{}: the flags' {} ({}), the save's {}", d.key, shown(d.current), d.flags,
                                shown(d.saved)));
  return fmt::format("{}", fmt::join(parts, "; "));
}

// The save's schedule against the flags': refused (the refusal returned), or one side taken and
// stated ("" returned).
std::string check_scheduler(TrainPlan& plan, const json& saved, const std::string& where) {
  CheckpointOptions& c = plan.options.checkpoint;
  const std::vector<SchedulerValue> differ = scheduler_differences(scheduler_state(plan.options), saved, where);
  if (differ.empty()) return "";
  if (c.override_opt_param_scheduler) {
    plan.notes.push_back(fmt::format("--override-opt_param-scheduler: the learning-rate schedule of the flags, "
                                     "not of the save {}: {}", where, describe(differ)));
    return "";
  }
  if (!c.use_checkpoint_opt_param_scheduler)
    return fmt::format("the learning-rate schedule differs from the save's: {}; give the save's values, "
                       "--override-opt_param-scheduler to use the flags', or --use-checkpoint-opt_param-scheduler "
                       "to keep the save's", describe(differ));
  LrScheduleConfig& lr = plan.options.optim.lr;
  lr.lr = json_number<float>(saved["max_lr"], where, "max_lr");
  lr.min_lr = json_number<float>(saved["min_lr"], where, "min_lr");
  lr.saved_warmup_steps = json_number<double>(saved["lr_warmup_steps"], where, "lr_warmup_steps");
  lr.saved_decay_steps = json_whole_number(saved["lr_decay_steps"], where, "lr_decay_steps", 1, kMax);
  // Megatron's OptimizerParamScheduler asserts 0 ≤ warmup < decay.
  TESSEL_CHECK(lr.saved_warmup_steps >= 0 && lr.saved_warmup_steps < static_cast<double>(lr.saved_decay_steps),
               "{}: lr_warmup_steps {} is not within [0, lr_decay_steps {})", where, lr.saved_warmup_steps,
               lr.saved_decay_steps);
  TESSEL_CHECK(saved["lr_decay_style"].is_string(), "{}: lr_decay_style is not a string", where);
  lr.style = parse_lr_decay_style(saved["lr_decay_style"].get<std::string>());
  plan.options.optim.adamw.weight_decay = json_number<float>(saved["start_wd"], where, "start_wd");
  TESSEL_CHECK(saved["start_wd"] == saved["end_wd"] && saved["wd_incr_style"] == "constant",
               "{}: a weight decay that changes over the run (start_wd {}, end_wd {}, {}) is not built here", where,
               saved["start_wd"].dump(), saved["end_wd"].dump(), saved["wd_incr_style"].dump());
  const std::vector<std::string> broken = lr_schedule_violations(lr);
  TESSEL_CHECK(broken.empty(), "{}: its learning-rate schedule: {}", where, fmt::join(broken, "; "));
  plan.notes.push_back(fmt::format("--use-checkpoint-opt_param-scheduler: the learning-rate schedule of the save {}: {}",
                                   where, describe(differ)));
  return "";
}

// Adam's settings that Megatron's optimizer.load_state_dict restores with the moments (torch's
// load_state_dict keeps the saved param_groups' betas and eps; the scheduler then sets only lr
// and weight decay), so that a flag changed on resume has no effect there. tessel would apply
// it: a resumed run that neither Megatron's nor the saved one is. Refused, naming the flag;
// --no-load-optim (a fresh optimizer, as Megatron's) takes the flags'.
json adam_state(const OptimizerConfig& adamw) {
  return {{"--adam-beta1", adamw.beta1}, {"--adam-beta2", adamw.beta2}, {"--adam-eps", adamw.eps}};
}

std::string check_adam(const TrainPlan& plan, const json& run_config) {
  if (!run_config.contains("adam")) return "";  // a save from before they were recorded
  const json& saved = run_config["adam"];
  const json now = adam_state(plan.options.optim.adamw);
  std::vector<std::string> differ;
  for (const auto& [flag, value] : now.items())
    if (saved.contains(flag) && saved[flag] != value)
      differ.push_back(fmt::format("{} {} (the save's {})", flag, shown(value), shown(saved[flag])));
  if (differ.empty()) return "";
  return fmt::format("{}: Megatron restores Adam's betas and eps with its state, so a change has no effect there; "
                     "give the save's values, or --no-load-optim for a fresh optimizer with these",
                     fmt::join(differ, ", "));
}

// Samples consumed by the save's `iteration` iterations under its own batch flags: a save from
// before consumed_train_samples was recorded.
int64_t consumed_by_old_save(const TrainPlan& plan, const json& run_config, int64_t iteration, const std::string& where) {
  const std::string schedule = run_config.value("step_batch_size_schedule", std::string());
  if (schedule.empty())
    return iteration * json_whole_number(run_config.value("global_batch_size", json(0)), where, "global_batch_size",
                                         1, kMax);
  std::vector<std::string> broken;
  const BatchSchedule saved = BatchSchedule::parse(schedule, plan.model.seq_length, broken);
  TESSEL_CHECK(broken.empty(), "{}: {}", where, fmt::join(broken, "; "));
  return saved.consumed_before(iteration + 1);
}

// The validation goes on at the save's consumed_valid_samples, as Megatron's validation iterator;
// a save without it (or with 0, as Megatron reads that) at the count these flags give its
// evaluations.
void resume_validation(TrainPlan& plan, const json& run_config, int64_t iteration, const std::string& where) {
  const int64_t evaluations = iteration / plan.options.eval.interval;
  const int64_t counted = plan.valid_samples_before(evaluations);
  const int64_t saved = run_config.contains("consumed_valid_samples")
                            ? saved_sample_count(run_config, "consumed_valid_samples", where)
                            : 0;
  plan.resumed_evaluations = evaluations;
  plan.resumed_valid_samples = saved > 0 ? saved : counted;
  if (plan.resumed_valid_samples != counted && plan.options.eval.iters > 0)
    plan.notes.push_back(fmt::format(
        "--load {}: its evaluations consumed {} validation samples; the next evaluation starts there, as Megatron's "
        "consumed_valid_samples (these flags would have consumed {})", plan.options.checkpoint.load, saved, counted));
}

// The flags that say which samples a run reads, and in which order, as a save records them:
// --seed shuffles the datasets, so the samples consumed index another order under another seed
// (Megatron's datasets take args.seed too). Mock data takes no --split (Megatron forces an even
// one without a blend: data/dataset_builder.cpp).
json data_state(const TrainOptions& o) {
  const DataOptions& d = o.data;
  json state = {{"--data-path", d.path}, {"--train-data-path", d.train_path}, {"--valid-data-path", d.valid_path},
                {"--test-data-path", d.test_path}, {"--mock-data", d.mock_data}, {"--seed", o.seed}};
  if (!d.mock_data) state["--split"] = d.split;
  return state;
}

// Other data on resume goes on, as Megatron's does: the consumed samples count into the new data's
// order. Megatron says nothing; tessel names what changed (issue 43: a silent change of the data).
void note_data_change(TrainPlan& plan, const json& run_config) {
  if (!run_config.contains("data")) return;  // a save from before the data was recorded
  const json now = data_state(plan.options);
  const json& saved = run_config["data"];
  std::vector<std::string> changed;
  for (const auto& [flag, value] : now.items())
    if (saved.contains(flag) && saved[flag] != value)
      changed.push_back(fmt::format("{} {} (was {})", flag, value.dump(), saved[flag].dump()));
  if (!changed.empty())
    plan.notes.push_back(fmt::format("--load {}: other data than its run's: {}; the samples it consumed count "
                                     "into this data's order, as Megatron goes on", plan.options.checkpoint.load,
                                     fmt::join(changed, ", ")));
}

}  // namespace

json resume_state(const TrainPlan& plan, int64_t iteration) {
  return {{"consumed_train_samples", plan.batches.consumed_before(iteration + 1)},
          {"consumed_valid_samples", plan.valid_samples_before(iteration / plan.options.eval.interval)},
          {"opt_param_scheduler", scheduler_state(plan.options)},
          {"data", data_state(plan.options)},
          {"adam", adam_state(plan.options.optim.adamw)}};
}

void resume_from_save(TrainPlan& plan) {
  const CheckpointOptions& c = plan.options.checkpoint;
  if (c.override_opt_param_scheduler && c.use_checkpoint_opt_param_scheduler)
    throw ConfigError("--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler: give one "
                      "(the flags' schedule or the save's), as Megatron");
  if (c.load.empty() || !std::filesystem::exists(c.load + "/latest_checkpointed_iteration.txt")) return;
  plan.loads_save = true;
  // The tokenizer first, under --finetune too: the weights mean nothing under another.
  const std::string why = tokenizer_mismatch(saved_tokenizer(c.load), tokenizer_identity(*plan.tokenizer));
  if (!why.empty())
    throw Error(fmt::format("--load {}: {}; give the tokenizer flags it was trained with", c.load, why));
  const int64_t iteration = latest_checkpointed_iteration(c.load);
  // As Megatron's load_checkpoint, which falls back to --pretrained-checkpoint only when --load
  // holds no checkpoint: the save wins, and the weights not read are named.
  if (!c.init_from.empty())
    plan.notes.push_back(fmt::format("--init-from {}: its weights are not read: --load {} holds iteration {}, whose "
                                     "weights the run starts from (as Megatron reads --pretrained-checkpoint only "
                                     "when --load holds no checkpoint)", c.init_from, c.load, iteration));
  if (c.finetune) return;
  const json meta = read_checkpoint_metadata(c.load, iteration);
  const std::string where = checkpoint_iteration_dir(c.load, iteration) + "/metadata.json";
  const json& run_config = meta["run_config"];
  const bool recorded = run_config.contains("consumed_train_samples");
  const int64_t consumed = recorded ? saved_sample_count(run_config, "consumed_train_samples", where)
                                    : consumed_by_old_save(plan, run_config, iteration, where);
  if (consumed != plan.batches.consumed_before(iteration + 1))
    plan.notes.push_back(fmt::format(
        "--load {}: its {} iterations consumed {} samples{}; the next global batch ({}) starts at sample {}, as "
        "Megatron's consumed_train_samples", c.load, iteration, consumed,
        recorded ? "" : " (its global batch's count: a save from before consumed_train_samples was recorded)",
        plan.batches.resumed_after(iteration, consumed).batch_of(iteration + 1), consumed));
  // The iterations left go on from the save's count: where the flags alone stay below 2^31
  // samples and the count takes them past it, the count is named, not left to the loader's
  // "sample 2147483650 is past them" iterations later.
  const int64_t last = plan.train_iters();
  const BatchSchedule resumed = plan.batches.resumed_after(iteration, consumed);
  TESSEL_CHECK(last <= iteration || plan.batches.consumed_before(last + 1) > kSampleIdLimit ||
                   resumed.consumed_before(last + 1) <= kSampleIdLimit,
               "{}: consumed_train_samples {}: the iterations {} to {} (--train-iters) after it would read samples "
               "up to {}, past the 2^31 tessel numbers a run's samples below", where, consumed, iteration + 1, last,
               resumed.consumed_before(last + 1) - 1);
  plan.batches = resumed;
  note_data_change(plan, run_config);
  resume_validation(plan, run_config, iteration, where);
  if (c.no_load_optim || !has_optimizer_state(meta)) return;  // the schedule starts again
  std::vector<std::string> refused;
  if (const std::string adam = check_adam(plan, run_config); !adam.empty()) refused.push_back(adam);
  if (!run_config.contains("opt_param_scheduler"))
    plan.notes.push_back(fmt::format("--load {}: a save from before its learning-rate schedule was recorded: the "
                                     "flags' schedule is taken to be its", c.load));
  else if (const std::string schedule = check_scheduler(plan, run_config["opt_param_scheduler"], where);
           !schedule.empty())
    refused.push_back(schedule);
  if (!refused.empty()) throw ConfigError(fmt::format("--load {}: {}", c.load, fmt::join(refused, "; ")));
}

}  // namespace tessel
