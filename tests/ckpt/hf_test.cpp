#include "tessel/ckpt/hf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "tessel/ckpt/safetensors.h"
#include "tessel/core/error.h"
#include "tessel/core/philox.h"
#include "tessel/model/transformer.h"

#include "ckpt/hf_fixture.h"

namespace tessel {
namespace {

using namespace hf_testing;
using testing::expect_error;
using testing::error_of;
namespace fs = std::filesystem;

TEST_F(HfTest, ExportLoadRoundTripGpt2) {
  const ModelConfig cfg = small_gpt2();
  const ParamRegistry saved = make_registry(cfg, 1);
  EXPECT_EQ(saved.numel(), cfg.num_parameters());
  export_hf(saved, cfg, path("gpt2"));

  ParamRegistry loaded = make_registry(cfg, 2);
  ASSERT_NE(std::memcmp(saved.params()[0].value, loaded.params()[0].value, 4), 0);
  load_hf_weights(loaded, cfg, path("gpt2"));  // the folder finds model.safetensors
  expect_same_values(saved, loaded);

  SafetensorsReader reader(path("gpt2/model.safetensors"));
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.tensors().size(), saved.params().size());
  EXPECT_FALSE(reader.has("lm_head.weight"));  // tied to wte

  const nlohmann::json j = read_json(path("gpt2/config.json"));
  EXPECT_EQ(j.at("architectures").at(0), "GPT2LMHeadModel");
  EXPECT_EQ(j.at("model_type"), "gpt2");
  EXPECT_TRUE(j.at("n_inner").is_null());  // 4·hidden
  EXPECT_EQ(j.at("activation_function"), "gelu");  // Megatron's default GELU, the exact one
  std::optional<ModelConfig> beside = hf_config_beside(path("gpt2/model.safetensors"));
  ASSERT_TRUE(beside.has_value());
  expect_same_sizes(cfg, *beside);
  EXPECT_FALSE(beside->openai_gelu);
  ModelConfig tanh_form = cfg;  // --openai-gelu: GPT-2's own gelu_new, both ways
  tanh_form.openai_gelu = true;
  export_hf(saved, tanh_form, path("gpt2_tanh"));
  EXPECT_EQ(read_json(path("gpt2_tanh/config.json")).at("activation_function"), "gelu_new");
  EXPECT_TRUE(hf_config_beside(path("gpt2_tanh/model.safetensors"))->openai_gelu);
  EXPECT_EQ(beside->seq_length, cfg.max_positions());
}

TEST_F(HfTest, ExportLoadRoundTripLlama) {
  const ModelConfig cfg = small_llama();
  const ParamRegistry saved = make_registry(cfg, 3);
  EXPECT_EQ(saved.numel(), cfg.num_parameters());
  export_hf(saved, cfg, path("llama"));
  ParamRegistry loaded = make_registry(cfg, 4);
  load_hf_weights(loaded, cfg, path("llama/model.safetensors"));
  expect_same_values(saved, loaded);

  const nlohmann::json j = read_json(path("llama/config.json"));
  EXPECT_EQ(j.at("architectures").at(0), "LlamaForCausalLM");
  EXPECT_EQ(j.at("num_key_value_heads"), 2);
  EXPECT_EQ(j.at("head_dim"), 4);
  EXPECT_EQ(j.at("intermediate_size"), 24);
  EXPECT_EQ(j.at("tie_word_embeddings"), false);
  EXPECT_EQ(j.at("rms_norm_eps").get<double>(), 1e-6);  // written short, not as a float's double
  std::optional<ModelConfig> beside = hf_config_beside(path("llama"));
  ASSERT_TRUE(beside.has_value());
  expect_same_sizes(cfg, *beside);
  EXPECT_FALSE(hf_config_beside(path("nothing_here.safetensors")).has_value());
}

TEST_F(HfTest, ConfigRoundTrip) {
  ModelConfig gpt2 = small_gpt2();
  expect_same_sizes(gpt2, model_config_from_hf(hf_config_json(gpt2), "g"));
  gpt2.ffn_hidden_size = 20;  // not 4·hidden: n_inner is written
  EXPECT_EQ(hf_config_json(gpt2).at("n_inner"), 20);
  expect_same_sizes(gpt2, model_config_from_hf(hf_config_json(gpt2), "g"));

  ModelConfig llama = small_llama();
  expect_same_sizes(llama, model_config_from_hf(hf_config_json(llama), "l"));
  llama.num_query_groups = 0;  // plain multi-head attention
  llama.hidden_size = 96;
  llama.ffn_hidden_size = 0;  // the rounded default (256), written out explicitly
  const nlohmann::json j = hf_config_json(llama);
  EXPECT_EQ(j.at("num_key_value_heads"), 4);
  EXPECT_EQ(j.at("intermediate_size"), 256);
  expect_same_sizes(llama, model_config_from_hf(j, "l"));
}

TEST_F(HfTest, ConfigFromRealGpt2Json) {
  // The fields of openai-community/gpt2's config.json that tessel reads.
  const nlohmann::json j = nlohmann::json::parse(R"({
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
    "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
    "resid_pdrop": 0.1, "vocab_size": 50257})");
  const ModelConfig c = model_config_from_hf(j, "config.json");
  EXPECT_EQ(c.arch, Arch::GPT2);
  EXPECT_EQ(c.num_layers, 12);
  EXPECT_EQ(c.hidden_size, 768);
  EXPECT_EQ(c.ffn_size(), 3072);
  EXPECT_EQ(c.seq_length, 1024);
  EXPECT_EQ(c.num_parameters(), 124439808);  // GPT-2 small as Hugging Face counts it
}

