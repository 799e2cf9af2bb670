// How a family's Hugging Face weight files hold tessel's parameters, both ways: the layout export
// writes (and import recognises by the files' tensor names) and what import lets a file hold
// besides the model's tensors. ckpt/hf_layout.h maps a layout to file rows, ckpt/hf_import.h
// reads by these rules; each family's row (family/family.h) picks them.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/model/config.h"

namespace tessel {

// How a checkpoint file lays out the parameters (ckpt/hf_layout.h has the rows of each).
struct HfLayout {
  bool grouped_gdn = false;         // Qwen3-Next's in_proj_qkvz / in_proj_ba
  bool packed_experts = false;      // the decoder layers' experts.gate_up_proj / experts.down_proj
  bool packed_mtp_experts = false;  // the same under mtp.*
  bool vl_prefix = false;           // the decoder under model.language_model. (Qwen3.5's VL files)
  // Norm weights as transformers' Llama RMSNorm scales by them: a zero-centred norm's
  // (Param::zero_centred) as 1 + w. Export adds the 1, import takes it away.
  bool plain_norms = false;
};

// The GDN head counts and sizes the grouped layout needs (Hk, Hv, dk, dv).
struct GdnHeads {
  int64_t key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0;
};

// Zero for a model without Gated DeltaNet layers, whose layouts never read them.
inline GdnHeads gdn_heads(const ModelConfig& cfg) {
  return {cfg.linear.num_key_heads, cfg.linear.num_value_heads, cfg.linear.key_head_dim,
          cfg.linear.value_head_dim};
}

// What a file may hold besides the model's tensors, and how its names may differ from tessel's.
struct HfImportRules {
  std::string model = "llama";  // in errors: "this llama model has no such parameter"
  // GPT-2's own files were saved from GPT2Model: names without "transformer.".
  bool gpt2_bare_names = false;
  // lm_head.weight beside tied embeddings repeats them: skipped.
  bool tied_head = false;
  // Qwen3.5's files: the vision tower (model.visual.*), and mtp.* where the model has no MTP
  // (as transformers' text decoders do), skipped.
  bool qwen_extras = false;
  // config.json's model_type of a Gated DeltaNet model ("" when none): qwen3_next needs grouped
  // GDN projections, the Qwen3.5 types flat ones.
  std::string family;
  GdnHeads heads;  // for the grouped GDN layout
  bool plain_norms = false;  // the files' norm weights are plain (HfLayout::plain_norms)
};

}  // namespace tessel
