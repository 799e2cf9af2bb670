// The equivalence suite's Mixture-of-Experts and Qwen3-Next layouts (the test itself:
// equivalence_test.cpp).
#include "parallel/equivalence.h"

namespace tessel::equivalence {
namespace {

// Mixture of Experts (Llama-style experts): 8 experts, top-2, load-balancing and z losses, split
// over EP — with DP, with PP, every other layer dense, a shared expert, a capacity that drops,
// with TP (sequence parallel) and whole experts (ETP 1) or experts split over TP (ETP 2).
const char* kMoe = TESSEL_MOE_FLAGS;
const char* kMoeShared = TESSEL_MOE_FLAGS " --moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate";
const char* kMoeCapacity =
    "--num-experts 8 --moe-router-topk 2 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff "
    "0.01";
const char* kMoeCapacityPadded =
    "--num-experts 8 --moe-router-topk 2 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff "
    "0.01 "
    "--moe-pad-expert-input-to-capacity";

#define TESSEL_ALLGATHER " --moe-token-dispatcher-type allgather"
#define TESSEL_ALLTOALL " --moe-token-dispatcher-type alltoall"

const Layout kMoeLayouts[] = {
    {"moe_ep2", 2, "--ep 2", false, 2, kMoe},
    {"moe_ep4", 4, "--ep 4", false, 2, kMoe},
    {"moe_ep2_dp2", 4, "--ep 2", false, 2, kMoe},
    {"moe_ep2_pp2", 4, "--ep 2 --pp 2", false, 2, kMoe},
    {"moe_ep2_distopt", 2, "--ep 2 --use-distributed-optimizer", false, 2, kMoe},
    {"moe_mixed_ep2", 2, "--ep 2", false, 4,
     "--num-experts 8 --moe-router-topk 2 --moe-layer-freq [1,0,1,0] --moe-aux-loss-coeff 0.01"},
    {"moe_shared_ep2", 2, "--ep 2", false, 2,
     "--num-experts 8 --moe-router-topk 2 --moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate "
     "--moe-aux-loss-coeff 0.01"},
    {"moe_capacity_ep2", 2, "--ep 2", false, 2, kMoeCapacity},
    // The rows split over TP (sequence parallel) or CP: the drop still sees the whole microbatch.
    {"moe_capacity_padded_ep2_tp2", 4, "--ep 2 --tp 2 --sequence-parallel", false, 2,
     kMoeCapacityPadded},
    {"moe_capacity_cp2", 2, "--cp 2", false, 2, kMoeCapacity},
    {"moe_ep2_tp2_etp1", 4, "--ep 2 --tp 2 --sequence-parallel --etp 1", false, 2, kMoe},
    {"moe_shared_ep2_tp2_etp2", 4, "--ep 2 --tp 2 --sequence-parallel --etp 2", false, 2, kMoeShared},
    {"moe_ep2_tp2_etp2_distopt", 4,
     "--ep 2 --tp 2 --sequence-parallel --etp 2 --use-distributed-optimizer", false, 2, kMoe},
    // Every axis at once: 8 ranks = TP2 × PP2 × DP2, EP2 carved out of DP, experts split over ETP.
    {"moe_shared_pp2_ep2_tp2", 8, "--pp 2 --ep 2 --tp 2 --sequence-parallel", false, 2, kMoeShared},
    // Under ZB-V (EP2 × PP2, the V's four model chunks a layer each), and recomputed: the whole
    // layer under full recompute; its experts' activations, the shared expert and the norms
    // selectively.
    {"moe_ep2_pp2_zbv", 4, "--ep 2 --pp 2 --schedule zb-v", false, 4, kMoe},
    {"moe_ep2_pp2_zbv_recompute_uniform", 4, "--ep 2 --pp 2 --schedule zb-v --recompute-granularity full "
     "--recompute-method uniform --recompute-num-layers 1", false, 4, kMoeShared},
    {"moe_shared_ep2_recompute_selective", 2, "--ep 2 --recompute-granularity selective --recompute-modules "
     "moe_act shared_experts layernorm core_attn", false, 2, kMoeShared},
    {"moe_ep2_recompute_moe", 2, "--ep 2 --recompute-granularity selective --recompute-modules moe", false, 2,
     kMoe},
    // Megatron's all-gather dispatcher: every rank's tokens gathered over ETP × EP, each rank's
    // experts' weighted outputs reduce-scattered back. Each case also follows the all-to-all run
    // of its layout: under EP, with DP, with TP (SP) and experts split over ETP 2 or whole (ETP 1,
    // with a shared expert), with PP, and with a capacity that drops (the all-to-all pads).
    {.name = "moe_allgather_ep2", .ranks = 2, .flags = "--ep 2" TESSEL_ALLGATHER, .model_extra = kMoe,
     .twin_flags = "--ep 2" TESSEL_ALLTOALL},
    {.name = "moe_allgather_ep2_dp2", .ranks = 4, .flags = "--ep 2" TESSEL_ALLGATHER, .model_extra = kMoe,
     .twin_flags = "--ep 2" TESSEL_ALLTOALL},
    {.name = "moe_allgather_ep2_tp2_sp", .ranks = 4, .flags = "--ep 2 --tp 2 --sequence-parallel" TESSEL_ALLGATHER,
     .model_extra = kMoe, .twin_flags = "--ep 2 --tp 2 --sequence-parallel" TESSEL_ALLTOALL},
    {.name = "moe_allgather_shared_ep2_tp2_sp_etp1", .ranks = 4,
     .flags = "--ep 2 --tp 2 --sequence-parallel --etp 1" TESSEL_ALLGATHER, .model_extra = kMoeShared,
     .twin_flags = "--ep 2 --tp 2 --sequence-parallel --etp 1" TESSEL_ALLTOALL},
    {.name = "moe_allgather_ep2_pp2", .ranks = 4, .flags = "--ep 2 --pp 2" TESSEL_ALLGATHER, .model_extra = kMoe,
     .twin_flags = "--ep 2 --pp 2" TESSEL_ALLTOALL},
    {.name = "moe_allgather_capacity_padded_ep2", .ranks = 2, .flags = "--ep 2" TESSEL_ALLGATHER,
     .model_extra = kMoeCapacityPadded, .twin_flags = "--ep 2" TESSEL_ALLTOALL},
};

INSTANTIATE_TEST_SUITE_P(Moe, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kMoeLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

// Qwen3-Next's hybrid (llama's 8 heads, 4 query groups, hidden 64): three Gated DeltaNet layers
// then one gated attention layer (--linear-attention-freq 4; the layer type follows the global
// layer index, so each pipeline split puts different kinds of layers on each stage), QK-norm,
// zero-centred norms, partial RoPE, 8 experts top-2 in every layer with the sigmoid-gated shared
// expert and the aux loss. Under DP (the distributed optimizer), PP (1F1B, interleaved, uneven,
// ZB-H1, ZB-V, DualPipeV), EP (with DP and PP), TP with SP (with DP, PP, EP, ZB-V), full and
// selective recompute, and packed documents (the conv history and the delta-rule state restart
// at each eod) over PP × DP, EP and TP.
const char* kGdn = TESSEL_GDN_FLAGS "--moe-aux-loss-coeff 0.01";
// Megatron's aux loss balances each microbatch's tokens, so a layout of another microbatch size
// trains another objective: the case of microbatch 1 (the reference's is 2) runs without it.
const char* kGdnNoAux = TESSEL_GDN_FLAGS;
// Dense FFNs: TP without sequence parallel (which MoE layers need), where the gated norm's
// replicated gain is summed over TP because each rank normalises only its own value heads.
const char* kGdnDense = TESSEL_GDN_MIXERS;
// The seed's situation in small: GDN heads that split over TP 8 (8 key, 8 value) while the
// attention layer's 4 query groups are replicated on two ranks each.
const char* kGdnWide = TESSEL_GDN_VARIANT "--linear-num-key-heads 8 --linear-num-value-heads 8 " TESSEL_GDN_MOE
                       "--moe-aux-loss-coeff 0.01";
const char* kGdnPacked =
    TESSEL_GDN_FLAGS "--moe-aux-loss-coeff 0.01 --reset-position-ids --reset-attention-mask --eod-mask-loss";

const Layout kGdnLayouts[] = {
    {"gdn_dp2", 2, "", false, 4, kGdn},
    {"gdn_dp2_distopt", 2, "--use-distributed-optimizer", false, 4, kGdn},
    {"gdn_pp2", 2, "--pp 2", false, 4, kGdn},
    {"gdn_pp4", 4, "--pp 4", false, 4, kGdn},
    {"gdn_pp2_vpp2", 2, "--pp 2 --vpp 2", false, 8, kGdn},
    {"gdn_pp2_uneven_7", 2, "--pp 2 --decoder-first-pipeline-num-layers 3", false, 7, kGdn},
    {"gdn_pp2_zbh1", 2, "--pp 2 --schedule zb-h1", false, 4, kGdn},
    {"gdn_pp2_zbv", 2, "--pp 2 --schedule zb-v", false, 4, kGdn},
    {"gdn_pp2_dualpipev", 2, "--pp 2 --schedule dualpipev --micro-batch-size 1", false, 4, kGdnNoAux},
    {"gdn_ep2", 2, "--ep 2", false, 4, kGdn},
    {"gdn_ep2_dp2_distopt", 4, "--ep 2 --use-distributed-optimizer", false, 4, kGdn},
    {"gdn_ep2_pp2", 4, "--ep 2 --pp 2", false, 4, kGdn},
    // TP over heads (2 key heads, 4 value heads: one and two a rank), with SP as MoE needs.
    {"gdn_dense_tp2", 2, "--tp 2", false, 4, kGdnDense},
    {"gdn_tp2_sp", 2, "--tp 2 --sequence-parallel", false, 4, kGdn},
    {"gdn_tp2_sp_dp2_distopt", 4, "--tp 2 --sequence-parallel --use-distributed-optimizer", false, 4, kGdn},
    {"gdn_tp2_sp_pp2", 4, "--tp 2 --sequence-parallel --pp 2", false, 4, kGdn},
    {"gdn_tp2_sp_ep2", 4, "--tp 2 --sequence-parallel --ep 2", false, 4, kGdn},
    {"gdn_tp2_sp_pp2_zbv", 4, "--tp 2 --sequence-parallel --pp 2 --schedule zb-v", false, 4, kGdn},
    {"gdn_kv_replicated_tp8_sp", 8, "--tp 8 --sequence-parallel", false, 4, kGdnWide},
    {"gdn_pp2_recompute_full", 2,
     "--pp 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1", false, 4, kGdn},
    // The gated norm's output recomputed, its out_proj gradient inside I (also under ZB-V).
    {"gdn_recompute_gdn_norm_out", 2, "--recompute-granularity selective --recompute-modules gdn_norm_out", false,
     4, kGdn},
    {"gdn_pp2_zbv_recompute_gdn_norm_out", 2,
     "--pp 2 --schedule zb-v --recompute-granularity selective --recompute-modules gdn_norm_out layernorm", false,
     4, kGdn},
    {"gdn_recompute_selective", 2,
     "--recompute-granularity selective --recompute-modules core_attn layernorm moe_act shared_experts", false, 4,
     kGdn},
};
// Multi-token prediction (one depth, Megatron's --mtp-num-layers 1, weight 0.3) on the hybrid: its
// layer is gated attention with the MoE block (the last of 4 layers is attention), on the last
// stage, which keeps a copy of the word embeddings summed over the embedding group (PP, VPP,
// uneven stages, ZB-H1), or shares the first stage's (ZB-V: both on rank 0); its fc and norms
// replicated over TP (summed under sequence parallel); its experts over EP; recomputed whole. A
// dense llama model under CP: the shifted ids cross the zigzag chunks of each rank.
const char* kGdnMtp = TESSEL_GDN_FLAGS "--moe-aux-loss-coeff 0.01 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.3";
const char* kGdnMtpNoAux = TESSEL_GDN_FLAGS "--mtp-num-layers 1 --mtp-loss-scaling-factor 0.3";
const char* kDenseMtp = "--mtp-num-layers 2 --mtp-loss-scaling-factor 0.3 --qk-layernorm";

const Layout kMtpLayouts[] = {
    {"mtp_gdn_dp2", 2, "", false, 4, kGdnMtp},
    {"mtp_gdn_dp2_distopt", 2, "--use-distributed-optimizer", false, 4, kGdnMtp},
    {"mtp_gdn_pp2", 2, "--pp 2", false, 4, kGdnMtp},
    {"mtp_gdn_pp2_layout", 2, "--pp 2 --pipeline-model-parallel-layout 'Et|tttmL'", false, 4, kGdnMtp},
    {"mtp_gdn_pp2_vpp2", 2, "--pp 2 --vpp 2", false, 8, kGdnMtp},
    {"mtp_gdn_pp2_uneven", 2, "--pp 2 --decoder-first-pipeline-num-layers 3", false, 4, kGdnMtp},
    {"mtp_gdn_pp2_zbh1", 2, "--pp 2 --schedule zb-h1", false, 4, kGdnMtp},
    {"mtp_gdn_pp2_zbv", 2, "--pp 2 --schedule zb-v", false, 4, kGdnMtp},
    {"mtp_gdn_pp2_dualpipev", 2, "--pp 2 --schedule dualpipev --micro-batch-size 1", false, 4, kGdnMtpNoAux},
    {"mtp_gdn_tp2_sp", 2, "--tp 2 --sequence-parallel", false, 4, kGdnMtp},
    {"mtp_gdn_ep2", 2, "--ep 2", false, 4, kGdnMtp},
    {"mtp_gdn_tp2_sp_pp2_ep2", 8, "--tp 2 --sequence-parallel --pp 2 --ep 2", false, 4, kGdnMtp},
    {"mtp_gdn_pp2_recompute_full", 2,
     "--pp 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1", false, 4, kGdnMtp},
    {"mtp_gdn_recompute_selective", 2,
     "--recompute-granularity selective --recompute-modules core_attn layernorm moe_act shared_experts", false, 4,
     kGdnMtp},
    {"mtp_dense_cp2", 2, "--cp 2", false, 2, kDenseMtp},
    {"mtp_dense_cp2_pp2", 4, "--cp 2 --pp 2", false, 2, kDenseMtp},
};

INSTANTIATE_TEST_SUITE_P(Mtp, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kMtpLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

// On the preprocessed blend (its ctest fixture builds it first: RealData*/ in tests/CMakeLists.txt).
const Layout kGdnRealDataLayouts[] = {
    {"gdn_packed_pp2_dp2", 4, "--pp 2", false, 4, kGdnPacked, true},
    {"gdn_packed_ep2", 2, "--ep 2", false, 4, kGdnPacked, true},
    {"gdn_packed_tp2_sp", 2, "--tp 2 --sequence-parallel", false, 4, kGdnPacked, true},
};

INSTANTIATE_TEST_SUITE_P(Gdn, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kGdnLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });
INSTANTIATE_TEST_SUITE_P(RealDataGdn, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kGdnRealDataLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

// CP for the Gated DeltaNet layers by Megatron's head all-to-all (each CP rank runs whole
// sequences of its share of the heads; the attention layer keeps the ring or the all-gather):
// CP 2 (a key head and its two value heads a rank), CP 4 and TP 2 × CP 2 (4 key, 8 value heads:
// one key head a rank), with PP, EP carved from CP, the attention layer's all-gather, MTP, full
// recompute and the gated norm's recompute (its all-to-all again), and packed documents.
const char* kGdnHeads4 = TESSEL_GDN_VARIANT "--linear-num-key-heads 4 --linear-num-value-heads 8 " TESSEL_GDN_MOE
                         "--moe-aux-loss-coeff 0.01";
const Layout kGdnCpLayouts[] = {
    {"gdn_cp2", 2, "--cp 2", false, 4, kGdn},
    {"gdn_cp4", 4, "--cp 4", false, 4, kGdnHeads4},
    {"gdn_cp2_allgather", 2, "--cp 2 --cp-comm-type all-gather", false, 4, kGdn},
    {"gdn_tp2_sp_cp2", 4, "--tp 2 --sequence-parallel --cp 2", false, 4, kGdnHeads4},
    {"gdn_dense_tp2_cp2", 4, "--tp 2 --cp 2", false, 4,
     TESSEL_GDN_VARIANT "--linear-num-key-heads 4 --linear-num-value-heads 8 "},
    {"gdn_cp2_pp2", 4, "--cp 2 --pp 2", false, 4, kGdn},
    {"gdn_cp2_ep2", 2, "--cp 2 --ep 2", false, 4, kGdn},
    {"gdn_cp2_pp2_zbv", 4, "--cp 2 --pp 2 --schedule zb-v", false, 4, kGdn},
    {"gdn_cp2_recompute_full", 2, "--cp 2 --recompute-granularity full --recompute-method uniform "
     "--recompute-num-layers 1", false, 4, kGdn},
    {"gdn_mtp_cp2", 2, "--cp 2", false, 4, kGdnMtp},
    {"gdn_cp2_recompute_gdn_norm_out", 2, "--cp 2 --recompute-granularity selective --recompute-modules "
     "gdn_norm_out layernorm", false, 4, kGdn},
};
const Layout kGdnCpRealDataLayouts[] = {
    {"gdn_packed_cp2", 2, "--cp 2", false, 4, kGdnPacked, true},
    {"gdn_packed_tp2_sp_cp2", 4, "--tp 2 --sequence-parallel --cp 2", false, 4,
     TESSEL_GDN_VARIANT "--linear-num-key-heads 4 --linear-num-value-heads 8 " TESSEL_GDN_MOE
     "--moe-aux-loss-coeff 0.01 --reset-position-ids --reset-attention-mask --eod-mask-loss", true},
};

INSTANTIATE_TEST_SUITE_P(GdnCp, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kGdnCpLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });
INSTANTIATE_TEST_SUITE_P(RealDataGdnCp, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kGdnCpRealDataLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

}  // namespace
}  // namespace tessel::equivalence
