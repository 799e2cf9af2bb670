// Activation recomputation (model/recompute.h): the memory each setting keeps, against the
// analytic amounts, and the flag rules. That the recomputed backward gives the same gradients is
// the equivalence suite's (tests/parallel/equivalence_test.cpp, *_recompute_*).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessel/model/recompute.h"
#include "tessel/model/transformer.h"
#include "support/printers.h"
#include "support/tiny_model.h"

namespace tessel {
namespace {

// A middle pipeline chunk (no embedding, no head) of L layers: its activations are the layers'.
struct Memory {
  int64_t per_microbatch = 0;  // one slot's allocation
  int64_t shared = 0;          // the recompute arena all slots share
  int64_t in_flight(int m) const { return m * per_microbatch + shared; }
};

// The tiny model, longer and wider so that every tensor is several cache lines.
ModelConfig config(Arch arch) {
  ModelConfig c = testing::tiny_config(arch);
  c.num_layers = 4;
  c.hidden_size = 64;
  c.seq_length = 32;
  return c;
}

constexpr int64_t kBatch = 2;

Memory memory(Arch arch, const RecomputeOptions& r) {
  const Kernels& k = cpu_kernels();
  const ModelConfig cfg = config(arch);
  ParamRegistry params;
  TransformerChunk chunk(k, params, cfg,
                         {.spec = ChunkSpec{0, cfg.num_layers, false, false}, .micro_batch = kBatch, .recompute = r},
                         ChunkGroups::one_process(k));
  params.finalize();
  chunk.bind(params);
  const ChunkActivations acts = chunk.make_activations();
  return {acts.bytes(), chunk.shared_activation_bytes()};
}

RecomputeOptions full(const char* method, int layers) {
  return {.granularity = "full", .method = method, .num_layers = layers};
}

class Recompute : public ::testing::TestWithParam<Arch> {};

// Full recompute of every layer on its own keeps each layer's input (and the chunk's output) per
// microbatch, and one layer's tensors in the shared arena: at any number m of microbatches in
// flight at most 1/L of what no recompute keeps, plus one layer's.
TEST_P(Recompute, FullKeepsAnLthPlusOneLayer) {
  const ModelConfig cfg = config(GetParam());
  const int L = cfg.num_layers;
  const Memory none = memory(GetParam(), {}), uniform = memory(GetParam(), full("uniform", 1));
  const int64_t N = kBatch * cfg.seq_length, C = cfg.hidden_size, rows = N * C * 4;
  const int64_t one_layer = (none.per_microbatch - rows) / L;  // all but the chunk's output
  EXPECT_EQ(none.shared, 0);
  EXPECT_EQ(uniform.per_microbatch, (L + 1) * rows) << "the layers' inputs and the output";
  EXPECT_LE(uniform.shared, one_layer);
  for (int m : {1, 2, 4, 8})
    EXPECT_LE(uniform.in_flight(m), none.in_flight(m) / L + one_layer) << m << " in flight";
  // Groups of 2 keep every other input; block recomputes the first 2 layers and keeps the rest.
  const Memory groups = memory(GetParam(), full("uniform", 2)), block = memory(GetParam(), full("block", 2));
  EXPECT_EQ(groups.per_microbatch, (L / 2 + 1) * rows);
  EXPECT_EQ(block.per_microbatch, (L - 2) * one_layer + 2 * rows + rows);
}

// Korthikanti et al.'s selective recompute drops what core attention keeps beyond its inputs and
// output: 5·a·s²·b bytes at 16 bits for stored scores, softmax and dropout mask. Flash-style
// attention (tessel's) never stores the s × s scores; what it keeps is the softmax statistics,
// one float per (batch, head, position): that is the saving, exactly, per layer.
TEST_P(Recompute, SelectiveCoreAttentionSavesTheAttentionStatistics) {
  const ModelConfig cfg = config(GetParam());
  const Memory none = memory(GetParam(), {});
  const Memory selective = memory(GetParam(), {.granularity = "selective"});
  const int64_t statistics = kBatch * cfg.num_attention_heads * cfg.seq_length * 4;
  EXPECT_EQ(none.per_microbatch - selective.per_microbatch, cfg.num_layers * statistics);
  EXPECT_EQ(selective.shared, statistics);
}

INSTANTIATE_TEST_SUITE_P(Archs, Recompute, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return info.param == Arch::GPT2 ? "gpt2" : "llama"; });

// Every contradiction in one list, as Megatron-Core's TransformerConfig checks them.
TEST(RecomputeFlags, EveryViolatedRuleIsListed) {
  EXPECT_TRUE(recompute_violations({}, 4, false, false, false).empty());
  EXPECT_TRUE(recompute_violations(full("block", 4), 4, false, false, false).empty());
  const RecomputeOptions bad{.granularity = "full", .num_layers = 5, .modules = {"moe_act", "bogus"}};
  const std::vector<std::string> v = recompute_violations(bad, 4, false, false, false);
  ASSERT_EQ(v.size(), 5u);
  EXPECT_NE(v[0].find("--recompute-method"), std::string::npos) << v[0];
  EXPECT_NE(v[1].find("between 1 and the layers of a model chunk, 4 (got 5)"), std::string::npos) << v[1];
  EXPECT_NE(v[2].find("--recompute-modules needs --recompute-granularity selective"), std::string::npos);
  EXPECT_NE(v[3].find("moe_act needs --num-experts"), std::string::npos) << v[3];
  EXPECT_NE(v[4].find("unknown module 'bogus'"), std::string::npos) << v[4];
  const RecomputeOptions selective{.granularity = "selective", .method = "uniform", .num_layers = 2};
  EXPECT_EQ(recompute_violations(selective, 4, false, false, false).size(), 2u);
  const RecomputeOptions contradicts{.granularity = "full", .method = "block", .num_layers = 1,
                                     .activations = true};
  EXPECT_GE(recompute_violations(contradicts, 4, false, false, false).size(), 1u);
  const RecomputeOptions gdn{.granularity = "selective", .modules = {"gdn_norm_out"}};
  EXPECT_TRUE(recompute_violations(gdn, 4, false, false, true).empty());
  const std::vector<std::string> no_gdn = recompute_violations(gdn, 4, false, false, false);
  ASSERT_EQ(no_gdn.size(), 1u);
  EXPECT_NE(no_gdn[0].find("gdn_norm_out needs Gated DeltaNet layers"), std::string::npos) << no_gdn[0];
}

}  // namespace
}  // namespace tessel