TEST_F(HfTest, ConfigErrors) {
  nlohmann::json j = hf_config_json(small_llama());
  j["model_type"] = "bert";
  expect_error([&] { model_config_from_hf(j, "cfg.json"); }, {"cfg.json", "model_type 'bert'"});
  j = hf_config_json(small_llama());
  j.erase("hidden_size");
  expect_error([&] { model_config_from_hf(j, "cfg.json"); },
               {"cfg.json", "missing key 'hidden_size'"});
  j = hf_config_json(small_llama());
  j["attention_bias"] = true;
  expect_error([&] { model_config_from_hf(j, "cfg.json"); }, {"cfg.json", "attention_bias"});
  j = hf_config_json(small_llama());
  j["num_key_value_heads"] = 3;
  expect_error([&] { model_config_from_hf(j, "cfg.json"); }, {"cfg.json", "not divisible"});
  j = hf_config_json(small_gpt2());
  j["n_embd"] = "big";
  expect_error([&] { model_config_from_hf(j, "cfg.json"); },
               {"cfg.json", "'n_embd' has a value of the wrong type (\"big\")"});
  expect_error([&] { model_config_from_hf(nlohmann::json::object(), "cfg.json"); },
               {"cfg.json", "no model_type"});
}

// Every key problem of a config.json in one message naming the file once, for the importer and
// the planner alike; a check that read the zero standing for a missing key is not reported.
TEST_F(HfTest, ConfigKeyProblemsAllInOneMessage) {
  nlohmann::json j = hf_config_json(small_gpt2());
  j.erase("n_embd");
  j.erase("n_layer");
  j["n_head"] = "many";
  for (const std::string& got : {error_of([&] { model_config_from_hf(j, "cfg.json"); }),
                                 error_of([&] { planner_sizes_from_hf(j, "cfg.json"); })}) {
    EXPECT_EQ(got.find("cfg.json: "), 0u) << got;
    EXPECT_EQ(got.find("cfg.json", 1), std::string::npos) << got;
    for (const char* part : {"missing key 'n_embd'", "missing key 'n_layer'", "key 'n_head' has a value of the wrong type"})
      EXPECT_NE(got.find(part), std::string::npos) << part << ": " << got;
  }
  // mlp_only_layers is checked against the layers, which are missing.
  j = hf_config_json(small_llama());
  j.update({{"model_type", "qwen2_moe"}, {"num_experts", 4}, {"num_experts_per_tok", 2},
            {"moe_intermediate_size", 8}, {"mlp_only_layers", {1}}});
  j.erase("num_hidden_layers");
  EXPECT_EQ(error_of([&] { model_config_from_hf(j, "cfg.json"); }), "cfg.json: missing key 'num_hidden_layers'");
}

