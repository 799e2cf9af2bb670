// The model's architecture and sizes, named after Megatron-LM's flags.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace tessel {

enum class Arch : uint8_t { GPT2, Llama };

std::string arch_name(Arch arch);
Arch parse_arch(const std::string& name);  // "gpt2" | "llama"; throws on anything else

// Mixture of Experts settings (model/moe/ has the layer), named after Megatron's flags.
struct MoeConfig {
  int num_experts = 0;             // --num-experts (0: dense model)
  int topk = 2;                    // --moe-router-topk
  int ffn_hidden_size = 0;         // --moe-ffn-hidden-size (0: the dense --ffn-hidden-size)
  std::vector<int> layer_pattern;  // --moe-layer-freq: 1 = MoE layer, 0 = dense (empty: all MoE)
  int shared_expert_size = 0;      // --moe-shared-expert-intermediate-size (0: none)
  bool score_sigmoid = false;      // --moe-router-score-function sigmoid (default softmax)
  bool pre_softmax = false;        // --moe-router-pre-softmax
  float aux_loss_coeff = 0.0f;     // --moe-aux-loss-coeff
  float z_loss_coeff = 0.0f;       // --moe-z-loss-coeff
  double capacity_factor = 0.0;    // --moe-expert-capacity-factor (0: dropless)
  bool pad_to_capacity = false;    // --moe-pad-expert-input-to-capacity
  bool shared_expert_gate = false; // --moe-shared-expert-gate: the shared expert's output times
                                   // sigmoid(x · w), w [1, C] (Qwen2-MoE, Qwen3-Next)
  // --moe-router-force-load-balancing (Megatron's benchmark setting): the router's logits replaced
  // by standard normal values keyed by global coordinates, their gradient passed straight
  // through to the computed logits (model/moe/router.h).
  bool force_load_balancing = false;

  bool is_moe_layer(int layer) const {
    return num_experts > 0 && (layer_pattern.empty() || layer_pattern.at(layer) == 1);
  }
  // Every rule the settings break for this EP size and layer count, one message each (empty:
  // valid): top-k in [1, E], E divisible by EP, top-1 softmax needs pre-softmax (Megatron's rule:
  // a softmax over one logit has no gradient), padding needs a capacity, the pattern's length.
  std::vector<std::string> violations(int ep_size, int num_layers) const;
};

// --experimental-attention-variant gdn with --linear-attention-freq: Gated DeltaNet layers
// (Qwen3-Next, Qwen3.5) between full-attention ones.
struct LinearAttentionConfig {
  std::vector<int> layer_pattern;  // num_layers long, 1 = Gated DeltaNet, 0 = full attention; empty: none
  int conv_kernel_dim = 4;         // --linear-conv-kernel-dim
  int key_head_dim = 128;          // --linear-key-head-dim   (dk)
  int value_head_dim = 128;        // --linear-value-head-dim (dv)
  int num_key_heads = 16;          // --linear-num-key-heads  (Hk)
  int num_value_heads = 32;        // --linear-num-value-heads (Hv, a multiple of Hk)

  bool enabled() const { return !layer_pattern.empty(); }
  // By the GLOBAL layer index, so that any pipeline split builds the same layers.
  bool is_linear_layer(int global_layer) const {
    return enabled() && layer_pattern.at(global_layer) == 1;
  }
  int64_t key_dim() const { return static_cast<int64_t>(num_key_heads) * key_head_dim; }        // Hk·dk
  int64_t value_dim() const { return static_cast<int64_t>(num_value_heads) * value_head_dim; }  // Hv·dv
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // the convolved q | k | v channels
  // Every rule the sizes break for this layer count, one message each (empty: valid).
  std::vector<std::string> violations(int num_layers) const;
};

// --linear-attention-freq as Megatron reads it: an interval N (layer i is full attention iff
// (i + 1) % N == 0, the others Gated DeltaNet) or a num_layers-long list of 1 (GDN) / 0 (full
// attention), "[1,1,1,0]" or Python's "([1]*3+[0])*15". Throws tessel::Error naming the problem.
std::vector<int> parse_linear_attention_freq(const std::string& text, int num_layers);

