// Qwen3-Next / Qwen3.5 config.json (ckpt/hf_qwen3_next_config.h) and the weights of a real
// Gated DeltaNet model through export_hf / load_hf_weights: every model_type reads back what it
// wrote, the published configs read to their published sizes, each family's folder holds its
// published layout and imports bitwise, a Qwen3-Next folder converted to Qwen3.5's and back is
// the same bytes, and each bad input is one line naming the file and the key.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "ckpt/hf_fixture.h"
#include "tessel/family/qwen3_next.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/model/transformer.h"

namespace tessel {
namespace {

using namespace hf_testing;
using testing::expect_error;

const char* const kTypes[] = {"qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"};

// A narrow Qwen3-Next: GDN layers 0-2 and 4, gated attention at 3, MoE with a gated shared expert.
ModelConfig small_model() {
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  cfg.num_layers = 5;
  cfg.hidden_size = 32;
  cfg.num_attention_heads = 4;
  cfg.num_query_groups = 2;
  cfg.kv_channels = 16;
  cfg.vocab_size = 50;
  cfg.max_position_embeddings = 64;
  cfg.seq_length = 64;
  cfg.rotary_percent = 0.25f;
  cfg.rotary_base = 1e7f;
  cfg.qk_layernorm = true;
  cfg.layernorm_1p = true;
  cfg.attention_output_gate = true;
  cfg.linear.layer_pattern = parse_linear_attention_freq("4", cfg.num_layers);
  cfg.linear.num_key_heads = 2;
  cfg.linear.num_value_heads = 4;
  cfg.linear.key_head_dim = 8;
  cfg.linear.value_head_dim = 6;
  cfg.moe.num_experts = 4;
  cfg.moe.topk = 2;
  cfg.moe.ffn_hidden_size = 12;
  cfg.moe.shared_expert_size = 10;
  cfg.moe.shared_expert_gate = true;
  cfg.moe.aux_loss_coeff = 0.001f;
  cfg.hidden_dropout = 0.0f;  // a Qwen config.json has attention dropout only
  return cfg;
}

// Every field of model_fields() equal, by its JSON form.
void expect_same_fields(const ModelConfig& a, const ModelConfig& b, const std::string& what) {
  for (const ModelField& f : model_fields())
    EXPECT_EQ(model_field_json(f, a), model_field_json(f, b)) << what << ": " << f.flag;
}

ParamRegistry model_registry(const ModelConfig& cfg, uint64_t seed) {
  ParamRegistry r;
  TransformerChunk::declare(cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}}, ChunkPlace{}, r);
  r.finalize();
  r.init_values(seed);
  return r;
}

void write_json(const std::string& file, const nlohmann::json& j) { std::ofstream(file) << j.dump(2); }

TEST(HfQwen3NextConfig, EveryModelTypeReadsBackWhatItWrote) {
  ModelConfig other = small_model();  // options the families fix, set otherwise
  other.attention_output_gate = false;
  other.layernorm_1p = false;
  other.moe.shared_expert_gate = false;
  other.moe.pre_softmax = true;
  other.moe.layer_pattern = {1, 0, 1, 1, 1};
  other.linear.layer_pattern = {1, 0, 1, 0, 1};
  other.ffn_hidden_size = 24;
  for (const ModelConfig& cfg : {small_model(), other}) {
    for (const char* type : kTypes) {
      const nlohmann::json j = qwen3_next_config_json(cfg, type);
      EXPECT_EQ(j["model_type"], type);
      const ModelConfig back = model_config_from_hf(j, "config.json");
      expect_same_fields(cfg, back, type);
      EXPECT_EQ(back.num_parameters(), cfg.num_parameters()) << type;
      EXPECT_EQ(qwen3_next_config_json(back, type), j) << type;
    }
  }
  // A checkpoint's description (hf_config_json) is the decoder alone.
  EXPECT_EQ(hf_config_json(small_model())["model_type"], "qwen3_5_moe_text");
  EXPECT_FALSE(qwen3_next_config_json(small_model(), "qwen3_next").contains("tessel_options"));
  EXPECT_TRUE(qwen3_next_config_json(other, "qwen3_next").contains("tessel_options"));
}

// Qwen3-Next-80B-A3B's config.json and Qwen3.5-397B-A17B's (../shared/QWEN3_NEXT.md §1).
nlohmann::json qwen3_next_80b() {
  return {{"model_type", "qwen3_next"}, {"architectures", {"Qwen3NextForCausalLM"}},
          {"hidden_size", 2048}, {"num_hidden_layers", 48}, {"num_attention_heads", 16},
          {"num_key_value_heads", 2}, {"head_dim", 256}, {"partial_rotary_factor", 0.25},
          {"rope_theta", 10000000}, {"full_attention_interval", 4}, {"linear_num_key_heads", 16},
          {"linear_num_value_heads", 32}, {"linear_key_head_dim", 128},
          {"linear_value_head_dim", 128}, {"linear_conv_kernel_dim", 4}, {"num_experts", 512},
          {"num_experts_per_tok", 10}, {"moe_intermediate_size", 512},
          {"shared_expert_intermediate_size", 512}, {"intermediate_size", 5120},
          {"norm_topk_prob", true}, {"router_aux_loss_coef", 0.001}, {"rms_norm_eps", 1e-6},
          {"vocab_size", 151936}, {"tie_word_embeddings", false},
          {"max_position_embeddings", 262144}, {"hidden_act", "silu"}, {"attention_bias", false},
          {"decoder_sparse_step", 1}, {"mlp_only_layers", nlohmann::json::array()}};
}