// A whole model of `cfg` in one process, its registry finalized (values not yet set).
struct WholeModel {
  explicit WholeModel(const ModelConfig& c)
      : cfg(c),
        chunk(cpu_kernels(), params, cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}},
              ChunkGroups::one_process(cpu_kernels())) {
    params.finalize();
    chunk.bind(params);
  }

  // The loss on fixed tokens.
  double loss() {
    ChunkActivations acts = chunk.make_activations();
    std::vector<int32_t> tokens, targets;
    for (int64_t i = 0; i < cfg.seq_length; ++i) {
      tokens.push_back(static_cast<int32_t>(random_bits(8, 1, i) % cfg.vocab_size));
      targets.push_back(static_cast<int32_t>(random_bits(8, 2, i) % cfg.vocab_size));
    }
    return chunk.forward(acts, {{"tokens", tokens.data()}, {"targets", targets.data()}}, nullptr, 0.0f);
  }

  ModelConfig cfg;
  ParamRegistry params;
  TransformerChunk chunk;
};

// The llama architecture's Hugging Face model types, chosen by the attention options and experts:
// export → config.json → import gives the same config, the same parameters and the same loss.
// Biases and norm weights are moved off their initial zeros and ones so that a lost one shows.
struct FamilyCase {
  const char* model_type;
  const char* architecture;
  bool qkv_bias, qk_layernorm, moe;
  bool exact;  // false: config.json carries tessel's options in "tessel_attention"
};

void PrintTo(const FamilyCase& c, std::ostream* os) { *os << c.model_type; }

class HfFamily : public HfTest, public ::testing::WithParamInterface<FamilyCase> {};

TEST_P(HfFamily, ExportImportGivesTheSameLoss) {
  const FamilyCase& fc = GetParam();
  ModelConfig cfg = small_llama();
  cfg.add_qkv_bias = fc.qkv_bias;
  cfg.qk_layernorm = fc.qk_layernorm;
  if (fc.moe) {
    cfg.moe.num_experts = 4;
    cfg.moe.topk = 2;
    cfg.moe.ffn_hidden_size = 8;
    cfg.moe.layer_pattern = {1, 0};
    cfg.moe.shared_expert_size = fc.qk_layernorm ? 0 : 12;  // qwen3_moe has no shared expert
    cfg.moe.shared_expert_gate = cfg.moe.shared_expert_size > 0;  // qwen2_moe's is gated
  }
  WholeModel saved(cfg);
  saved.params.init_values(9);
  for (Param& p : saved.params.params())
    if (p.init != ParamInit::Normal)
      for (int64_t i = 0; i < p.numel(); ++i) p.value[i] += 0.5f * random_normal(6, p.offset, i);
  const double loss = saved.loss();
  export_hf(saved.params, cfg, path("out"));

  const nlohmann::json j = read_json(path("out/config.json"));
  EXPECT_EQ(j.at("model_type"), fc.model_type);
  EXPECT_EQ(j.at("architectures").at(0), fc.architecture);
  EXPECT_EQ(j.contains("tessel_attention"), !fc.exact) << j.dump();
  SafetensorsReader reader(path("out/model.safetensors"));
  EXPECT_EQ(reader.has("model.layers.1.self_attn.k_proj.bias"), fc.qkv_bias);
  EXPECT_EQ(reader.has("model.layers.0.self_attn.q_norm.weight"), fc.qk_layernorm);

  std::optional<ModelConfig> read = hf_config_beside(path("out"));
  ASSERT_TRUE(read.has_value());
  ModelConfig back = *read;
  expect_same_sizes(cfg, back);
  EXPECT_EQ(back.add_qkv_bias, fc.qkv_bias);
  EXPECT_EQ(back.qk_layernorm, fc.qk_layernorm);
  EXPECT_EQ(back.moe.num_experts, cfg.moe.num_experts);
  back.seq_length = cfg.seq_length;
  WholeModel reloaded(back);
  load_hf_weights(reloaded.params, back, path("out"));
  expect_same_values(saved.params, reloaded.params);
  EXPECT_EQ(reloaded.loss(), loss);
}

