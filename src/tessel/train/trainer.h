// The training loop: one iteration = zero gradients, forward + backward over every microbatch of
// this rank's share of the global batch, gradient norm and clipping, AdamW step, logging.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/model/config.h"
#include "tessel/train/log.h"
#include "tessel/train/options.h"

namespace tessel {

class ProcessGroups;

// Trains on this rank's part of the layout and returns every iteration's statistics (the same
// on every rank). `groups` holds this rank's communicators (ProcessGroups::single() alone).
std::vector<IterationStats> train(const ModelConfig& model, const TrainOptions& options,
                                  ProcessGroups& groups);

}  // namespace tessel
