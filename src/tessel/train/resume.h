// Where a resumed run goes on, as Megatron's checkpoints record it: the samples consumed (its
// args.consumed_train_samples and consumed_valid_samples) and the learning-rate schedule
// (OptimizerParamScheduler.state_dict: max_lr, min_lr, lr_warmup_steps, lr_decay_steps,
// lr_decay_style, start_wd, end_wd, wd_incr_style), both in the save's run_config.
//
// On resume the iterations after the save start at its consumed samples, so a changed
// --global-batch-size (or step schedule) neither replays nor skips a sample. A schedule that
// differs from the save's is refused naming the flag, unless --override-opt_param-scheduler (the
// flags' values, stated) or --use-checkpoint-opt_param-scheduler (the save's, stated), as
// Megatron's _check_and_set. Adam's --adam-beta1/2 and --adam-eps, which Megatron restores with
// the optimizer's state, are refused changed while the optimizer is resumed. Other data
// (--data-path, --split, ...) or another --seed (the datasets' shuffle) goes on from the consumed
// samples as Megatron's does, stated. A save from before these fields consumed what its own
// global batch (run_config's) gives, and its schedule is taken to be the flags' (stated).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

#include "tessel/train/plan.h"

namespace tessel {

// The run_config fields of the save of iteration `iteration`: the samples consumed by then and
// the schedule's parameters, under Megatron's names, and the data flags.
nlohmann::json resume_state(const TrainPlan& plan, int64_t iteration);

// Resolves `plan` against --load's newest save (nothing without one): its tokenizer must be the
// save's (under --finetune too, which takes nothing else); its batches start after the save at
// its consumed samples; its schedule is checked against the
// save's (only where the optimizer is resumed: not under --no-load-optim, nor from a save without
// Adam's state, whose schedule starts again). What changed goes to plan.notes. Throws Error for
// another tokenizer, ConfigError naming the flag that differs, or both override flags given.
void resume_from_save(TrainPlan& plan);

}  // namespace tessel
