// The Hugging Face import/export tests' fixture: a temporary folder, small models, registries
// built by hand (so these tests do not depend on the model classes), and comparisons.
#pragma once

#include <gtest/gtest.h>

#include "support/fixtures.h"
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tessel/ckpt/hf.h"
#include "tessel/ckpt/hf_import.h"
#include "tessel/core/error.h"
#include "tessel/core/params.h"
#include "tessel/model/config.h"

namespace tessel::hf_testing {

namespace fs = std::filesystem;

class HfTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.path(name); }

  testing::TestDir dir_;
};


// The parameters the models register, by name and global shape, in their order. Built by hand
// here so these tests do not depend on the model classes. `shards` overrides the spec by name.
inline void add_gpt2(ParamRegistry& r, const ModelConfig& c,
              const std::unordered_map<std::string, ShardSpec>& shards = {}) {
  const int64_t C = c.hidden_size, V = c.vocab_size, P = c.max_positions(), F = c.ffn_size();
  auto add = [&](const std::string& name, Shape shape) {
    auto it = shards.find(name);
    r.add(name, std::move(shape), ParamInit::Normal, 0.02f, true,
          it == shards.end() ? ShardSpec{} : it->second);
  };
  add("transformer.wte.weight", {V, C});
  add("transformer.wpe.weight", {P, C});
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string h = fmt::format("transformer.h.{}.", l);
    add(h + "ln_1.weight", {C});
    add(h + "ln_1.bias", {C});
    add(h + "attn.c_attn.weight", {C, 3 * C});
    add(h + "attn.c_attn.bias", {3 * C});
    add(h + "attn.c_proj.weight", {C, C});
    add(h + "attn.c_proj.bias", {C});
    add(h + "ln_2.weight", {C});
    add(h + "ln_2.bias", {C});
    add(h + "mlp.c_fc.weight", {C, F});
    add(h + "mlp.c_fc.bias", {F});
    add(h + "mlp.c_proj.weight", {F, C});
    add(h + "mlp.c_proj.bias", {C});
  }
  add("transformer.ln_f.weight", {C});
  add("transformer.ln_f.bias", {C});
}

inline void add_llama(ParamRegistry& r, const ModelConfig& c) {
  const int64_t C = c.hidden_size, V = c.vocab_size, F = c.ffn_size();
  const int64_t q = static_cast<int64_t>(c.num_attention_heads) * c.head_dim();
  const int64_t kv = static_cast<int64_t>(c.query_groups()) * c.head_dim();
  auto add = [&](const std::string& name, Shape shape) {
    r.add(name, std::move(shape), ParamInit::Normal, 0.02f, true);
  };
  add("model.embed_tokens.weight", {V, C});
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    add(p + "input_layernorm.weight", {C});
    add(p + "self_attn.q_proj.weight", {q, C});
    add(p + "self_attn.k_proj.weight", {kv, C});
    add(p + "self_attn.v_proj.weight", {kv, C});
    add(p + "self_attn.o_proj.weight", {C, q});
    add(p + "post_attention_layernorm.weight", {C});
    add(p + "mlp.gate_proj.weight", {F, C});
    add(p + "mlp.up_proj.weight", {F, C});
    add(p + "mlp.down_proj.weight", {C, F});
  }
  add("model.norm.weight", {C});
  add("lm_head.weight", {V, C});
}

inline ModelConfig small_gpt2() {
  ModelConfig c;
  c.arch = Arch::GPT2;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.seq_length = 6;
  c.max_position_embeddings = 12;
  c.vocab_size = 20;
  return c;
}

inline ModelConfig small_llama() {
  ModelConfig c;
  c.arch = Arch::Llama;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.ffn_hidden_size = 24;
  c.seq_length = 10;
  c.vocab_size = 30;
  c.norm_epsilon = 1e-6f;
  c.rotary_base = 500000.0f;
  return c;
}

inline ParamRegistry make_registry(const ModelConfig& c, uint64_t seed) {
  ParamRegistry r;
  if (c.arch == Arch::GPT2)
    add_gpt2(r, c);
  else
    add_llama(r, c);
  r.finalize();
  r.init_values(seed);
  return r;
}

inline void expect_same_values(const ParamRegistry& a, const ParamRegistry& b) {
  ASSERT_EQ(a.numel(), b.numel());
  for (const Param& p : a.params()) {
    const Param& q = b.get(p.name);
    ASSERT_EQ(p.numel(), q.numel()) << p.name;
    EXPECT_EQ(std::memcmp(p.value, q.value, p.numel() * sizeof(float)), 0) << p.name;
  }
}

// A whole file's bytes, for comparing written files.
inline std::string bytes_of(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline nlohmann::json read_json(const std::string& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

inline void expect_same_sizes(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.query_groups(), b.query_groups());
  EXPECT_EQ(a.ffn_size(), b.ffn_size());
  EXPECT_EQ(a.max_positions(), b.max_positions());
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.norm_epsilon, b.norm_epsilon);
  EXPECT_EQ(a.num_parameters(), b.num_parameters());
  if (a.arch == Arch::Llama) {
    EXPECT_EQ(a.rotary_base, b.rotary_base);
  }
}

}  // namespace tessel::hf_testing
