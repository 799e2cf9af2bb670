// --profile-report's line on the model's state: every rank's bytes of parameters, gradients,
// Adam's moments and (fully sharded) the units gathered whole at once, gathered to rank 0 — what
// each sharding strategy (parallel/fully_sharded.h) saves, measured where the run holds it.
#pragma once

#include "tessel/parallel/grad_sync.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/log.h"

namespace tessel {

// Collective over the world.
void report_model_state(TrainLog& log, ProcessGroups& groups, GradSync& sync);

}  // namespace tessel
