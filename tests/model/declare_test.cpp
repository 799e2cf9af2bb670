// The declare-only build of a chunk (TransformerChunk::declare) against the real one: the same
// parameters (names, shapes, shard specs) and the same tensors, which the real build's memory
// matches; and a rank's place in the groups shapes both as the groups themselves would.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/tiny_model.h"
#include "tessel/model/transformer.h"

namespace tessel {
namespace {

using testing::tiny_config;

ModelConfig moe_config() {
  ModelConfig c = tiny_config(Arch::Llama);
  c.num_layers = 3;
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 8;
  c.moe.shared_expert_size = 12;
  c.moe.shared_expert_gate = true;
  c.moe.aux_loss_coeff = 0.01f;
  c.moe.layer_pattern = {0, 1, 1};
  return c;
}

struct Case {
  const char* name;
  ModelConfig cfg;
  RecomputeOptions recompute;
};

std::vector<Case> cases() {
  ModelConfig qwen = tiny_config(Arch::Llama);
  qwen.qk_layernorm = qwen.add_qkv_bias = true;
  const RecomputeOptions full{.granularity = "full", .method = "uniform", .num_layers = 1};
  const RecomputeOptions selective{.granularity = "selective", .modules = {"core_attn", "moe_act"}};
  return {{"gpt2", tiny_config(Arch::GPT2), {}},
          {"qwen", qwen, {}},
          {"gpt2 full recompute", tiny_config(Arch::GPT2), full},
          {"moe", moe_config(), {}},
          {"moe full recompute", moe_config(), full},
          {"moe selective", moe_config(), selective}};
}

void expect_same(const std::vector<DeclaredTensor>& a, const std::vector<DeclaredTensor>& b,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].part + ": " + a[i].name, b[i].part + ": " + b[i].name) << what;
    EXPECT_EQ(a[i].shape, b[i].shape) << what << " " << a[i].name;
    EXPECT_EQ(a[i].bytes, b[i].bytes) << what << " " << a[i].name;
    EXPECT_EQ(a[i].growth.has_value(), b[i].growth.has_value()) << what << " " << a[i].name;
  }
}

TEST(DeclareChunk, DeclaresWhatTheRealBuildHolds) {
  const Kernels& k = cpu_kernels();
  for (const Case& c : cases()) {
    for (const ChunkSpec spec : {ChunkSpec{0, c.cfg.num_layers, true, true}, ChunkSpec{1, 2, false, true}}) {
      ParamRegistry real_params, declared_params;
      const TransformerChunk real(k, real_params, c.cfg, {.spec = spec, .micro_batch = 2, .recompute = c.recompute},
                                  ChunkGroups::one_process(k));
      const ChunkTensors declared = TransformerChunk::declare(
          c.cfg, {.spec = spec, .micro_batch = 2, .recompute = c.recompute}, ChunkPlace{}, declared_params);
      ASSERT_EQ(real_params.params().size(), declared_params.params().size()) << c.name;
      for (size_t i = 0; i < real_params.params().size(); ++i) {
        const Param &p = real_params.params()[i], &q = declared_params.params()[i];
        EXPECT_EQ(p.name, q.name);
        EXPECT_EQ(p.local_shape, q.local_shape) << p.name;
      }
      expect_same(real.tensors().slot, declared.slot, std::string(c.name) + " slot");
      expect_same(real.tensors().shared, declared.shared, std::string(c.name) + " shared");
      expect_same(real.tensors().scratch, declared.scratch, std::string(c.name) + " scratch");
      // What a slot and the shared memory take when allocated is what is declared.
      EXPECT_EQ(real.make_activations().bytes(), declared_bytes(declared.slot)) << c.name;
      EXPECT_EQ(real.shared_activation_bytes(), declared_bytes(declared.shared)) << c.name;
      EXPECT_FALSE(declared.slot.empty());
      EXPECT_FALSE(declared.scratch.empty());
    }
  }
}

// TP rank 1 of 2 under sequence parallel holds half of every split parameter and half the rows,
// EP rank 1 of 2 the second half of the experts; with a capacity the router gathers the choices
// of the TP group's rows.
TEST(DeclareChunk, APlaceInTheGroupsSplitsAsTheGroupsWould) {
  ModelConfig cfg = moe_config();
  cfg.moe.capacity_factor = 1.5;
  const ChunkSpec whole{0, cfg.num_layers, true, true};
  ParamRegistry one, split;
  const ChunkTensors alone = TransformerChunk::declare(cfg, {.spec = whole, .micro_batch = 2}, ChunkPlace{}, one);
  const ChunkPlace place{.tp = 2, .tp_rank = 1, .sequence_parallel = true, .ep = 2, .ep_rank = 1};
  const ChunkTensors tp2 = TransformerChunk::declare(cfg, {.spec = whole, .micro_batch = 2}, place, split);
  const Param& q = split.get("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.local_shape, (Shape{cfg.hidden_size / 2, cfg.hidden_size}));
  EXPECT_EQ(q.shard.index, 1);
  EXPECT_TRUE(split.has("model.layers.1.mlp.experts.2.up_proj.weight"));  // EP rank 1: experts 2, 3
  EXPECT_FALSE(split.has("model.layers.1.mlp.experts.0.up_proj.weight"));
  EXPECT_EQ(alone.slot.front().shape,
            (Shape{2 * cfg.seq_length, cfg.hidden_size}));                      // the first layer's input
  EXPECT_EQ(tp2.slot.front().shape, (Shape{cfg.seq_length, cfg.hidden_size}));  // its rows under SP
  auto has = [](const std::vector<DeclaredTensor>& tensors, const std::string& name) {
    for (const DeclaredTensor& t : tensors)
      if (t.name == name) return true;
    return false;
  };
  EXPECT_FALSE(has(alone.scratch, "router token group's choices"));
  EXPECT_TRUE(has(tp2.scratch, "router token group's choices"));
}

}  // namespace
}  // namespace tessel
