// Schedule configurations and their simulation with given costs, for the schedule tests.
#pragma once

#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/simulate.h"

namespace tessel::testing {

inline tessel::ScheduleConfig config(tessel::ScheduleKind kind, int p, int m, int v = 1, int g = 0) {
  tessel::ScheduleConfig c;
  c.kind = kind;
  c.pipeline_size = p;
  c.microbatches = m;
  c.virtual_stages = v;
  c.microbatch_group = g;
  return c;
}

inline tessel::Simulation run(const tessel::ScheduleConfig& c, double f, double b) {
  tessel::SimulationCosts costs;
  costs.forward = f;
  costs.backward = b;
  return tessel::simulate(tessel::lower(tessel::generate_schedule(c), c), c, costs);
}

}  // namespace tessel::testing
