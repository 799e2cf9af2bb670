// model/config.h's Qwen3-Next settings: --experimental-attention-variant gdn and
// --linear-attention-freq (Megatron's interval and list forms, the layer type by the global layer
// index), the GDN sizes, the gated attention, the zero-centred norms, partial RoPE, the head
// dimension of --kv-channels, MTP and the gated shared expert; every rule they break listed at once,
// and the parameter count of such a model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/model/config.h"
#include "tessel/train/plan.h"

namespace tessel {
namespace {

const ModelField& field_of(const std::string& flag) {
  for (const ModelField& f : model_fields())
    if (f.flag == flag) return f;
  throw Error("no field " + flag);
}

void set(ModelConfig& cfg, const std::string& flag, const nlohmann::json& value) {
  set_model_field(field_of(flag), cfg, value, "the test");
}

// Qwen3-Next-80B-A3B's shape (docs/QWEN3_NEXT.md §1), narrowed.
ModelConfig small_qwen3_next() {
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  cfg.num_layers = 8;
  cfg.hidden_size = 64;
  cfg.num_attention_heads = 4;
  cfg.num_query_groups = 2;
  set(cfg, "--experimental-attention-variant", "gdn");
  set(cfg, "--linear-attention-freq", 4);
  cfg.linear.num_key_heads = 2;
  cfg.linear.num_value_heads = 4;
  cfg.linear.key_head_dim = 16;
  cfg.linear.value_head_dim = 8;
  cfg.kv_channels = 32;
  cfg.rotary_percent = 0.25f;
  cfg.attention_output_gate = true;
  cfg.layernorm_1p = true;
  cfg.qk_layernorm = true;
  cfg.moe.num_experts = 8;
  cfg.moe.ffn_hidden_size = 16;
  cfg.moe.shared_expert_size = 16;
  cfg.moe.shared_expert_gate = true;
  cfg.mtp_num_layers = 1;
  return cfg;
}

TEST(LinearAttentionConfig, FreqIntervalMakesEveryNthLayerFullAttention) {
  // Megatron: layer i is full attention iff (i + 1) % N == 0.
  EXPECT_EQ(parse_linear_attention_freq("4", 8), (std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(parse_linear_attention_freq("3", 6), (std::vector<int>{1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(parse_linear_attention_freq("1", 3), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(parse_linear_attention_freq("([1]*3+[0])*2", 8), (std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(parse_linear_attention_freq("[1, 0,1]", 3), (std::vector<int>{1, 0, 1}));
  for (const char* bad : {"0", "[1,0]", "[1,2,0]", "([1]*3+[0])*15", "[1,0,1", "four"}) {
    try {
      parse_linear_attention_freq(bad, 3);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--linear-attention-freq"), std::string::npos) << e.what();
    }
  }
  try {
    parse_linear_attention_freq("([1]*3+[0])*15", 48);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has 60 entries for 48 layers"), std::string::npos) << e.what();
  }
}

TEST(LinearAttentionConfig, LayerTypeByGlobalIndex) {
  const ModelConfig cfg = small_qwen3_next();
  std::vector<int> linear;
  for (int l = 0; l < cfg.num_layers; ++l) linear.push_back(cfg.linear.is_linear_layer(l));
  EXPECT_EQ(linear, (std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_TRUE(cfg.violations().empty()) << cfg.violations().front();
  EXPECT_EQ(cfg.linear.key_dim(), 32);
  EXPECT_EQ(cfg.linear.value_dim(), 32);
  EXPECT_EQ(cfg.linear.conv_dim(), 96);
  EXPECT_EQ(cfg.head_dim(), 32);  // --kv-channels, not hidden / heads = 16
  EXPECT_EQ(cfg.rotary_dim(), 8);
  EXPECT_FALSE(ModelConfig().linear.is_linear_layer(0));
}

TEST(LinearAttentionConfig, VariantAndFreqThroughTheFields) {
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  cfg.num_layers = 4;
  // The interval needs the variant, as Megatron reads the frequency only for it.
  try {
    set(cfg, "--linear-attention-freq", "2");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs --experimental-attention-variant gdn"), std::string::npos)
        << e.what();
  }
  set(cfg, "--experimental-attention-variant", "gdn");  // alone: every layer GDN
  EXPECT_EQ(cfg.linear.layer_pattern, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(model_field_json(field_of("--linear-attention-freq"), cfg), nlohmann::json({1, 1, 1, 1}));
  set(cfg, "--linear-attention-freq", "2");
  EXPECT_EQ(cfg.linear.layer_pattern, (std::vector<int>{1, 0, 1, 0}));
  EXPECT_EQ(model_field_json(field_of("--linear-attention-freq"), cfg), 2);
  EXPECT_EQ(model_field_json(field_of("--experimental-attention-variant"), cfg), "gdn");
  set(cfg, "--experimental-attention-variant", "gdn");  // again: the pattern stays
  EXPECT_EQ(cfg.linear.layer_pattern, (std::vector<int>{1, 0, 1, 0}));
  EXPECT_THROW(set(cfg, "--experimental-attention-variant", "mamba"), Error);
  set(cfg, "--experimental-attention-variant", "none");
  EXPECT_FALSE(cfg.linear.enabled());

  // The model file writes the GDN settings only for a model that has GDN layers, and reads them back.
  const nlohmann::json plain = model_config_to_json(cfg);
  EXPECT_FALSE(plain.contains("linear_attention_freq"));
  EXPECT_FALSE(plain.contains("experimental_attention_variant"));
  const ModelConfig next = small_qwen3_next();
  const nlohmann::json j = model_config_to_json(next);
  EXPECT_EQ(j["experimental_attention_variant"], "gdn");
  EXPECT_EQ(j["linear_attention_freq"], 4);
  EXPECT_EQ(j["linear_num_value_heads"], 4);
  EXPECT_EQ(j["moe_shared_expert_gate"], true);
  ModelConfig back;
  model_config_from_json(j, back, "round trip");
  EXPECT_EQ(back.linear.layer_pattern, next.linear.layer_pattern);
  EXPECT_EQ(back.linear.value_head_dim, 8);
  EXPECT_EQ(back.kv_channels, 32);
  EXPECT_EQ(back.rotary_percent, 0.25f);
  EXPECT_TRUE(back.attention_output_gate && back.layernorm_1p && back.moe.shared_expert_gate);
  EXPECT_EQ(back.mtp_num_layers, 1);
}

TEST(LinearAttentionConfig, EveryBrokenRuleListed) {
  ModelConfig cfg = small_qwen3_next();
  cfg.linear.num_value_heads = 5;           // not a multiple of 2 key heads
  cfg.linear.conv_kernel_dim = 0;
  cfg.linear.layer_pattern.push_back(1);    // 9 entries for 8 layers
  cfg.rotary_percent = 0.3f;                // int(32 · 0.3) = 9, odd
  cfg.mtp_num_layers = -1;
  cfg.moe.shared_expert_size = 0;           // the gate without a shared expert
  const std::vector<std::string> v = cfg.violations();
  std::string all;
  for (const std::string& m : v) all += m + "\n";
  for (const char* rule : {"--linear-num-value-heads 5 is not a multiple of --linear-num-key-heads 2",
                           "--linear-conv-kernel-dim 0 must be positive",
                           "--linear-attention-freq has 9 entries for 8 layers",
                           "RoPE needs an even rotary dimension: int(head dim 32 × --rotary-percent 0.3) = 9",
                           "--mtp-num-layers -1 must not be negative",
                           "--moe-shared-expert-gate needs a shared expert"})
    EXPECT_NE(all.find(rule), std::string::npos) << rule << " missing from:\n" << all;

  ModelConfig gpt2;
  gpt2.linear.layer_pattern = {1, 1, 1, 0};
  gpt2.attention_output_gate = true;
  gpt2.layernorm_1p = true;
  gpt2.mtp_num_layers = 1;
  gpt2.kv_channels = 32;  // 4 heads × 32 is not hidden 256
  gpt2.rotary_base = 500000;  // gpt2 learns its positions
  all.clear();
  for (const std::string& m : gpt2.violations()) all += m + "\n";
  for (const char* rule : {"--experimental-attention-variant gdn needs --arch llama",
                           "--attention-output-gate needs --arch llama", "--apply-layernorm-1p needs --arch llama",
                           "--mtp-num-layers needs --arch llama", "--kv-channels 32 needs --arch llama",
                           "--rotary-base other than 10000 needs --arch llama"})
    EXPECT_NE(all.find(rule), std::string::npos) << rule << " missing from:\n" << all;

  // --kv-channels frees the head dimension from hidden / heads.
  ModelConfig wide;
  wide.arch = Arch::Llama;
  wide.hidden_size = 60;
  wide.num_attention_heads = 8;
  EXPECT_FALSE(wide.violations().empty());
  wide.kv_channels = 16;
  EXPECT_TRUE(wide.violations().empty()) << wide.violations().front();
}

// Megatron's assertion: each TP·CP rank holds whole key heads and their value heads.
TEST(LinearAttentionConfig, HeadsNotDividingTpTimesCpAreNamed) {
  ModelConfig cfg = small_qwen3_next();
  cfg.seq_length = 16;
  TrainOptions o;
  o.data.path = {"corpus.txt"};
  o.parallel.layout.world = 4;
  o.parallel.layout.tp = 4;
  o.parallel.layout.sequence_parallel = true;
  o.batch = {.micro_batch_size = 4, .global_batch_size = 4};
  std::string all;
  for (const std::string& m : training_plan_violations(cfg, o)) all += m + "\n";
  EXPECT_NE(all.find("the GDN heads (--linear-num-key-heads 2, --linear-num-value-heads 4) are not divisible "
                     "by --tensor-model-parallel-size 4 × --context-parallel-size 1 = 4"),
            std::string::npos)
      << all;
}

// HF's count for Qwen3-Next's layers (docs/QWEN3_NEXT.md §2), summed by hand.
TEST(LinearAttentionConfig, ParameterCountHasEveryTensor) {
  const ModelConfig cfg = small_qwen3_next();
  const int64_t C = 64, V = cfg.vocab_size, D = 32, H = 4, G = 2, E = 8, I = 16, S = 16;
  const int64_t conv_dim = 96, value_dim = 32, Hv = 4, dv = 8, K = 4;
  const int64_t gdn = conv_dim * C + value_dim * C + 2 * Hv * C + conv_dim * K + 2 * Hv + dv + C * value_dim;
  const int64_t attention = 2 * H * D * C + 2 * G * D * C + C * H * D + 2 * D;
  const int64_t moe = E * C + E * 3 * C * I + 3 * C * S + C;
  const int64_t layer_norms = 2 * C;
  const int64_t mtp = 2 * C + C * 2 * C + attention + moe + layer_norms + C;
  const int64_t expected = 2 * V * C + C + 6 * (gdn + moe + layer_norms) + 2 * (attention + moe + layer_norms) + mtp;
  EXPECT_EQ(cfg.num_parameters(), expected);
}

}  // namespace
}  // namespace tessel
