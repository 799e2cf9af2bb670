// `tessel train`'s rules for a run the planner describes (plan/estimate.h's TrainRules): the
// options the trainer would be given for it, checked by plan_training — its one list of every
// rule — with one message per broken rule. The planner sits below train in the layers, so
// `tessel plan` and the planner's tests hand this function to it.
#pragma once

#include <string>
#include <vector>

#include "tessel/model/config.h"
#include "tessel/plan/estimate.h"

namespace tessel {

std::vector<std::string> planned_run_violations(const ModelConfig& sizes, const PlanRun& run);

}  // namespace tessel
