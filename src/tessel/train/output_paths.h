// The files and folders one run writes (--log-json, --pipeline-timeline, --profile's trace,
// --save, --save-hf, --tensorboard-dir), checked against each other before it starts: two flags
// naming one file, or a file inside a folder the run fills, would have one output overwrite
// another with every write succeeding (a --log-json named as --save's tracker file was replaced
// by it, exit 0).
#pragma once

#include <string>
#include <vector>

#include "tessel/train/options.h"

namespace tessel {

// Every clash, one message each, naming both flags and the path.
std::vector<std::string> output_path_violations(const TrainOptions& options);

}  // namespace tessel
