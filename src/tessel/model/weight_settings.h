// Which of a model's settings its weights hold. The run settings (ModelField::run_setting:
// dropout, --init-method-std, the sequence length, the MoE losses) are not part of the weights: a
// run that reads weights (--init-from, --load, --finetune) may set them anew, as Megatron's
// resume and finetuning allow. Every other setting must agree with the weights' model, and each
// that does not is named by its flag, all at once.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "tessel/model/config.h"

namespace tessel {

// Each weight setting (among the fields `compared` picks by their index in model_fields(), every
// one when empty) on which `asked` differs from `has`, the model of the weights in `source`:
// "--hidden-size 64 but SOURCE has 32". Sizes are compared written out (explicit_sizes).
std::vector<std::string> weight_setting_differences(const ModelConfig& has, const ModelConfig& asked,
                                                    const std::string& source,
                                                    const std::function<bool(size_t)>& compared = {});

// `cfg` with its sizes written out and its run settings taken from `from`.
ModelConfig with_run_settings_of(const ModelConfig& cfg, const ModelConfig& from);

}  // namespace tessel
