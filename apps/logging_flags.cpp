#include "logging_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessel {

void LoggingFlags::add_to(CLI::App& c, LogOptions& log) {
  const std::string group = "Megatron-LM logging";
  values_.reserve(4);  // the options hold references into it
  TensorBoardOptions& tb = log.tensorboard;
  const auto add = [&](CLI::Option* option) { option->group(group); };
  add(c.add_option("--tensorboard-dir", tb.dir, "write TensorBoard event files here (the last rank writes them)"));
  add(c.add_option("--tensorboard-log-interval", tb.interval,
                   "iterations between the per-iteration scalars (learning-rate, lm loss, grad-norm, ...)")
          ->capture_default_str());
  add(c.add_option("--tensorboard-queue-size", tb.queue_size, "events kept in memory before a write to disk")
          ->capture_default_str());
  add(c.add_flag("--log-timers-to-tensorboard", tb.timers,
                 "iteration-time (the slowest rank's mean over the --log-interval) and, with --log-throughput, "
                 "throughput"));
  add(c.add_flag_callback(
      "--no-log-loss-scale-to-tensorboard,--disable-log-loss-scale-to-tensorboard", [&tb] { tb.loss_scale = false; },
      "no loss-scale scalar (1: tessel scales no loss)"));
  add(c.add_flag("--log-world-size-to-tensorboard", tb.world_size, "the world-size scalar"));
  add(c.add_flag("--log-memory-to-tensorboard", tb.memory,
                 "mem-reserved-bytes (resident memory now) and mem-max-allocated-bytes (its peak), the largest "
                 "rank's; the host's memory, as tessel allocates it once"));
  add(c.add_flag("--log-validation-ppl-to-tensorboard", tb.validation_ppl, "the validation perplexity scalars"));
  add(c.add_flag("--log-params-norm", tb.params_norm, "the L2 norm of the parameters after each step"));
  add(c.add_flag("--log-num-zeros-in-grad", tb.num_zeros_in_grad, "the number of zeros among the reduced gradients"));
  add(c.add_flag("--log-throughput", tb.throughput,
                 "model TFLOP/s per rank (forward + backward, 3 × the forward's matrix multiplies)"));
  for (const char* flag : {"--wandb-project", "--wandb-exp-name", "--wandb-save-dir", "--wandb-entity"}) {
    CLI::Option* option = c.add_option(flag, values_.emplace_back(), "accepted: W&B is not reachable from tessel");
    add(option);
    wandb_.push_back(option);
  }
  ProfileWindow& p = log.profile;
  add(c.add_flag("--profile", p.on,
                 "write the compute actions of iterations --profile-step-start + 1 to --profile-step-end as a "
                 "Chrome trace (to --pipeline-timeline's file, else profile_trace.json)"));
  add(c.add_option("--profile-step-start", p.step_start, "the profile starts after this many iterations")
          ->capture_default_str());
  add(c.add_option("--profile-step-end", p.step_end, "the profile ends after this iteration")->capture_default_str());
  add(c.add_option("--profile-ranks", p.ranks, "the ranks the profile shows (default: every rank)"));
  add(c.add_flag("--profile-report", log.profile_report,
                 "report GEMM throughput, memory, communication and the data loader's waits at the end"));
  add(c.add_option(
      "--pipeline-timeline", log.pipeline_timeline,
      "draw the last iteration on every rank: its F, B, I and W actions, sends and receives, collectives and "
      "bubbles, as an SVG picture (a name ending in .svg) or else a Chrome trace (chrome://tracing, Perfetto); "
      "with --profile, the profile's iterations instead"));
}

std::vector<std::string> LoggingFlags::resolve(LogOptions& log) const {
  if (log.profile.on && !log.pipeline_timeline.empty()) {
    log.profile.path = log.pipeline_timeline;
    log.pipeline_timeline.clear();
  }
  std::vector<std::string> notes;
  std::vector<std::string> wandb;
  for (const CLI::Option* option : wandb_)
    if (option->count() > 0) wandb.push_back(option->get_name());
  if (!wandb.empty()) {
    std::vector<std::string> instead;
    if (!log.tensorboard.dir.empty()) instead.push_back("--tensorboard-dir " + log.tensorboard.dir);
    if (!log.json.empty()) instead.push_back("--log-json " + log.json);
    notes.push_back(fmt::format("{}: W&B is not reachable from tessel; the metrics go to {}", fmt::join(wandb, ", "),
                                instead.empty() ? std::string("the log lines only (give --tensorboard-dir or --log-json)")
                                                : fmt::format("{}", fmt::join(instead, " and "))));
  }
  return notes;
}

}  // namespace tessel