INSTANTIATE_TEST_SUITE_P(
    ModelTypes, HfFamily,
    ::testing::Values(FamilyCase{"llama", "LlamaForCausalLM", false, false, false, true},
                      FamilyCase{"qwen2", "Qwen2ForCausalLM", true, false, false, true},
                      FamilyCase{"qwen3", "Qwen3ForCausalLM", false, true, false, true},
                      FamilyCase{"qwen2_moe", "Qwen2MoeForCausalLM", true, false, true, true},
                      FamilyCase{"qwen3_moe", "Qwen3MoeForCausalLM", false, true, true, true},
                      // No model_type fits these exactly: the nearest, plus tessel's options.
                      FamilyCase{"qwen2_moe", "Qwen2MoeForCausalLM", false, false, true, false},
                      FamilyCase{"qwen3", "Qwen3ForCausalLM", true, true, false, false}),
    [](const auto& info) {
      const FamilyCase& c = info.param;
      return std::string(c.model_type) + (c.exact ? "" : c.moe ? "_without_bias" : "_with_bias");
    });

// A Llama with zero-centred norms (--apply-layernorm-1p, w initialised 0, the model's gain 1 + w)
// is written as transformers' Llama holds it, gain 1 + w in the file, with tessel_layernorm_1p
// recorded: read back by tessel it is the trained model again (1 taken away), read as a plain
// Llama (as transformers does) it is the same function. Both give the trained loss.
TEST_F(HfTest, ZeroCentredNormsAreWrittenAsTheirGain) {
  ModelConfig cfg = small_llama();
  cfg.layernorm_1p = true;
  cfg.qk_layernorm = true;
  WholeModel saved(cfg);
  saved.params.init_values(9);
  for (Param& p : saved.params.params())  // trained-looking gains: 1 + w with w ~ 0.1·N(0, 1)
    if (p.zero_centred)
      for (int64_t i = 0; i < p.numel(); ++i) p.value[i] += 0.1f * random_normal(6, p.offset, i);
  const double loss = saved.loss();
  export_hf(saved.params, cfg, path("out"));

  const nlohmann::json j = read_json(path("out/config.json"));
  EXPECT_EQ(j.at("model_type"), "qwen3");
  EXPECT_EQ(j.value("tessel_layernorm_1p", false), true);
  SafetensorsReader reader(path("out/model.safetensors"));
  for (const char* name : {"model.layers.0.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight",
                           "model.layers.0.self_attn.q_norm.weight", "model.norm.weight"}) {
    const Param& p = saved.params.get(name);
    ASSERT_TRUE(p.zero_centred) << name;
    ASSERT_EQ(shape_numel(reader.tensor(name).shape), p.numel()) << name;
    std::vector<float> file(p.numel());
    reader.read(name, file.data());
    for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(file[i], 1.0f + p.value[i]) << name << " " << i;
  }
  EXPECT_FALSE(saved.params.get("model.layers.0.self_attn.q_proj.weight").zero_centred);

  const std::optional<ModelConfig> read = hf_config_beside(path("out"));
  ASSERT_TRUE(read.has_value());
  for (const bool zero_centred : {true, false}) {  // tessel's reading, then transformers'
    ModelConfig back = *read;
    EXPECT_TRUE(back.layernorm_1p);
    back.layernorm_1p = zero_centred;
    back.seq_length = cfg.seq_length;
    WholeModel reloaded(back);
    load_hf_weights(reloaded.params, back, path("out"));
    EXPECT_EQ(reloaded.loss(), loss) << "read as zero-centred: " << zero_centred;
  }
}

// What the model types say about attention: qwen2 always has q/k/v biases, qwen3 always QK-norm;
// attention_bias true means an o_proj bias as well where it is read (llama, qwen3), which tessel
// lacks; sliding-window attention is refused.
TEST_F(HfTest, LlamaFamilyAttentionKeys) {
  // The keys of Qwen/Qwen2-7B's config.json that tessel reads.
  const nlohmann::json qwen2 = nlohmann::json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 152064})");
  const ModelConfig c = model_config_from_hf(qwen2, "config.json");
  EXPECT_TRUE(c.add_qkv_bias);
  EXPECT_FALSE(c.qk_layernorm);
  EXPECT_EQ(c.num_parameters(), 7615616512);  // Qwen2-7B's 7.62B

  nlohmann::json j = qwen2;
  j["use_sliding_window"] = true;
  expect_error([&] { model_config_from_hf(j, "cfg.json"); }, {"cfg.json", "use_sliding_window"});

  ModelConfig qk = small_llama();
  qk.qk_layernorm = true;
  j = hf_config_json(qk);
  EXPECT_EQ(j.at("attention_bias"), false);
  j["attention_bias"] = true;
  expect_error([&] { model_config_from_hf(j, "cfg.json"); },
               {"cfg.json", "attention_bias", "o_proj"});
  j = hf_config_json(small_llama());
  j["attention_bias"] = true;
  expect_error([&] { model_config_from_hf(j, "cfg.json"); },
               {"cfg.json", "attention_bias true", "llama", "o_proj"});
  ModelConfig gpt2 = small_gpt2();
  gpt2.add_qkv_bias = true;
  expect_error([&] { gpt2.validate(); }, {"--add-qkv-bias needs --arch llama"});

  // qwen3_moe has no shared expert: such a model is refused rather than written without it.
  qk.moe.num_experts = 4;
  qk.moe.shared_expert_size = 8;
  expect_error([&] { export_hf(ParamRegistry{}, qk, path("x")); },
               {path("x"), "qwen3_moe", "shared expert"});
}

