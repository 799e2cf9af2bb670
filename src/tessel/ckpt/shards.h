// Whole tensors from the shards that ranks hold (the parameter's ShardSpec says which slice).
#pragma once

#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/core/params.h"

namespace tessel {

// A parameter's whole global tensor, on the host, from the shards of the group it is split over
// (its own values when it is not split). Collective over `group` for a split parameter.
std::vector<float> gather_global(const ParamRegistry& params, const Param& param, Comm& group);

// This rank's slice of a parameter from its whole global tensor: local (p.numel()) from global
// (the global shape's elements); padding (a split vocabulary's extra rows) comes out 0.
void take_local_slice(const Param& p, const float* global, float* local);

// Sets parameter p (of `registry`) to its slice of the whole global tensor.
void set_from_global(ParamRegistry& registry, Param& p, const float* global);

}  // namespace tessel
