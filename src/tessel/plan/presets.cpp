// Model presets. Sizes are the published ones (sources beside each group); where a preset is
// "-style", the sizes that the source does not give are stated as assumptions.
#include <fmt/format.h>

#include <functional>
#include <map>

#include "tessel/core/error.h"
#include "tessel/plan/model.h"

namespace tessel {

namespace {

PlanModel sized(const std::string& name, Arch arch, int layers, int hidden, int heads, int vocab, int seq) {
  PlanModel m;
  m.name = name;
  ModelConfig& c = m.cfg;
  c.arch = arch;
  c.num_layers = layers, c.hidden_size = hidden, c.num_attention_heads = heads;
  c.vocab_size = vocab;
  c.seq_length = c.max_position_embeddings = seq;
  c.hidden_dropout = c.attention_dropout = 0.0f;  // a preset's dropout is its source's: none unless it says
  return m;
}

// A GPT-3-style model as Megatron-LM trains it in both papers: learned positions, LayerNorm,
// GELU MLP of 4·h, tied embeddings, vocabulary 51,200, sequence 2048, dropout 0.1.
PlanModel megatron_gpt(const std::string& name, int heads, int hidden, int layers) {
  PlanModel m = sized(name, Arch::GPT2, layers, hidden, heads, 51200, 2048);
  m.cfg.hidden_dropout = m.cfg.attention_dropout = 0.1f;
  return m;
}

// Llama-style: RMSNorm, SwiGLU, RoPE, grouped-query attention, untied head, no dropout.
PlanModel llama(const std::string& name, int layers, int hidden, int heads, int groups, int ffn,
                int vocab, int seq) {
  PlanModel m = sized(name, Arch::Llama, layers, hidden, heads, vocab, seq);
  m.cfg.num_query_groups = groups;
  m.cfg.ffn_hidden_size = ffn;
  m.cfg.rotary_base = 500000.0f;
  return m;
}

PlanModel with_experts(PlanModel m, int experts, int topk, int expert_ffn, int shared = 0) {
  m.cfg.moe.num_experts = experts;
  m.cfg.moe.topk = topk;
  m.cfg.moe.ffn_hidden_size = expert_ffn;
  m.cfg.moe.shared_expert_size = shared;
  m.cfg.moe.shared_expert_gate = shared > 0;  // the Qwen-MoE presets' shared experts are gated
  return m;
}

// The Qwen3-Next architecture (docs/QWEN3_NEXT.md §1, the Hugging Face configs): three Gated DeltaNet
// layers then one gated full-attention layer (--linear-attention-freq 4), GDN key and value heads
// of 128, conv kernel 4; attention with 2 KV heads of 256 (--kv-channels), QK-norm, partial RoPE
// (0.25 of 256) at base 10^7, the sigmoid output gate, zero-centred norms; 512 experts, top-10,
// with one sigmoid-gated shared expert of the routed experts' size, MoE in every layer; one MTP
// layer; untied head. The sequence (4096) is the planner's choice, not a published figure.
PlanModel qwen3_next(const std::string& name, int layers, int hidden, int heads, int value_heads, int expert_ffn,
                     int vocab) {
  PlanModel m = llama(name, layers, hidden, heads, 2, 0, vocab, 4096);
  ModelConfig& c = m.cfg;
  c.kv_channels = 256;
  c.qk_layernorm = c.attention_output_gate = c.layernorm_1p = true;
  c.rotary_base = 1e7f, c.rotary_percent = 0.25f;
  c.norm_epsilon = 1e-6f;
  c.linear.layer_pattern = parse_linear_attention_freq("4", layers);
  c.linear.num_key_heads = 16, c.linear.num_value_heads = value_heads;
  c.linear.key_head_dim = c.linear.value_head_dim = 128, c.linear.conv_kernel_dim = 4;
  c.mtp_num_layers = 1;
  return with_experts(m, 512, 10, expert_ffn, expert_ffn);  // the shared expert gated
}

const std::map<std::string, std::function<PlanModel()>>& presets() {
  static const std::map<std::string, std::function<PlanModel()>> table = {
      // Narayanan et al. 2021 (arXiv 2104.04473), Table 1; GPT-3 175B (Brown et al. 2020) as in
      // Korthikanti et al. 2022 (arXiv 2205.05198), Table 3.
      {"ptdp-1.7b", [] { return megatron_gpt("ptdp-1.7b", 24, 2304, 24); }},
      {"ptdp-3.6b", [] { return megatron_gpt("ptdp-3.6b", 32, 3072, 30); }},
      {"ptdp-7.5b", [] { return megatron_gpt("ptdp-7.5b", 32, 4096, 36); }},
      {"ptdp-18.4b", [] { return megatron_gpt("ptdp-18.4b", 48, 6144, 40); }},
      {"ptdp-39.1b", [] { return megatron_gpt("ptdp-39.1b", 64, 8192, 48); }},
      {"ptdp-76.1b", [] { return megatron_gpt("ptdp-76.1b", 80, 10240, 60); }},
      {"ptdp-145.6b", [] { return megatron_gpt("ptdp-145.6b", 96, 12288, 80); }},
      {"ptdp-310.1b", [] { return megatron_gpt("ptdp-310.1b", 128, 16384, 96); }},
      {"ptdp-529.6b", [] { return megatron_gpt("ptdp-529.6b", 128, 20480, 105); }},
      {"ptdp-1t", [] { return megatron_gpt("ptdp-1t", 160, 25600, 128); }},
      {"korthikanti-22b", [] { return megatron_gpt("korthikanti-22b", 64, 6144, 48); }},
      {"gpt3-175b", [] { return megatron_gpt("gpt3-175b", 96, 12288, 96); }},
      {"korthikanti-530b", [] { return megatron_gpt("korthikanti-530b", 128, 20480, 105); }},
      {"korthikanti-1t", [] { return megatron_gpt("korthikanti-1t", 160, 25600, 128); }},
      // Llama 3 (Meta's model cards and the Llama 3 paper, arXiv 2407.21783, Table 3).
      {"llama3-8b", [] { return llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192); }},
      {"llama3-70b", [] { return llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192); }},
      {"llama3-405b", [] { return llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192); }},
      // Mixtral 8x7B (arXiv 2401.04088, Table 1): 8 experts, top-2, sequence 4096 here.
      {"mixtral-8x7b",
       [] {
         PlanModel m = llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096);
         m.cfg.rotary_base = 1e6f;
         return with_experts(m, 8, 2, 14336);
       }},
      // A Qwen3-MoE-style guess at the seed's run from its numbers alone (60 layers, 64 query
      // heads, 512 experts), made before its real model was known (qwen3.5-397b-a17b below):
      // hidden 2048, head dimension 128 with QK-norm, 4 KV groups, routed experts of FFN 768,
      // top-10, no shared expert, vocabulary 151,936, sequence 4096: 148B parameters, 5.6B active.
      {"qwen3-moe-60l",
       [] {
         PlanModel m = llama("qwen3-moe-60l", 60, 2048, 64, 4, 6144, 151936, 4096);
         m.cfg.kv_channels = 128;
         m.cfg.qk_layernorm = true;
         m.cfg.rotary_base = 1e6f;
         return with_experts(m, 512, 10, 768);
       }},
      // Qwen3-Next-80B-A3B (hidden 2048, 48 layers, 16 heads, 32 GDN value heads, experts of 512,
      // vocabulary 151,936; the dense intermediate 5120 is unused: every layer is MoE): 79.67B
      // parameters and 1.65B of MTP, 3.87B active. Qwen3.5-397B-A17B, the seed's run (TP 4, PP 8,
      // EP 8, 60 layers, 512 experts) — its text decoder (hidden 4096, 60 layers, 32 heads, 64 GDN
      // value heads, experts of 1024, vocabulary 248,320): 396.35B parameters and 6.6B of MTP,
      // 17.35B active. docs/QWEN3_NEXT.md §1 has the sources.
      {"qwen3-next-80b-a3b",
       [] {
         PlanModel m = qwen3_next("qwen3-next-80b-a3b", 48, 2048, 16, 32, 512, 151936);
         m.cfg.ffn_hidden_size = 5120;
         return m;
       }},
      {"qwen3.5-397b-a17b", [] { return qwen3_next("qwen3.5-397b-a17b", 60, 4096, 32, 64, 1024, 248320); }},
      // DeepSeek-V3 (arXiv 2412.19437, §4.2): 61 layers, hidden 7168, 128 heads with MLA (query
      // latent 1536, KV latent 512, head dims 128 + 64 RoPE, values 128), the first 3 layers
      // dense (FFN 18432), then 256 routed experts of 2048, top-8, one shared expert, sigmoid
      // routing; vocabulary 129,280, sequence 4096 (multi-token prediction not modelled).
      {"deepseek-v3",
       [] {
         PlanModel m = llama("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 4096);
         m.multi_latent_attention = true;
         m.mla = {1536, 512, 128, 64, 128};
         m = with_experts(m, 256, 8, 2048, 2048);
         m.cfg.moe.shared_expert_gate = false;  // DeepSeek's shared expert has no gate
         m.cfg.moe.score_sigmoid = true;
         m.cfg.moe.layer_pattern.assign(61, 1);
         for (int l = 0; l < 3; ++l) m.cfg.moe.layer_pattern[l] = 0;
         return m;
       }},
  };
  return table;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, make] : presets()) names.push_back(name);
  return names;
}

PlanModel model_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string known;
    for (const std::string& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError(fmt::format("unknown --model preset '{}' (known: {})", name, known));
  }
  return it->second();
}

}  // namespace tessel
