// The planner's model description: parameter counts against tessel's own model and the published
// sizes, FLOPs against Korthikanti et al.'s eq. 7, presets, and model files (tessel's JSON and
// Hugging Face config.json).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/plan/model.h"

namespace tessel {
namespace {

PlanModel from(const ModelConfig& c) {
  PlanModel m;
  m.cfg = c;
  return m;
}

TEST(PlanModel, ParameterCountsEqualTesselsModel) {
  ModelConfig gpt2;
  gpt2.num_layers = 3, gpt2.hidden_size = 96, gpt2.num_attention_heads = 4, gpt2.vocab_size = 300;
  EXPECT_EQ(total_params(from(gpt2)), gpt2.num_parameters());
  ModelConfig llama = gpt2;
  llama.arch = Arch::Llama, llama.num_query_groups = 2, llama.add_qkv_bias = true, llama.qk_layernorm = true;
  EXPECT_EQ(total_params(from(llama)), llama.num_parameters());
  llama.moe.num_experts = 8, llama.moe.topk = 2, llama.moe.ffn_hidden_size = 64, llama.moe.shared_expert_size = 32;
  llama.moe.layer_pattern = {1, 0, 1};
  EXPECT_EQ(total_params(from(llama)), llama.num_parameters());
  // The Qwen3-Next hybrid: Gated DeltaNet layers 0 and 1, gated attention with its own head
  // dimension in layer 2, a gated shared expert, two MTP layers.
  ModelConfig hybrid = llama;
  hybrid.moe.layer_pattern.clear();
  hybrid.moe.shared_expert_gate = true;
  hybrid.kv_channels = 32, hybrid.attention_output_gate = true, hybrid.add_qkv_bias = false;
  hybrid.linear.layer_pattern = {1, 1, 0};
  hybrid.linear.num_key_heads = 2, hybrid.linear.num_value_heads = 4;
  hybrid.linear.key_head_dim = 16, hybrid.linear.value_head_dim = 24;
  hybrid.mtp_num_layers = 2;
  ASSERT_TRUE(hybrid.violations().empty()) << hybrid.violations().front();
  EXPECT_EQ(total_params(from(hybrid)), hybrid.num_parameters());
}

// docs/QWEN3_NEXT.md §1's check of the two configurations: Qwen3-Next-80B-A3B 79.67B parameters and
// 3.87B active (the name rounds them to 80B and 3B), Qwen3.5-397B-A17B 396.35B in the text
// decoder and 6.6B in its MTP layer, 17.35B active; each to the precision the page gives.
TEST(PlanModel, QwenNextPresetsHaveTheirPublishedSizes) {
  const PlanModel next = model_preset("qwen3-next-80b-a3b"), q35 = model_preset("qwen3.5-397b-a17b");
  auto billions = [](int64_t n) { return static_cast<double>(n) / 1e9; };
  EXPECT_NEAR(billions(total_params(next) - mtp_params(next).total()), 79.67, 0.005);
  EXPECT_NEAR(billions(active_params(next)), 3.87, 0.005);
  EXPECT_NEAR(billions(total_params(q35) - mtp_params(q35).total()), 396.35, 0.005);
  EXPECT_NEAR(billions(mtp_params(q35).total()), 6.6, 0.05);
  EXPECT_NEAR(billions(active_params(q35)), 17.35, 0.005);
  // The counts are tessel's model's (ModelConfig::num_parameters counts what the trainer builds).
  EXPECT_EQ(total_params(q35), q35.cfg.num_parameters());
  EXPECT_EQ(total_params(next), next.cfg.num_parameters());
  // A GDN layer of the 397B (§2.1's Qwen3.5 shapes) and a gated attention layer (§2.2), MoE blocks
  // (§2.3) and norms included.
  const int64_t moe = 512 * 4096 + 512 * (2048LL * 4096 + 4096LL * 1024) + 3 * 1024LL * 4096 + 4096 + 2 * 4096;
  EXPECT_EQ(layer_params(q35, 0).total(),
            12288LL * 4096 + 8192LL * 4096 + 2 * 64 * 4096 + 12288 * 4 + 64 + 64 + 128 + 4096LL * 8192 + moe);
  EXPECT_EQ(layer_params(q35, 3).total(), 16384LL * 4096 + 2 * 512LL * 4096 + 4096LL * 8192 + 2 * 256 + moe);
  EXPECT_FALSE(q35.is_linear_layer(3));
  EXPECT_TRUE(q35.is_linear_layer(58));
  EXPECT_FALSE(q35.is_linear_layer(59));
}

// The chunked delta rule's forward FLOPs per token and value head (model.h states the count):
// 6·C·dk + 4·C·dv + 6·dk·dv + 2·C²/3 at C = 64, worked by hand for dk = dv = 128; a GDN layer's
// FLOPs are its projections' and the rule's over the value heads, no attention.
TEST(PlanModel, GatedDeltaNetFlops) {
  const PlanModel m = model_preset("qwen3.5-397b-a17b");
  EXPECT_NEAR(gdn_delta_rule_flops(m), 49152 + 32768 + 98304 + 8192.0 / 3, 1e-9);
  EXPECT_NEAR(gdn_delta_rule_recompute_flops(m), 2 * 64 * 256 + 4 * 128 * 128, 1e-9);
  const LayerFlops gdn = layer_flops(m, 0, 4096), attention = layer_flops(m, 3, 4096);
  EXPECT_EQ(gdn.attention, 0);
  EXPECT_NEAR(gdn.delta_rule, 64 * gdn_delta_rule_flops(m), 1e-6);
  EXPECT_NEAR(gdn.dense - 2.0 * 3 * 4096 * 1024, 2.0 * 4096 * (12288 + 8192 + 128) + 2.0 * 8192 * 4096, 1);
  // The output gate doubles q_proj's rows: 2·h·(2·q + 2·kv) + 2·v·h.
  EXPECT_NEAR(attention.dense - 2.0 * 3 * 4096 * 1024, 2.0 * 4096 * (2 * 8192 + 2 * 512) + 2.0 * 8192 * 4096, 1);
  EXPECT_NEAR(attention.attention, 2.0 * 4096 * (8192 + 8192), 1);
  // MTP: fc and a full-attention layer, and the head once more.
  const double per_token_without_mtp = [&] {
    PlanModel no_mtp = m;
    no_mtp.cfg.mtp_num_layers = 0;
    return model_flops_per_iteration(no_mtp, 1) / (3.0 * 4096);
  }();
  EXPECT_NEAR(model_flops_per_iteration(m, 1) / (3.0 * 4096) - per_token_without_mtp,
              attention.total() + 2.0 * 2 * 4096 * 4096 + head_flops_per_token(m), 1);
}

TEST(PlanModel, PresetSizesArePublished) {
  auto billions = [](const std::string& preset) { return total_params(model_preset(preset)) / 1e9; };
  // Narayanan et al. 2021 Table 1 (eq. 2, which leaves out the final norm's 2h).
  const std::pair<const char*, double> ptdp[] = {{"ptdp-1.7b", 1.7},   {"ptdp-3.6b", 3.6},   {"ptdp-7.5b", 7.5},
                                                 {"ptdp-18.4b", 18.4}, {"ptdp-39.1b", 39.1}, {"ptdp-76.1b", 76.1},
                                                 {"ptdp-145.6b", 145.6}, {"ptdp-310.1b", 310.1},
                                                 {"ptdp-529.6b", 529.6}, {"ptdp-1t", 1008.0}};
  for (auto [name, size] : ptdp) EXPECT_NEAR(billions(name), size, 0.051 + size * 0.001) << name;
  EXPECT_NEAR(billions("gpt3-175b"), 174.6, 0.1);   // PTD-P Table 2's count of GPT-3
  EXPECT_NEAR(billions("llama3-8b"), 8.03, 0.01);    // Meta: 8.03B
  EXPECT_NEAR(billions("llama3-70b"), 70.55, 0.05);  // 70.55B
  EXPECT_NEAR(billions("llama3-405b"), 405.85, 0.2); // 405.85B
  EXPECT_NEAR(billions("mixtral-8x7b"), 46.7, 0.05); // Mistral: 46.7B total, 12.9B active
  EXPECT_NEAR(active_params(model_preset("mixtral-8x7b")) / 1e9, 12.9, 0.05);
  EXPECT_NEAR(billions("deepseek-v3"), 671, 1.5);    // DeepSeek: 671B total (without MTP), 37B active
  EXPECT_NEAR(active_params(model_preset("deepseek-v3")) / 1e9, 37, 0.6);
  for (const std::string& name : model_preset_names()) EXPECT_TRUE(model_preset(name).violations().empty()) << name;
}

TEST(PlanModel, FlopsFollowKorthikantiEquation7) {
  const PlanModel m = model_preset("gpt3-175b");
  const double B = 64, L = 96, s = 2048, h = 12288, v = 51200;
  const double eq7 = 72 * B * L * s * h * h * (1 + s / (6 * h) + v / (12 * h * L));
  EXPECT_NEAR(model_flops_per_iteration(m, 64) / eq7, 1.0, 1e-9);
}

TEST(PlanModel, UnknownPresetNamesTheKnownOnes) {
  try {
    model_preset("gpt-5");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("llama3-8b"), std::string::npos) << e.what();
  }
}

TEST(PlanModel, BadSizesAreListed) {
  PlanModel m = model_preset("llama3-8b");
  m.cfg.hidden_size = -5;
  m.cfg.num_layers = 0;
  const std::vector<std::string> v = m.violations();
  ASSERT_GE(v.size(), 2u);
  EXPECT_NE(v[0].find("--num-layers must be positive"), std::string::npos);
}

std::string write_temp(const std::string& name, const nlohmann::json& j) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << j.dump();
  return path;
}

