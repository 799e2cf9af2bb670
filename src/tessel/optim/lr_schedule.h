// The learning-rate schedule, as Megatron-LM's OptimizerParamScheduler computes it: in samples
// consumed ("steps"), linear warmup from --lr-warmup-init, then constant, linear or cosine decay
// to --min-lr. Iteration- and sample-based flags both become samples: --lr-warmup-iters N is
// N·G samples, --lr-decay-iters N is N·G (G the global batch), --lr-warmup-fraction f is
// f × the decay samples. The scheduler advances after each successful optimizer step, so the
// step after k successful ones runs at the rate of k·G samples: the first at the warmup's start.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessel {

enum class LrDecayStyle : uint8_t { Constant, Linear, Cosine };

LrDecayStyle parse_lr_decay_style(std::string_view name);  // "constant" | "linear" | "cosine"
std::string lr_decay_style_name(LrDecayStyle style);

// Named after the flags. Iteration- or sample-based, as Megatron: a run gives --train-iters (and
// the _iters flags) or --train-samples (and the _samples flags), not both; 0 is "not given",
// but for the decay's lengths, which Megatron asserts positive when given (nullopt: not given).
struct LrScheduleConfig {
  float lr = 0.0f;           // --lr: the peak
  float min_lr = 0.0f;       // --min-lr
  float warmup_init = 0.0f;  // --lr-warmup-init: where warmup starts
  int64_t warmup_iters = 0;      // --lr-warmup-iters
  std::optional<int64_t> decay_iters;    // --lr-decay-iters (not given: --train-iters)
  int64_t train_iters = 0;       // --train-iters, or --train-samples / G
  int64_t warmup_samples = 0;    // --lr-warmup-samples
  std::optional<int64_t> decay_samples;  // --lr-decay-samples (not given: --train-samples)
  int64_t train_samples = 0;     // --train-samples
  // --lr-warmup-fraction of the decay. Not a sentinel such as -1: a negative or NaN fraction given
  // would read as "not given" and train without the warmup asked for.
  std::optional<double> warmup_fraction;
  LrDecayStyle style = LrDecayStyle::Linear;  // --lr-decay-style
  int64_t global_batch = 1;      // samples per iteration (--global-batch-size): the schedule's unit
  // A resumed save's lengths in samples, under --use-checkpoint-opt_param-scheduler: they stand
  // for what the flags above give (< 0: the flags').
  int64_t saved_decay_steps = -1;
  double saved_warmup_steps = -1;

  bool sample_based() const { return train_samples > 0; }
  // The run's iterations: --train-iters, or --train-samples / G (Megatron's update_train_iters
  // without batch ramp-up).
  int64_t iterations() const;
  // Megatron's lr_decay_steps and lr_warmup_steps, in samples.
  int64_t decay_steps() const;
  double warmup_steps() const;
};

// Every rule the config breaks, one message each naming the flags (Megatron's assertions among
// them: iteration- and sample-based flags not mixed, one warmup length); empty when valid.
std::vector<std::string> lr_schedule_violations(const LrScheduleConfig& config);

// The schedule of Megatron's --decoupled-lr parameter group (the input embedding and the output
// layer): `config`'s, peaking at `lr` and ending at `min_lr` (--min-lr when not given), as
// OptimizerParamScheduler.get_lr reads a group's max_lr and min_lr.
LrScheduleConfig decoupled_schedule(const LrScheduleConfig& config, float lr, std::optional<float> min_lr);
// Every rule --decoupled-lr and --decoupled-min-lr break with `config` (the main schedule's), one
// message each naming the flags: the rules of --lr and --min-lr. Empty without --decoupled-lr.
std::vector<std::string> decoupled_lr_violations(const LrScheduleConfig& config, std::optional<float> lr,
                                                 std::optional<float> min_lr);

class LrSchedule {
 public:
  // Throws tessel::Error listing what is wrong with the config.
  explicit LrSchedule(const LrScheduleConfig& config);

  // The rate after `samples` consumed (OptimizerParamScheduler.get_lr at num_steps = samples):
  //   samples ≤ warmup (warmup > 0): init + (lr − init) · samples / warmup
  //   constant:                      lr
  //   samples > decay:               min_lr
  //   otherwise, ratio = (samples − warmup) / (decay − warmup),
  //     coeff = 1 − ratio (linear) or ½·(cos(π·ratio) + 1) (cosine),
  //     min_lr + coeff · (lr − min_lr).
  float at_samples(int64_t samples) const;
  // The rate of the optimizer step taken after `steps` successful ones (a skipped step does not
  // advance the scheduler): at_samples(steps · G).
  float for_step(int64_t steps) const { return at_samples(steps * config_.global_batch); }

 private:
  LrScheduleConfig config_;
  int64_t decay_;
  double warmup_;
};

}  // namespace tessel