nlohmann::json qwen3_5_397b() {
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < 60; ++i) types.push_back((i + 1) % 4 ? "linear_attention" : "full_attention");
  const nlohmann::json text = {
      {"model_type", "qwen3_5_moe_text"}, {"hidden_size", 4096}, {"num_hidden_layers", 60},
      {"layer_types", types}, {"num_attention_heads", 32}, {"num_key_value_heads", 2},
      {"head_dim", 256},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000000},
                           {"partial_rotary_factor", 0.25}, {"mrope_section", {11, 11, 10}},
                           {"mrope_interleaved", true}}},
      {"linear_num_key_heads", 16}, {"linear_num_value_heads", 64}, {"linear_key_head_dim", 128},
      {"linear_value_head_dim", 128}, {"linear_conv_kernel_dim", 4}, {"num_experts", 512},
      {"num_experts_per_tok", 10}, {"moe_intermediate_size", 1024},
      {"shared_expert_intermediate_size", 1024}, {"router_aux_loss_coef", 0.001},
      {"rms_norm_eps", 1e-6}, {"vocab_size", 248320}, {"max_position_embeddings", 262144},
      {"hidden_act", "silu"}, {"attention_bias", false}, {"attn_output_gate", true},
      {"mtp_num_hidden_layers", 1}, {"mtp_use_dedicated_embeddings", false},
      {"mamba_ssm_dtype", "float32"}};
  return {{"model_type", "qwen3_5_moe"}, {"tie_word_embeddings", false}, {"text_config", text},
          {"vision_config", {{"depth", 27}}}};
}

TEST(HfQwen3NextConfig, PublishedConfigsReadToTheirSizes) {
  const ModelConfig next = model_config_from_hf(qwen3_next_80b(), "80b/config.json");
  EXPECT_EQ(next.num_layers, 48);
  EXPECT_EQ(next.head_dim(), 256);
  EXPECT_EQ(next.rotary_dim(), 64);
  EXPECT_EQ(next.linear.is_linear_layer(2), true);
  EXPECT_EQ(next.linear.is_linear_layer(3), false);
  EXPECT_EQ(next.linear.is_linear_layer(47), false);
  EXPECT_TRUE(next.qk_layernorm && next.layernorm_1p && next.attention_output_gate);
  EXPECT_TRUE(next.moe.shared_expert_gate);
  EXPECT_FALSE(next.moe.pre_softmax);  // renormalised top-k
  EXPECT_EQ(next.rotary_base, 1e7f);
  EXPECT_EQ(next.seq_length, 262144);
  // "80B": the decoder without the MTP layer, which transformers does not load.
  EXPECT_NEAR(next.num_parameters() / 1e9, 79.7, 1.5) << next.num_parameters();

  const ModelConfig q35 = model_config_from_hf(qwen3_5_397b(), "397b/config.json");
  EXPECT_EQ(q35.num_layers, 60);
  EXPECT_EQ(q35.linear.num_value_heads, 64);
  EXPECT_EQ(q35.moe.ffn_hidden_size, 1024);
  EXPECT_FALSE(q35.moe.pre_softmax);
  EXPECT_EQ(q35.mtp_num_layers, 1);  // mtp_num_hidden_layers
  // "397B" holds the vision encoder too (about 0.4B) but not the MTP layer (about 6.6B), which the
  // decoder here has.
  EXPECT_NEAR(q35.num_parameters() / 1e9, 403.0, 8.0) << q35.num_parameters();
}

TEST(HfQwen3NextConfig, AMissingSizeIsOneLineNamingTheKey) {
  for (const char* key :
       {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "vocab_size", "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
        "linear_num_key_heads", "linear_num_value_heads", "num_experts", "num_experts_per_tok",
        "moe_intermediate_size"}) {
    nlohmann::json next = qwen3_next_80b();
    next.erase(key);
    expect_error([&] { model_config_from_hf(next, "m/config.json"); },
                 {"m/config.json", fmt::format("missing key '{}'", key)});
    nlohmann::json q35 = qwen3_5_397b();
    q35["text_config"].erase(key);
    expect_error([&] { model_config_from_hf(q35, "q/config.json"); },
                 {"q/config.json: text_config", fmt::format("missing key '{}'", key)});
  }
  nlohmann::json no_text = qwen3_5_397b();
  no_text.erase("text_config");
  expect_error([&] { model_config_from_hf(no_text, "q/config.json"); },
               {"q/config.json", "missing key 'text_config'"});
}

