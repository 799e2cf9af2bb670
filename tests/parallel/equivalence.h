// The equivalence suite's case description and its fixture (the test itself and the layouts of
// the dense models are in equivalence_test.cpp; the schedules' in equivalence_schedules_test.cpp;
// the MoE and Qwen3-Next layouts in equivalence_hybrid_test.cpp; the layouts started from Hugging
// Face folders in equivalence_hf_test.cpp).
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

  // Both runs start from a Hugging Face folder of the model: `tessel export` with these flags
  // (--hf-model-type, --max-shard-size) and another seed than training's. nullptr: from tessel's
  // own initialisation.
  const char* init_from = nullptr;
  // Another run of the same ranks whose trajectory this one must follow too, within the same
  // tolerances: these flags in place of `flags` (the all-to-all run of an all-gather MoE case).
  // nullptr: none.
  const char* twin_flags = nullptr;
  // A --bf16 or --fp16 case: these precision flags (the loss scale's too) for the reference as
  // well; its final weights are held to the mixed-precision run's own distance from the same runs
  // in fp32 (expect_rounded_weights_follow) rather than elementwise within 1e-4. "": fp32.
  const char* precision = "";
};

void PrintTo(const Layout& layout, std::ostream* os);

// The model flags of the MoE and Qwen3-Next cases (equivalence_hybrid_test.cpp, equivalence_hf_test.cpp).
#define TESSEL_MOE_FLAGS \
  "--num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001"
#define TESSEL_GDN_VARIANT                                                                        \
  "--experimental-attention-variant gdn --linear-attention-freq 4 --linear-key-head-dim 16 "      \
  "--linear-value-head-dim 16 --attention-output-gate --qk-layernorm --apply-layernorm-1p "       \
  "--rotary-percent 0.5 "
#define TESSEL_GDN_MIXERS TESSEL_GDN_VARIANT "--linear-num-key-heads 2 --linear-num-value-heads 4 "
#define TESSEL_GDN_MOE                                                                            \
  "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32 "                                 \
  "--moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate "
#define TESSEL_GDN_FLAGS TESSEL_GDN_MIXERS TESSEL_GDN_MOE

// Parameters: the architecture (--arch) and the layout.
class Equivalence : public ::testing::TestWithParam<std::tuple<std::string, Layout>> {};

}  // namespace tessel::equivalence
