// The model's architecture and sizes, named after Megatron-LM's flags.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessel {

enum class Arch : uint8_t { GPT2, Llama };

std::string arch_name(Arch arch);
Arch parse_arch(const std::string& name);  // "gpt2" | "llama"; throws on anything else

struct ModelConfig {
  Arch arch = Arch::GPT2;
  int num_layers = 4;
  int hidden_size = 256;
  int num_attention_heads = 4;
  int num_query_groups = 0;     // GQA: key/value heads; 0 means = num_attention_heads
  int ffn_hidden_size = 0;      // 0 means 4·hidden (gpt2) or Llama's rounded 8/3·hidden (llama)
  int seq_length = 128;
  int max_position_embeddings = 0;  // 0 means = seq_length
  int vocab_size = 256;
  float norm_epsilon = 1e-5f;
  float rotary_base = 10000.0f;
  int make_vocab_size_divisible_by = 128;  // the vocabulary is padded to a multiple of this · TP

  int head_dim() const { return hidden_size / num_attention_heads; }
  int query_groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  int ffn_size() const;
  int max_positions() const { return max_position_embeddings > 0 ? max_position_embeddings : seq_length; }
  bool tied_embeddings() const { return arch == Arch::GPT2; }
  bool has_bias() const { return arch == Arch::GPT2; }
  // Megatron's padded vocabulary for a TP size; the padding never counts in the loss.
  int64_t padded_vocab(int tp) const {
    const int64_t m = static_cast<int64_t>(make_vocab_size_divisible_by) * tp;
    return (vocab_size + m - 1) / m * m;
  }

  // Every rule the sizes break, one message each; empty when valid.
  std::vector<std::string> violations() const;
  // Throws one Error listing every violation.
  void validate() const;
  int64_t num_parameters() const;
};

// tessel's own model file: {"arch": "llama", "num_layers": 4, "hidden_size": 256, ...}; keys are
// the flag names with '_' for '-'. Keys absent from the file keep the values already in `cfg`.
void model_config_from_json(const nlohmann::json& j, ModelConfig& cfg, const std::string& source);
nlohmann::json model_config_to_json(const ModelConfig& cfg);
ModelConfig load_model_config_file(const std::string& path);

}  // namespace tessel
