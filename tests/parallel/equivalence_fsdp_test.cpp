// The equivalence suite's fully sharded layouts (the test itself: equivalence_test.cpp): every
// --data-parallel-sharding-strategy at DP 2 and DP 4 (an odd parameter count at DP 4: the last
// rank's slices shorter), ZeRO-2 and ZeRO-3 with TP + sequence parallel, CP, EP on a MoE model,
// PP under every schedule (units kept whole over the microbatches, torchtitan's default there,
// and freed after each forward), PP × VPP × TP × DP, recompute, the tied embedding's copy on the
// last stage (gpt2) and on the V's first rank (ZB-V, DualPipeV), and the Qwen3-Next hybrid with
// MTP — each against one process.
#include "parallel/equivalence.h"

namespace tessel::equivalence {
namespace {

#define TESSEL_FSDP " --use-megatron-fsdp --data-parallel-sharding-strategy "
#define TESSEL_ZERO2 TESSEL_FSDP "optim_grads"
#define TESSEL_ZERO3 TESSEL_FSDP "optim_grads_params"

// Both architectures: gpt2's tied embedding under PP is a unit's read (one stage) or an
// embedding-group sum of two units' slices (two stages, or the V's first rank alone).
const Layout kFsdpLayouts[] = {
    {"fsdp_zero3_dp2", 2, TESSEL_ZERO3},
    {"fsdp_zero3_dp4_odd", 4, TESSEL_ZERO3, true},
    {"fsdp_zero3_dp2_no_reshard", 2, TESSEL_ZERO3 " --fsdp-reshard-after-forward never"},
    {"fsdp_zero3_pp2_dp2", 4, TESSEL_ZERO3 " --pp 2", false, 4},
    {"fsdp_zero3_pp2_dp2_reshard", 4, TESSEL_ZERO3 " --pp 2 --fsdp-reshard-after-forward always", false, 4},
    {"fsdp_zero3_pp2_dp2_zbv", 4, TESSEL_ZERO3 " --pp 2 --schedule zb-v", false, 4},
    {"fsdp_zero3_pp2_dp2_dualpipev", 4, TESSEL_ZERO3 " --pp 2 --schedule dualpipev --micro-batch-size 1", false, 4},
    {"fsdp_zero2_pp2_dp2", 4, TESSEL_ZERO2 " --pp 2", false, 4},
};

INSTANTIATE_TEST_SUITE_P(Fsdp, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2", "llama"), ::testing::ValuesIn(kFsdpLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

const Layout kFsdpLlamaLayouts[] = {
    {"fsdp_no_shard_dp2", 2, TESSEL_FSDP "no_shard"},
    {"fsdp_no_shard_dp4", 4, TESSEL_FSDP "no_shard"},
    {"fsdp_optim_dp2", 2, TESSEL_FSDP "optim"},
    {"fsdp_optim_dp4", 4, TESSEL_FSDP "optim", true},
    {"fsdp_zero2_dp2", 2, TESSEL_ZERO2},
    {"fsdp_zero2_dp4_odd", 4, TESSEL_ZERO2, true},
    {"fsdp_zero3_dp4", 4, TESSEL_ZERO3},
    {"fsdp_torch_fsdp2_dp2", 2, " --use-torch-fsdp2"},
    {"fsdp_torch_fsdp2_no_reshard_dp2", 2, " --use-torch-fsdp2 --torch-fsdp2-no-reshard-after-forward"},
    {"fsdp_zero2_tp2_sp_dp2", 4, TESSEL_ZERO2 " --tp 2 --sequence-parallel"},
    {"fsdp_zero3_tp2_sp_dp2", 4, TESSEL_ZERO3 " --tp 2 --sequence-parallel"},
    {"fsdp_zero2_cp2_dp2", 4, TESSEL_ZERO2 " --cp 2"},
    {"fsdp_zero3_cp2_dp2", 4, TESSEL_ZERO3 " --cp 2"},
    {"fsdp_zero3_pp2_dp2_interleaved", 4, TESSEL_ZERO3 " --pp 2 --vpp 2", false, 4},
    {"fsdp_zero2_pp2_dp2_interleaved", 4, TESSEL_ZERO2 " --pp 2 --vpp 2", false, 4},
    {"fsdp_zero2_pp2_dp2_zbh1", 4, TESSEL_ZERO2 " --pp 2 --schedule zb-h1", false, 4},
    {"fsdp_zero2_pp2_dp2_zbv", 4, TESSEL_ZERO2 " --pp 2 --schedule zb-v", false, 4},
    {"fsdp_zero2_pp2_dp2_dualpipev", 4, TESSEL_ZERO2 " --pp 2 --schedule dualpipev --micro-batch-size 1", false, 4},
    {"fsdp_zero2_pp2_vpp2_tp2_dp2", 8, TESSEL_ZERO2 " --pp 2 --vpp 2 --tp 2 --sequence-parallel", false, 4},
    {"fsdp_zero3_pp2_dp2_zbh1", 4, TESSEL_ZERO3 " --pp 2 --schedule zb-h1", false, 4},
    {"fsdp_zero3_pp2_vpp2_tp2_dp2", 8, TESSEL_ZERO3 " --pp 2 --vpp 2 --tp 2 --sequence-parallel", false, 4},
    {"fsdp_zero3_dp2_recompute_full", 2,
     TESSEL_ZERO3 " --recompute-granularity full --recompute-method uniform --recompute-num-layers 2"},
};

INSTANTIATE_TEST_SUITE_P(FsdpLlama, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kFsdpLlamaLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

// Experts sharded over expert-DP (EP 2 of 4 ranks: expert-DP 2), and the hybrid with MTP: Gated
// DeltaNet, gated attention, the MoE block with its shared expert and router, the MTP layer
// reading the embedding and the LM head of other units.
const Layout kFsdpMoeLayouts[] = {
    {"fsdp_zero2_moe_ep2_dp4", 4, TESSEL_ZERO2 " --ep 2", false, 2, TESSEL_MOE_FLAGS},
    {"fsdp_zero3_moe_ep2_dp4", 4, TESSEL_ZERO3 " --ep 2", false, 2, TESSEL_MOE_FLAGS},
    {"fsdp_zero3_mtp_gdn_pp2_dp2", 4, TESSEL_ZERO3 " --pp 2", false, 4,
     TESSEL_GDN_FLAGS "--moe-aux-loss-coeff 0.01 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.3"},
    {"fsdp_zero3_mtp_gdn_dp2", 2, TESSEL_ZERO3, false, 4,
     TESSEL_GDN_FLAGS "--moe-aux-loss-coeff 0.01 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.3"},
};

INSTANTIATE_TEST_SUITE_P(FsdpMoe, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kFsdpMoeLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

}  // namespace
}  // namespace tessel::equivalence