TEST(PlanModel, ReadsHuggingFaceConfigs) {
  // Llama 3.1's config has rope_scaling, which the importer refuses; the planner needs sizes only.
  const PlanModel llama = load_plan_model(write_temp("llama.json", {{"model_type", "llama"}, {"hidden_size", 4096},
      {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"intermediate_size", 14336},
      {"vocab_size", 128256}, {"max_position_embeddings", 131072}, {"rope_scaling", {{"factor", 8.0}}}}));
  EXPECT_NEAR(total_params(llama) / 1e9, 8.03, 0.01);
  EXPECT_EQ(llama.name, ::testing::TempDir() + "llama.json");  // no model named in it: the file
  const PlanModel mixtral = load_plan_model(write_temp("mixtral.json", {{"model_type", "mixtral"}, {"hidden_size", 4096},
      {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"intermediate_size", 14336},
      {"vocab_size", 32000}, {"max_position_embeddings", 32768}, {"num_local_experts", 8}, {"num_experts_per_tok", 2},
      {"_name_or_path", "mistralai/Mixtral-8x7B-v0.1"}}));
  EXPECT_EQ(mixtral.name, "mistralai/Mixtral-8x7B-v0.1");  // the model it was saved from names it
  EXPECT_EQ(total_params(mixtral), total_params(model_preset("mixtral-8x7b")));
  const PlanModel ds = load_plan_model(write_temp("ds.json", {{"model_type", "deepseek_v3"}, {"hidden_size", 7168},
      {"num_hidden_layers", 61}, {"num_attention_heads", 128}, {"num_key_value_heads", 128}, {"intermediate_size", 18432},
      {"moe_intermediate_size", 2048}, {"vocab_size", 129280}, {"max_position_embeddings", 4096}, {"n_routed_experts", 256},
      {"n_shared_experts", 1}, {"num_experts_per_tok", 8}, {"first_k_dense_replace", 3}, {"q_lora_rank", 1536},
      {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128}}));
  EXPECT_EQ(total_params(ds), total_params(model_preset("deepseek-v3")));
  // Qwen3's head dimension 128 is not hidden / heads: --kv-channels.
  const PlanModel qwen = load_plan_model(write_temp("qwen3.json", {{"model_type", "qwen3_moe"}, {"hidden_size", 2048},
      {"num_hidden_layers", 60}, {"num_attention_heads", 64}, {"num_key_value_heads", 4}, {"head_dim", 128},
      {"intermediate_size", 6144}, {"moe_intermediate_size", 768}, {"num_experts", 512}, {"num_experts_per_tok", 10},
      {"vocab_size", 151936}, {"max_position_embeddings", 4096}}));
  EXPECT_EQ(qwen.cfg.kv_channels, 128);
  EXPECT_EQ(total_params(qwen), total_params(model_preset("qwen3-moe-60l")));
}

