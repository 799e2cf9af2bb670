// The equivalence suite's case description and its fixture (the test itself and the layouts of
// the dense models are in equivalence_test.cpp; the MoE and Qwen3-Next layouts in
// equivalence_hybrid_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <tuple>

namespace tessel::equivalence {

struct Layout {
  const char* name;
  int ranks;
  const char* flags;
  bool odd_model = false;  // a parameter count that no DP size divides evenly
  int layers = 2;
  const char* model_extra = "";  // flags for the reference too (the MoE settings, the batch)
  bool real_data = false;  // the blend of preprocessed datasets (real_data_flags), with evaluation
  double weight_tolerance = 1e-4;  // the final weights' largest difference
};

void PrintTo(const Layout& layout, std::ostream* os);

// Parameters: the architecture (--arch) and the layout.
class Equivalence : public ::testing::TestWithParam<std::tuple<std::string, Layout>> {};

}  // namespace tessel::equivalence
