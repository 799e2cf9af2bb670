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
  const PlanModel mixtral = load_plan_model(write_temp("mixtral.json", {{"model_type", "mixtral"}, {"hidden_size", 4096},
      {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"intermediate_size", 14336},
      {"vocab_size", 32000}, {"max_position_embeddings", 32768}, {"num_local_experts", 8}, {"num_experts_per_tok", 2}}));
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
  EXPECT_EQ(qwen.kv_channels, 128);
  EXPECT_EQ(total_params(qwen), total_params(model_preset("qwen3-moe-60l")));
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