TEST(HfQwen3NextConfig, SettingsTesselCannotReproduceAreRefused) {
  const std::vector<std::pair<nlohmann::json, std::string>> bad = {
      {{{"hidden_act", "gelu"}}, "hidden_act 'gelu'"},
      {{{"attention_bias", true}}, "attention_bias true"},
      {{{"tie_word_embeddings", true}}, "tie_word_embeddings true"},
      {{{"decoder_sparse_step", 2}}, "decoder_sparse_step 2"},
      {{{"rope_scaling", {{"type", "yarn"}}}}, "rope_scaling"},
      {{{"layer_types", {"linear_attention"}}}, "layer_types is not a list of 48"},
      {{{"linear_num_value_heads", 24}}, "24"},
  };
  for (const auto& [patch, part] : bad) {
    nlohmann::json j = qwen3_next_80b();
    j.update(patch);
    expect_error([&] { model_config_from_hf(j, "m/config.json"); }, {"m/config.json", part});
  }
  nlohmann::json q35 = qwen3_5_397b();
  q35["text_config"]["mtp_use_dedicated_embeddings"] = true;
  expect_error([&] { model_config_from_hf(q35, "q/config.json"); },
               {"q/config.json: text_config", "mtp_use_dedicated_embeddings"});
}

class HfQwen3NextWeights : public HfTest {};

TEST_F(HfQwen3NextWeights, EachFamilyWritesItsLayoutAndImportsBitwise) {
  const ModelConfig cfg = small_model();
  const ParamRegistry original = model_registry(cfg, 7);
  for (const char* type : kTypes) {
    const std::string dir = path(type);
    export_hf(original, cfg, dir, type);
    EXPECT_EQ(read_json(dir + "/config.json")["model_type"], type);
    const SafetensorsReader reader(dir + "/model.safetensors");
    const std::string prefix = std::string(type) == "qwen3_5_moe" ? "model.language_model." : "model.";
    EXPECT_EQ(reader.has(prefix + "layers.0.linear_attn.in_proj_qkvz.weight"),
              std::string(type) == "qwen3_next") << type;
    EXPECT_EQ(reader.has(prefix + "layers.0.mlp.experts.gate_up_proj"),
              std::string(type) != "qwen3_next") << type;
    EXPECT_TRUE(reader.has("lm_head.weight")) << type;

    const std::optional<ModelConfig> read = hf_config_beside(dir);
    ASSERT_TRUE(read.has_value());
    expect_same_fields(cfg, *read, type);
    ParamRegistry loaded = model_registry(*read, 99);
    load_hf_weights(loaded, *read, dir);
    expect_same_values(original, loaded);
  }
}

TEST_F(HfQwen3NextWeights, ANextFolderConvertedToQwen35AndBackIsTheSameBytes) {
  const ModelConfig cfg = small_model();
  export_hf(model_registry(cfg, 3), cfg, path("next"), "qwen3_next");
  const auto convert = [&](const std::string& from, const std::string& to, const std::string& type) {
    const ModelConfig c = *hf_config_beside(path(from));
    ParamRegistry r = model_registry(c, 1);
    load_hf_weights(r, c, path(from));
    export_hf(r, c, path(to), type);
  };
  convert("next", "qwen35", "qwen3_5_moe");
  convert("qwen35", "back", "qwen3_next");
  EXPECT_EQ(bytes_of(path("back/model.safetensors")), bytes_of(path("next/model.safetensors")));
  EXPECT_EQ(bytes_of(path("back/config.json")), bytes_of(path("next/config.json")));
}

TEST_F(HfQwen3NextWeights, AFolderOfTheOtherLayoutIsRefusedByItsModelType) {
  const ModelConfig cfg = small_model();
  const ParamRegistry original = model_registry(cfg, 5);
  export_hf(original, cfg, path("next"), "qwen3_next");
  nlohmann::json j = read_json(path("next/config.json"));
  j["model_type"] = "qwen3_5_moe_text";
  write_json(path("next/config.json"), j);
  ParamRegistry r = model_registry(cfg, 1);
  expect_error([&] { load_hf_weights(r, cfg, path("next")); },
               {"model.safetensors", "in_proj_qkvz", "Qwen3-Next's grouped GDN layout",
                "qwen3_5_moe_text"});

  export_hf(original, cfg, path("flat"), "qwen3_5_moe_text");
  j = read_json(path("flat/config.json"));
  j["model_type"] = "qwen3_next";
  write_json(path("flat/config.json"), j);
  expect_error([&] { load_hf_weights(r, cfg, path("flat")); },
               {"model.safetensors", "Qwen3.5's flat GDN layout", "qwen3_next"});
  expect_error([&] { export_hf(model_registry(small_llama(), 1), small_llama(), path("x"), "qwen3_next"); },
               {"qwen3_next", "Gated DeltaNet"});
}

}  // namespace
}  // namespace tessel
