// The smallest registry an optimizer test needs: a decayed weight and an undecayed bias, shared
// by the post-validation and step tests.
#pragma once

#include "tessel/core/params.h"

namespace tessel::testing {

inline ParamRegistry weight_and_bias() {
  ParamRegistry reg;
  reg.add("h.weight", {7, 9}, ParamInit::Normal, 0.5f, true);  // (7, 9)
  reg.add("h.bias", {9}, ParamInit::Normal, 0.5f, false);       // (9)
  reg.finalize();
  reg.init_values(5);
  return reg;
}

}  // namespace tessel::testing
