// The picture of a simulated pipeline schedule (`tessel schedule --svg`), on the shared canvas
// (core/svg.h): one row per rank, one box per compute action (F / B / I / W, its microbatch
// counted from 1 inside, later chunks lighter), each idle gap hatched as bubble, an arrow for
// every activation or gradient a rank sends to another, a time axis, a legend and the bubble.
#pragma once

#include <string>

#include "tessel/pipeline/simulate.h"

namespace tessel {

// Boxes are wide enough for their labels at any size (PP 8 × VPP 2 × 32 microbatches widens the
// time unit rather than spilling two-digit labels over their boxes); `sim` must be ok().
std::string schedule_svg(const Simulation& sim, const ScheduleConfig& config, const std::string& title);

}  // namespace tessel
