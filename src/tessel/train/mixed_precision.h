// A run's mixed precision as Megatron-LM's argument validation settles it: the loss scaler
// (optim/loss_scaler.h) that --fp16, --bf16, the distributed optimizer and the loss-scale flags
// give, and what that changes of the other flags.
#pragma once

#include <string>
#include <vector>

#include "tessel/kernels/fp8_scaling.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/config.h"
#include "tessel/optim/loss_scaler.h"
#include "tessel/train/options.h"

namespace tessel {

// The run's loss scaler.
LossScaling run_loss_scaling(const TrainOptions& o);

// The FP8 recipe --fp8-format and --fp8-recipe name.
Fp8Recipe fp8_recipe(const Fp8Options& o);

// The run's kernel table: its device's in its precision, with FP8 linear layers under --fp8-format
// (kernels/fp8_kernels.h).
const Kernels& run_kernels(const TrainOptions& o);

// Every rule the precision, loss-scale and FP8 flags break against the model and the layout, one
// message each.
std::vector<std::string> mixed_precision_violations(const ModelConfig& model, const TrainOptions& o);

// As Megatron's validate_args: a dynamic loss scale turns --check-for-nan-in-loss-and-grad off (a
// non-finite gradient is the scaler's signal, its step skipped); returns what it changed and the
// flags that have no effect, one note each.
std::vector<std::string> settle_mixed_precision(TrainOptions& o);

}  // namespace tessel
