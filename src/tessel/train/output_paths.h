// The files and folders one run writes (--log-json, --pipeline-timeline, --profile's trace,
// --save, --save-hf, --tensorboard-dir), checked before it starts against each other and against
// every file it reads (the data's .bin/.idx, --load, --init-from, --model-config, the tokenizer's
// files) by core/path_clashes.h: a --log-json named as --save's tracker, as the data's .bin or as
// a rank file of the save resumed from was written over it, exit 0.
#pragma once

#include <string>
#include <vector>

#include "tessel/train/options.h"

namespace tessel {

// Every clash, one message each, naming both flags and the path.
std::vector<std::string> output_path_violations(const TrainOptions& options);

}  // namespace tessel