// Qwen3.5-397B-A17B's config.json (docs/QWEN3_NEXT.md §1: the decoder under text_config, RoPE's
// settings in rope_parameters) read as the importer reads it, its MTP layer from
// mtp_num_hidden_layers: the preset's model.
TEST(PlanModel, ReadsQwen35Configs) {
  const nlohmann::json text = {{"model_type", "qwen3_5_moe_text"}, {"hidden_size", 4096}, {"num_hidden_layers", 60},
      {"num_attention_heads", 32}, {"num_key_value_heads", 2}, {"head_dim", 256}, {"vocab_size", 248320},
      {"max_position_embeddings", 262144}, {"rms_norm_eps", 1e-6}, {"full_attention_interval", 4},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000000}, {"partial_rotary_factor", 0.25},
                           {"mrope_section", {11, 11, 10}}, {"mrope_interleaved", true}}},
      {"linear_conv_kernel_dim", 4}, {"linear_key_head_dim", 128}, {"linear_value_head_dim", 128},
      {"linear_num_key_heads", 16}, {"linear_num_value_heads", 64}, {"num_experts", 512}, {"num_experts_per_tok", 10},
      {"moe_intermediate_size", 1024}, {"shared_expert_intermediate_size", 1024}, {"router_aux_loss_coef", 0.001},
      {"hidden_act", "silu"}, {"attention_bias", false}, {"tie_word_embeddings", false}, {"attn_output_gate", true},
      {"mtp_num_hidden_layers", 1}, {"mtp_use_dedicated_embeddings", false}};
  const PlanModel m = load_plan_model(write_temp("qwen35.json", {{"model_type", "qwen3_5_moe"}, {"text_config", text},
                                                                 {"tie_word_embeddings", false}}));
  const PlanModel preset = model_preset("qwen3.5-397b-a17b");
  EXPECT_EQ(m.cfg.mtp_num_layers, 1);
  EXPECT_EQ(m.cfg.linear.layer_pattern, preset.cfg.linear.layer_pattern);
  EXPECT_EQ(total_params(m), total_params(preset));
  EXPECT_EQ(active_params(m), active_params(preset));
}

TEST(PlanModel, TesselJsonRoundTrips) {
  const PlanModel ds = model_preset("deepseek-v3");
  PlanModel back = load_plan_model(write_temp("round.json", plan_model_to_json(ds)));
  EXPECT_EQ(total_params(back), total_params(ds));
  EXPECT_EQ(back.cfg.moe.layer_pattern, ds.cfg.moe.layer_pattern);
  EXPECT_THROW(load_plan_model(write_temp("bad.json", {{"num_layers", 2}, {"hiden_size", 3}})), Error);
  EXPECT_THROW(load_plan_model("/nonexistent/model.json"), Error);
}

}  // namespace
}  // namespace tessel
