// The equivalence suite's cases of the training-schedule switches (the test itself:
// equivalence_test.cpp): --calculate-per-token-loss on real data with packed documents, whose
// masked end-of-document targets make the two normalisations differ, and --decoupled-lr, whose
// group (the embedding, split over TP and tied to the head across stages, and the head) steps at
// its own rate under every layout, the distributed optimizer's shards included.
#include "parallel/equivalence.h"

namespace tessel::equivalence {
namespace {

#define TESSEL_PACKED_PER_TOKEN \
  "--reset-position-ids --reset-attention-mask --eod-mask-loss --calculate-per-token-loss"

const Layout kPerTokenLayouts[] = {
    {"per_token_dp2", 2, "", false, 2, TESSEL_PACKED_PER_TOKEN, true},
    {"per_token_pp2", 2, "--pp 2", false, 4, TESSEL_PACKED_PER_TOKEN, true},
    {"per_token_cp2", 2, "--cp 2", false, 2, TESSEL_PACKED_PER_TOKEN, true},
    {"per_token_tp2_sp", 2, "--tp 2 --sequence-parallel", false, 2, TESSEL_PACKED_PER_TOKEN, true},
};

#define TESSEL_DECOUPLED "--decoupled-lr 2e-2 --decoupled-min-lr 2e-3"

const Layout kDecoupledLayouts[] = {
    {"decoupled_pp2", 2, "--pp 2", false, 4, TESSEL_DECOUPLED},
    {"decoupled_tp2_dp2_distopt", 4, "--tp 2 --use-distributed-optimizer", false, 2, TESSEL_DECOUPLED},
};

INSTANTIATE_TEST_SUITE_P(RealDataPerTokenLoss, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kPerTokenLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });
INSTANTIATE_TEST_SUITE_P(DecoupledLr, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2", "llama"), ::testing::ValuesIn(kDecoupledLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

}  // namespace
}  // namespace tessel::equivalence
