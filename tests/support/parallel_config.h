// A ParallelConfig from its sizes, for the layout and process-group tests.
#pragma once

#include <string>

#include "tessel/parallel/layout.h"

namespace tessel::testing {

inline ParallelConfig parallel_config(int world, int tp, int cp, int pp, int ep, int etp,
                                      const std::string& order) {
  ParallelConfig config;
  config.world = world;
  config.tp = tp;
  config.cp = cp;
  config.pp = pp;
  config.ep = ep;
  config.etp = etp;
  config.order = order;
  return config;
}

}  // namespace tessel::testing
