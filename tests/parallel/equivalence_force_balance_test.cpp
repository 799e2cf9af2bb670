// The equivalence suite's --moe-router-force-load-balancing cases (the test itself:
// equivalence_test.cpp). The router's random logits are keyed by (seed, layer, the token's sample
// and position, expert) (kernels/router_rows.h), so every layout routes each token as the single
// process does, where Megatron's come from its expert-parallel RNG tracker and change with the
// layout: experts over EP, rows over SP and CP, layers over PP, samples over DP, and a whole-layer
// recompute drawing them again; on the preprocessed blend, the evaluations too (Megatron routes
// them by random logits as well).
#include "parallel/equivalence.h"

namespace tessel::equivalence {
namespace {

#define TESSEL_FORCED TESSEL_MOE_FLAGS " --moe-router-force-load-balancing"

const Layout kForcedLayouts[] = {
    {"forced_balance_ep2", 2, "--ep 2", false, 2, TESSEL_FORCED},
    {"forced_balance_ep2_tp2_sp", 4, "--ep 2 --tp 2 --sequence-parallel", false, 2, TESSEL_FORCED},
    {"forced_balance_pp2", 2, "--pp 2", false, 2, TESSEL_FORCED},
    {"forced_balance_dp2", 2, "", false, 2, TESSEL_FORCED},
    {"forced_balance_cp2", 2, "--cp 2", false, 2, TESSEL_FORCED},
    {"forced_balance_ep2_recompute_moe", 2, "--ep 2 --recompute-granularity selective --recompute-modules moe",
     false, 2, TESSEL_FORCED},
};
INSTANTIATE_TEST_SUITE_P(ForcedBalance, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kForcedLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

// On the preprocessed blend (its ctest fixture builds it first: RealData*/ in tests/CMakeLists.txt).
const Layout kForcedRealDataLayouts[] = {
    {"forced_balance_eval_ep2", 2, "--ep 2", false, 2, TESSEL_FORCED, true},
};
INSTANTIATE_TEST_SUITE_P(RealDataForcedBalance, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kForcedRealDataLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

}  // namespace
}  // namespace tessel::equivalence