// A Hugging Face GPT-2 file: names without "transformer.", the attention-mask buffers, and the
// tied LM head, in the file's own order.
TEST_F(HfTest, LoadsHuggingFaceGpt2Names) {
  const ModelConfig cfg = small_gpt2();
  const ParamRegistry saved = make_registry(cfg, 5);
  const int64_t P = cfg.max_positions();
  std::vector<float> mask(P * P, 1.0f), masked_bias{-1e4f};
  std::vector<SafetensorsEntry> entries;
  for (int l = 0; l < cfg.num_layers; ++l) {
    entries.push_back({fmt::format("h.{}.attn.bias", l), {1, 1, P, P}, mask.data()});
    entries.push_back({fmt::format("h.{}.attn.masked_bias", l), {}, masked_bias.data()});
  }
  for (auto it = saved.params().rbegin(); it != saved.params().rend(); ++it)
    entries.push_back({it->name.substr(std::strlen("transformer.")), it->global_shape, it->value});
  const Param& wte = saved.get("transformer.wte.weight");
  entries.push_back({"lm_head.weight", wte.global_shape, wte.value});
  write_safetensors(path("hf.safetensors"), entries, {{"format", "pt"}});

  ParamRegistry loaded = make_registry(cfg, 6);
  load_hf_weights(loaded, cfg, path("hf.safetensors"));
  expect_same_values(saved, loaded);
}

// Tensor-parallel shards take their slice of the full tensor: c_attn splits each of q, k and v
// (three sections) along the columns, c_proj splits rows.
TEST_F(HfTest, LoadsShardSlices) {
  const ModelConfig cfg = small_gpt2();
  const ParamRegistry full = make_registry(cfg, 7);
  write_safetensors(path("full.safetensors"), [&] {
    std::vector<SafetensorsEntry> e;
    for (const Param& p : full.params()) e.push_back({p.name, p.global_shape, p.value});
    return e;
  }());
  const int64_t C = cfg.hidden_size;
  for (int rank = 0; rank < 2; ++rank) {
    ParamRegistry shard;
    add_gpt2(shard, cfg,
             {{"transformer.h.1.attn.c_attn.weight", {1, ShardGroup::TP, rank, 2, {C, C, C}}},
              {"transformer.h.1.attn.c_proj.weight", {0, ShardGroup::TP, rank, 2}}});
    shard.finalize();
    load_hf_weights(shard, cfg, path("full.safetensors"));

    const Param& qkv = shard.get("transformer.h.1.attn.c_attn.weight");
    const float* g = full.get("transformer.h.1.attn.c_attn.weight").value;
    ASSERT_EQ(qkv.local_shape, (Shape{C, 3 * C / 2}));
    const int64_t half = C / 2;  // each of q, k, v contributes `half` columns to a rank
    for (int64_t row = 0; row < C; ++row)
      for (int part = 0; part < 3; ++part)
        for (int64_t col = 0; col < half; ++col)
          ASSERT_EQ(qkv.value[row * 3 * half + part * half + col],
                    g[row * 3 * C + part * C + rank * half + col]);

    const Param& proj = shard.get("transformer.h.1.attn.c_proj.weight");
    const float* gp = full.get("transformer.h.1.attn.c_proj.weight").value;
    EXPECT_EQ(std::memcmp(proj.value, gp + rank * half * C, half * C * sizeof(float)), 0);

    expect_error([&] { export_hf(shard, cfg, path("out")); },
                 {"transformer.h.1.attn.c_attn.weight", "split over 2 ranks"});
  }
}

}  // namespace
}  // namespace tessel
