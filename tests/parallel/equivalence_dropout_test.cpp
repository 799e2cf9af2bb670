// The equivalence suite's dropout cases (the test itself: equivalence_test.cpp). With Megatron's
// default --hidden-dropout 0.1 and --attention-dropout 0.1 the masks are keyed by global
// coordinates (kernels/dropout.h), so every layout draws the single process's masks: features
// split over TP, rows over SP and CP (the load-balanced chunks), samples over DP and
// microbatches, stages over PP (1F1B and interleaved), recompute drawing the same masks again,
// experts over EP; gpt2, llama, and the Qwen3-Next hybrid (Gated DeltaNet outputs, MoE outputs).
#include "parallel/equivalence.h"

namespace tessel::equivalence {
namespace {

#define TESSEL_DROPOUT "--hidden-dropout 0.1 --attention-dropout 0.1 "

const Layout kDropoutLayouts[] = {
    {"dropout_dp2", 2, "", false, 2, TESSEL_DROPOUT},
    {"dropout_dp2_mb1", 2, "--micro-batch-size 1", false, 2, TESSEL_DROPOUT},
    {"dropout_tp2_sp", 2, "--tp 2 --sequence-parallel", false, 2, TESSEL_DROPOUT},
    {"dropout_pp2", 2, "--pp 2", false, 2, TESSEL_DROPOUT},
    {"dropout_pp2_vpp2", 2, "--pp 2 --vpp 2", false, 4, TESSEL_DROPOUT},
    {"dropout_cp2", 2, "--cp 2", false, 2, TESSEL_DROPOUT},
    {"dropout_cp2_tp2_sp", 4, "--cp 2 --tp 2 --sequence-parallel", false, 2, TESSEL_DROPOUT},
    {"dropout_pp2_recompute_full", 2,
     "--pp 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1", false, 4,
     TESSEL_DROPOUT},
    {"dropout_recompute_core_attn", 1, "--recompute-granularity selective --recompute-modules core_attn layernorm",
     false, 2, TESSEL_DROPOUT},
};
INSTANTIATE_TEST_SUITE_P(Dropout, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2", "llama"), ::testing::ValuesIn(kDropoutLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

// MoE outputs (EP, and EP with TP + SP) and the hybrid's Gated DeltaNet and gated attention layers.
const Layout kDropoutHybridLayouts[] = {
    {"dropout_moe_ep2", 2, "--ep 2", false, 2, TESSEL_MOE_FLAGS " " TESSEL_DROPOUT},
    {"dropout_moe_ep2_tp2_sp", 4, "--ep 2 --tp 2 --sequence-parallel", false, 2, TESSEL_MOE_FLAGS " " TESSEL_DROPOUT},
    {"dropout_gdn_tp2_sp_pp2", 4, "--tp 2 --sequence-parallel --pp 2", false, 4,
     TESSEL_GDN_FLAGS "--moe-aux-loss-coeff 0.01 " TESSEL_DROPOUT},
    {"dropout_gdn_cp2", 2, "--cp 2", false, 4, TESSEL_GDN_FLAGS "--moe-aux-loss-coeff 0.01 " TESSEL_DROPOUT},
};
INSTANTIATE_TEST_SUITE_P(DropoutHybrid, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kDropoutHybridLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

}  // namespace
}  // namespace tessel::equivalence