// --moe-layer-freq as Megatron reads it: an interval k (layers 0, k, 2k, ... are MoE) or a
// num_layers-long pattern of 0/1, as a list "[1,0,1,0]" or Python's "([1]*3+[0]*1)*2".
// Throws tessel::Error naming the problem.
std::vector<int> parse_moe_layer_freq(const std::string& text, int num_layers);

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
  // Attention options of the llama architecture (Megatron's flags; GPT-2's c_attn has its own bias):
  bool add_qkv_bias = false;  // --add-qkv-bias: biases on q, k and v, not o (Qwen2)
  bool qk_layernorm = false;  // --qk-layernorm: RMSNorm over each head's q and k before RoPE (Qwen3)
  MoeConfig moe;  // num_experts == 0: a dense model
  int make_vocab_size_divisible_by = 128;  // the vocabulary is padded to a multiple of this · TP
  // Qwen3-Next / Qwen3.5 (llama architecture):
  LinearAttentionConfig linear;        // Gated DeltaNet layers (none unless its pattern is set)
  bool attention_output_gate = false;  // --attention-output-gate: q_proj rows per head [q_h | g_h],
                                       // the attention output times sigmoid(g)
  bool layernorm_1p = false;           // --apply-layernorm-1p: norms compute (1 + w), w initialised 0
  float rotary_percent = 1.0f;         // --rotary-percent: RoPE on the first rotary_percent·D dims
  int kv_channels = 0;                 // --kv-channels: head_dim (0: hidden / heads)
  int mtp_num_layers = 0;              // --mtp-num-layers: multi-token prediction layers
  float mtp_loss_scaling_factor = 0.1f;  // --mtp-loss-scaling-factor
  // --untie-embeddings-and-output-weights: Megatron ties by default and so does gpt2; a llama
  // model is always untied (its Hugging Face families are), whatever the flag says.
  bool untie_embeddings = false;
  // gpt2's MLP activation: exact GELU (erf; Megatron's default, Hugging Face "gelu"), or its tanh
  // approximation with --openai-gelu (GPT-2's own, Hugging Face "gelu_new").
  bool openai_gelu = false;
  float init_method_std = 0.02f;  // --init-method-std: the weights' initial normal std
  // Dropout in training (Megatron's defaults), its masks keyed by global coordinates
  // (kernels/dropout.h): on the embedding's output and each mixer's and MLP's output before the
  // residual add, and on the attention probabilities.
  float hidden_dropout = 0.1f;     // --hidden-dropout
  float attention_dropout = 0.1f;  // --attention-dropout

  int head_dim() const { return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads; }
  // The dimensions RoPE rotates of each head's D: Megatron's int(D · --rotary-percent).
  int rotary_dim() const { return static_cast<int>(head_dim() * rotary_percent); }
  int query_groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  // The query groups a TP rank computes: its share, or one (replicated) when TP exceeds them.
  int query_groups_per_rank(int tp) const { return query_groups() >= tp ? query_groups() / tp : 1; }
  int ffn_size() const;
  // A routed expert's neurons: --moe-ffn-hidden-size, else ffn_size().
  int expert_ffn_size() const { return moe.ffn_hidden_size > 0 ? moe.ffn_hidden_size : ffn_size(); }
  // Whether ffn_size() sizes anything: a dense MLP layer, or experts without --moe-ffn-hidden-size
  // (a model of MoE layers only, such as Qwen3.5, needs no dense size).
  bool uses_dense_ffn_size() const {
    for (int l = 0; l < num_layers; ++l)
      if (!moe.is_moe_layer(l)) return true;
    return num_layers == 0 || moe.ffn_hidden_size <= 0;
  }
  int max_positions() const { return max_position_embeddings > 0 ? max_position_embeddings : seq_length; }
  bool tied_embeddings() const { return arch == Arch::GPT2 && !untie_embeddings; }
  // Whether the chunk with the head reads the word embeddings too (a last pipeline stage then
  // keeps a copy, summed over the embedding group): a tied LM head, or multi-token prediction.
  bool head_reads_embeddings() const { return tied_embeddings() || mtp_num_layers > 0; }
  // Layers by index: the decoder's 0 .. num_layers − 1, then the multi-token prediction layers
  // (model/mtp.h), built as the last decoder layer: full attention (a last layer of Gated DeltaNet
  // is refused) and its MLP or MoE block. Their names' prefix, "model.layers.3." or
  // "mtp.layers.0." (llama).
  std::string layer_prefix(int layer) const;
  bool is_linear_layer(int layer) const { return layer < num_layers && linear.is_linear_layer(layer); }
  bool is_moe_layer(int layer) const { return moe.is_moe_layer(layer < num_layers ? layer : num_layers - 1); }
  bool has_bias() const { return arch == Arch::GPT2; }
  // Megatron's padded vocabulary for a TP size; the padding never counts in the loss.
  int64_t padded_vocab(int tp) const {
    const int64_t m = static_cast<int64_t>(make_vocab_size_divisible_by) * tp;
    return (vocab_size + m - 1) / m * m;
  }

  // The same model with every size that 0 leaves to a default written out: the query groups, the
  // MLP and expert sizes, the positions.
  ModelConfig explicit_sizes() const;
  // Every rule the sizes break, one message each; empty when valid.
  std::vector<std::string> violations() const;
  // Throws one Error listing every violation.
  void validate() const;
  int64_t num_parameters() const;
};

