// The equivalence suite's schedule layouts: zero-bubble schedules, recompute and the step
// batch-size schedule (the test itself: equivalence_test.cpp).
#include "parallel/equivalence.h"

namespace tessel::equivalence {
namespace {

// Zero-bubble schedules, each on PP2 and PP4, alone, with TP2 and with DP2 (the DP2 ones with
// optimizer post-validation, which at the default --clip-grad 1 undoes and redoes the first step
// and takes the plain step after); post-validation where clipping triggers only in the first
// iterations (--clip-grad 2: it steps before the norm again once one is under 2); MoE
// under ZB-V; recompute (full uniform and block, selective) under 1F1B, interleaved and ZB-V,
// and selective with TP, SP and CP. A V holds 2·PP model chunks; DualPipeV needs 2·PP
// microbatches per DP rank.
#define TESSEL_POST_VALIDATION " --enable-optimizer-post-validation"
#define TESSEL_FULL_UNIFORM " --recompute-granularity full --recompute-method uniform --recompute-num-layers 2"
#define TESSEL_FULL_BLOCK " --recompute-granularity full --recompute-method block --recompute-num-layers 1"
#define TESSEL_SELECTIVE " --recompute-granularity selective --recompute-modules core_attn layernorm mlp"
const Layout kScheduleLayouts[] = {
    {"pp2_zbh1", 2, "--pp 2 --schedule zb-h1", false, 4},
    {"pp4_zbh1", 4, "--pp 4 --schedule zb-h1 --micro-batch-size 1", false, 4},
    {"tp2_pp2_zbh1", 4, "--tp 2 --pp 2 --schedule zb-h1", false, 4},
    {"tp2_pp4_zbh1", 8, "--tp 2 --pp 4 --schedule zb-h1 --micro-batch-size 1", false, 4},
    {"dp2_pp2_zbh1", 4, "--pp 2 --schedule zb-h1" TESSEL_POST_VALIDATION, false, 4},
    {"dp2_pp4_zbh1", 8, "--pp 4 --schedule zb-h1 --micro-batch-size 1" TESSEL_POST_VALIDATION, false, 4},
    {"pp2_zbv", 2, "--pp 2 --schedule zb-v", false, 4},
    {"pp4_zbv", 4, "--pp 4 --schedule zb-v --micro-batch-size 1", false, 8},
    {"tp2_pp2_zbv", 4, "--tp 2 --pp 2 --schedule zb-v", false, 4},
    {"tp2_pp4_zbv", 8, "--tp 2 --pp 4 --schedule zb-v --micro-batch-size 1", false, 8},
    {"dp2_pp2_zbv", 4, "--pp 2 --schedule zb-v" TESSEL_POST_VALIDATION, false, 4},
    {"dp2_pp4_zbv", 8, "--pp 4 --schedule zb-v --micro-batch-size 1" TESSEL_POST_VALIDATION, false, 8},
    {"pp2_dualpipev", 2, "--pp 2 --schedule dualpipev --micro-batch-size 1", false, 4},
    {"pp4_dualpipev", 4, "--pp 4 --schedule dualpipev --micro-batch-size 1", false, 8},
    {"tp2_pp2_dualpipev", 4, "--tp 2 --pp 2 --schedule dualpipev --micro-batch-size 1", false, 4},
    {"tp2_pp4_dualpipev", 8, "--tp 2 --pp 4 --schedule dualpipev --micro-batch-size 1", false, 8},
    {"dp2_pp2_dualpipev", 4, "--pp 2 --schedule dualpipev --micro-batch-size 1" TESSEL_POST_VALIDATION, false, 4},
    {"dp2_pp4_dualpipev", 8, "--pp 4 --schedule dualpipev --micro-batch-size 1" TESSEL_POST_VALIDATION, false, 8,
     "--global-batch-size 16"},
    {"pp2_zbv_post_validation_clip2", 2, "--pp 2 --schedule zb-v" TESSEL_POST_VALIDATION, false, 4, "--clip-grad 2"},
    {"pp2_recompute_uniform", 2, "--pp 2" TESSEL_FULL_UNIFORM, false, 4},
    {"pp2_recompute_block", 2, "--pp 2" TESSEL_FULL_BLOCK, false, 4},
    {"pp2_recompute_selective", 2, "--pp 2" TESSEL_SELECTIVE, false, 4},
    {"pp2_vpp2_recompute_uniform", 2, "--pp 2 --vpp 2" TESSEL_FULL_UNIFORM, false, 8},
    {"pp2_vpp2_recompute_block", 2, "--pp 2 --vpp 2" TESSEL_FULL_BLOCK, false, 8},
    {"pp2_vpp2_recompute_selective", 2, "--pp 2 --vpp 2 --recompute-granularity selective", false, 8},
    {"pp2_zbv_recompute_uniform", 2, "--pp 2 --schedule zb-v" TESSEL_FULL_UNIFORM, false, 8},
    {"pp2_zbv_recompute_block", 2, "--pp 2 --schedule zb-v" TESSEL_FULL_BLOCK, false, 8},
    {"pp2_zbv_recompute_selective", 2, "--pp 2 --schedule zb-v" TESSEL_SELECTIVE, false, 8},
    {"tp2_sp_cp2_recompute_selective", 4, "--tp 2 --sequence-parallel --cp 2" TESSEL_SELECTIVE},
};

INSTANTIATE_TEST_SUITE_P(Schedules, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2", "llama"),
                                            ::testing::ValuesIn(kScheduleLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

// Megatron's step batch-size schedule: the global batch grows from 4 to 8 to 16 samples at 128
// and 512 tokens (samples 4 and 16 of 32 tokens), so iterations 1, 2-3 and 4-10 run 2, 4 and 8
// microbatches of 2 samples, each from the samples consumed before it. Micro batch × DP stays the
// reference's 2: the learning-rate flags count iterations of that many samples (Megatron's
// default --global-batch-size), the same in every case.
#define TESSEL_STEP_SCHEDULE "--step-batch-size-schedule 0:4,128:8,512:16"
const Layout kBatchScheduleLayouts[] = {
    {"steps_dp2", 2, "--micro-batch-size 1", false, 2, TESSEL_STEP_SCHEDULE},
    {"steps_pp2", 2, "--pp 2", false, 4, TESSEL_STEP_SCHEDULE},
    {"steps_pp2_vpp2", 2, "--pp 2 --vpp 2", false, 4, TESSEL_STEP_SCHEDULE},
    {"steps_pp2_zbv", 2, "--pp 2 --schedule zb-v", false, 4, TESSEL_STEP_SCHEDULE},
    {"steps_tp2_sp", 2, "--tp 2 --sequence-parallel", false, 2, TESSEL_STEP_SCHEDULE},
};

INSTANTIATE_TEST_SUITE_P(BatchSchedule, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2", "llama"),
                                            ::testing::ValuesIn(kBatchScheduleLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

}  // namespace
}  // namespace tessel::equivalence
