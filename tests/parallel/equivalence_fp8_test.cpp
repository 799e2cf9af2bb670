// The equivalence suite's FP8 layouts (the test itself: equivalence_test.cpp): --fp8-format with
// each current-scaling recipe (tensorwise, blockwise, mxfp8) under PP 2, DP 2 with the distributed
// optimizer and --fp8-param-gather, and TP 2 with sequence parallel where the shards hold whole
// blocks — each against one process's run with the same FP8 flags: the losses within the suite's
// tolerance, the final weights as expect_rounded_weights_follow says. Each scale comes from blocks
// that no layout here splits (a per-tensor amax over TP or CP, and EP, are refused until their
// amax reductions are built: train/mixed_precision.cpp).
#include "parallel/equivalence.h"

namespace tessel::equivalence {
namespace {

const Layout kFp8Layouts[] = {
    {.name = "fp8_tensorwise_pp2", .ranks = 2, .flags = "--pp 2", .layers = 4,
     .precision = "--bf16 --fp8-format hybrid --fp8-recipe tensorwise"},
    {.name = "fp8_tensorwise_dp2_param_gather", .ranks = 2, .flags = "--use-distributed-optimizer --fp8-param-gather",
     .precision = "--bf16 --fp8-format hybrid --fp8-recipe tensorwise"},
    {.name = "fp8_blockwise_pp2", .ranks = 2, .flags = "--pp 2", .layers = 4,
     .precision = "--bf16 --fp8-format hybrid --fp8-recipe blockwise"},
    {.name = "fp8_blockwise_dp2_param_gather", .ranks = 2, .flags = "--use-distributed-optimizer --fp8-param-gather",
     .precision = "--bf16 --fp8-format e4m3 --fp8-recipe blockwise"},
    {.name = "fp8_mxfp8_pp2", .ranks = 2, .flags = "--pp 2", .layers = 4,
     .precision = "--bf16 --fp8-format hybrid --fp8-recipe mxfp8"},
    {.name = "fp8_mxfp8_dp2_param_gather", .ranks = 2, .flags = "--use-distributed-optimizer --fp8-param-gather",
     .precision = "--bf16 --fp8-format hybrid --fp8-recipe mxfp8"},
};

INSTANTIATE_TEST_SUITE_P(Fp8, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2", "llama"), ::testing::ValuesIn(kFp8Layouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

// gpt2 only. TP: gpt2's key/value heads, 64 wide, leave whole blocks of 32 on each TP 2 rank;
// llama's 4 query groups of 8 (32 wide) would leave 16. Tensorwise e4m3 over fp32 under PP 2 × DP
// 2: llama's run leaves the tolerance by iteration 8 (1.5e-4) — tensorwise's scales, largest /
// amax in fp32, move with the last bits in which the DP reduction's order leaves the weights, and
// with them every operand's rounding; the power-of-two scales of the block recipes do not.
const Layout kFp8Gpt2Layouts[] = {
    {.name = "fp8_tensorwise_e4m3_pp2_dp2", .ranks = 4, .flags = "--pp 2", .layers = 4,
     .precision = "--fp8-format e4m3 --fp8-recipe tensorwise"},
    {.name = "fp8_mxfp8_tp2_sp", .ranks = 2, .flags = "--tp 2 --sequence-parallel",
     .precision = "--bf16 --fp8-format hybrid --fp8-recipe mxfp8"},
    {.name = "fp8_mxfp8_e4m3_tp2_sp_pp2_dp2", .ranks = 8, .flags = "--tp 2 --sequence-parallel --pp 2", .layers = 4,
     .precision = "--fp8-format e4m3 --fp8-recipe mxfp8"},
};

INSTANTIATE_TEST_SUITE_P(Fp8Gpt2, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2"), ::testing::ValuesIn(kFp8Gpt2Layouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

}  // namespace
}  // namespace tessel::equivalence
