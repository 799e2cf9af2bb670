// The equivalence suite's fp16 layouts (the test itself: equivalence_test.cpp): --fp16 with
// Megatron's dynamic loss scaling under TP × PP × DP, the distributed optimizer, TP with sequence
// parallel, CP and MoE's EP, each against one process's --fp16 run — the losses within the
// suite's tolerance, the same steps skipped and the same loss scale after every iteration
// (expect_follows), the final weights as expect_rounded_weights_follow says. The precision flags
// are each case's `precision`, which the fp32 runs the weights are measured against drop.
#include "parallel/equivalence.h"

namespace tessel::equivalence {
namespace {

// A scale that fits from the start and doubles every 3 clean iterations: the scaled gradients
// are what the GEMMs round.
const char* kFp16 = "--fp16 --initial-loss-scale 4096 --loss-scale-window 3";
// A forced overflow: 2^24 times the loss gradient passes fp16's 65504, so the first iterations
// skip their steps and halve the scale (hysteresis 1) until it fits; the layouts must agree on
// which, as Megatron reduces found_inf over every rank that holds a part of the model.
const char* kFp16Overflow = "--fp16 --initial-loss-scale 16777216 --hysteresis 1 --loss-scale-window 4";


const Layout kFp16Layouts[] = {
    {.name = "fp16_tp2_pp2_dp2", .ranks = 8, .flags = "--tp 2 --pp 2", .layers = 4, .precision = kFp16},
    {.name = "fp16_overflow_tp2_pp2_dp2", .ranks = 8, .flags = "--tp 2 --pp 2", .layers = 4,
     .precision = kFp16Overflow},
    {.name = "fp16_overflow_dp2_distopt", .ranks = 2, .flags = "--use-distributed-optimizer",
     .precision = kFp16Overflow},
    {.name = "fp16_tp2_sp", .ranks = 2, .flags = "--tp 2 --sequence-parallel", .precision = kFp16},
    {.name = "fp16_overflow_cp2", .ranks = 2, .flags = "--cp 2", .precision = kFp16Overflow},
};

INSTANTIATE_TEST_SUITE_P(Fp16, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2", "llama"), ::testing::ValuesIn(kFp16Layouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

const Layout kFp16MoeLayouts[] = {
    {.name = "fp16_overflow_moe_ep2_pp2", .ranks = 4, .flags = "--ep 2 --pp 2", .model_extra = TESSEL_MOE_FLAGS,
     .precision = kFp16Overflow},
};

INSTANTIATE_TEST_SUITE_P(Fp16Moe, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kFp16MoeLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

}  // namespace
}  // namespace tessel::equivalence