// A switch that flags and model files name by a word, false's then true's:
// --moe-router-score-function softmax | sigmoid.
struct NamedSwitch {
  bool MoeConfig::*member;
  const char* off;
  const char* on;
};

// --experimental-attention-variant none | gdn: whether the model has Gated DeltaNet layers, kept
// as ModelConfig::linear's pattern (gdn without --linear-attention-freq: every layer, as Megatron).
struct AttentionVariant {};

// One setting of the model, the one place it is named: its Megatron flag, where it lives in a
// ModelConfig and its help. The command line of train, plan, layout and export (apps/model_flags.h),
// tessel's JSON model file (the key is the flag's name without "--", '_' for '-') and --init-from's
// agreement check all read the list, so a new setting is one row in model_fields().
struct ModelField {
  const char* flag;  // "--num-layers"
  std::variant<int ModelConfig::*, float ModelConfig::*, bool ModelConfig::*, Arch ModelConfig::*,
               int MoeConfig::*, float MoeConfig::*, double MoeConfig::*, bool MoeConfig::*,
               std::vector<int> MoeConfig::*, NamedSwitch, int LinearAttentionConfig::*,
               std::vector<int> LinearAttentionConfig::*, AttentionVariant>
      member;
  const char* help;
  // A setting of the run rather than of the model the weights belong to (the sequence length, the
  // vocabulary's padding, the MoE losses and capacity): a flag for it applies on top of an
  // --init-from config.json, which every other flag given must agree with.
  bool run_setting = false;

  std::string key() const;  // "num_layers"
  bool moe() const;         // a setting of ModelConfig::moe, which a dense model's file leaves out
  bool linear() const;      // one of ModelConfig::linear, which a model without GDN layers leaves out
};

// Every field, in the order --help lists them; --moe-layer-freq and --linear-attention-freq come
// after --num-layers, which their interval forms need, and --linear-attention-freq after
// --experimental-attention-variant, which it needs (fields are set in this order).
std::span<const ModelField> model_fields();

// Calls fn with the field's storage in `cfg` (a ModelConfig, const or not): an int, float,
// double, bool, Arch or std::vector<int> (the MoE or linear-attention layer pattern) by
// reference, or the NamedSwitch itself (its bool is cfg.moe.*member), or the AttentionVariant tag
// (its storage is cfg.linear.layer_pattern).
template <typename Config, typename Fn>
decltype(auto) visit_model_field(const ModelField& field, Config& cfg, Fn&& fn) {
  return std::visit(
      [&](const auto& member) -> decltype(auto) {
        using Member = std::decay_t<decltype(member)>;
        if constexpr (std::is_same_v<Member, NamedSwitch> || std::is_same_v<Member, AttentionVariant>)
          return fn(member);
        else if constexpr (std::is_invocable_v<Member, Config&>)
          return fn(cfg.*member);
        else if constexpr (std::is_invocable_v<Member, decltype((cfg.moe))>)
          return fn(cfg.moe.*member);
        else
          return fn(cfg.linear.*member);
      },
      field.member);
}

// The field's value as the model file writes it ("llama", 4, [1,0,1,0], "sigmoid"; an MoE layer
// pattern of all ones as the interval 1, a linear-attention pattern of an interval as it), and as a flag's text, for --help's defaults and messages.
nlohmann::json model_field_json(const ModelField& field, const ModelConfig& cfg);
std::string model_field_text(const ModelField& field, const ModelConfig& cfg);
// Sets the field from a model file's value or a flag's (as JSON: a number, a bool, a word or an
// MoE layer pattern's text or list). Throws tessel::Error naming `source`, the key and the value.
void set_model_field(const ModelField& field, ModelConfig& cfg, const nlohmann::json& value,
                     const std::string& source);

// tessel's own model file: {"arch": "llama", "num_layers": 4, "hidden_size": 256, ...}, a key per
// model field. Keys absent from the file keep the values already in `cfg`; an unknown key is an
// error naming the file.
void model_config_from_json(const nlohmann::json& j, ModelConfig& cfg, const std::string& source);
// Every field with its size written out (explicit_sizes); the MoE fields only for an MoE model,
// the linear-attention ones only for a model with GDN layers.
nlohmann::json model_config_to_json(const ModelConfig& cfg);
// A model file's JSON; throws naming the file when it cannot be opened or parsed.
nlohmann::json read_model_file(const std::string& path);

}  // namespace tessel
