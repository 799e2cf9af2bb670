// The learning-rate schedule, with the semantics of Megatron-LM's OptimizerParamScheduler:
// linear warmup from 0, then constant, linear or cosine decay to min_lr by decay_iters.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessel {

enum class LrDecayStyle : uint8_t { Constant, Linear, Cosine };

LrDecayStyle parse_lr_decay_style(std::string_view name);  // "constant" | "linear" | "cosine"
std::string lr_decay_style_name(LrDecayStyle style);

// Named after the flags --lr, --min-lr, --lr-warmup-iters, --lr-decay-iters, --train-iters,
// --lr-decay-style (Megatron's default style is linear).
struct LrScheduleConfig {
  float lr = 0.0f;
  float min_lr = 0.0f;
  int64_t warmup_iters = 0;
  int64_t decay_iters = 0;  // 0: decay over all of train_iters
  int64_t train_iters = 0;
  LrDecayStyle style = LrDecayStyle::Linear;

  int64_t decay_over() const { return decay_iters > 0 ? decay_iters : train_iters; }
};

// Every rule the config breaks (rates and iteration counts not negative, min_lr ≤ lr, something
// to decay over), one message each naming the flag; empty when valid.
std::vector<std::string> lr_schedule_violations(const LrScheduleConfig& config);

class LrSchedule {
 public:
  // Throws tessel::Error listing what is wrong with the config.
  explicit LrSchedule(const LrScheduleConfig& config);

  // The learning rate of iteration `it`, counted from 1 (the iteration being run):
  //   it ≤ warmup (warmup > 0): lr · it / warmup
  //   constant:                 lr
  //   otherwise, ratio = (it − warmup) / (decay − warmup) clamped to [0, 1],
  //     coeff = 1 − ratio (linear) or ½·(cos(π·ratio) + 1) (cosine),
  //     min_lr + coeff · (lr − min_lr).
  float at(int64_t it) const;

  int64_t decay_iters() const { return decay_iters_; }

 private:
  LrScheduleConfig config_;
  int64_t decay_iters_;
};

}  // namespace tessel
