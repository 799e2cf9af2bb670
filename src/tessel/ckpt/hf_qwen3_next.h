// Hugging Face checkpoints of the Qwen3-Next architecture (model_type qwen3_next, qwen3_5_moe,
// qwen3_5_moe_text) in every layout they come in, and tessel's parameters. tessel holds Qwen3.5's
// flat GDN names (in_proj_qkv [Q | K | V], in_proj_z, in_proj_b, in_proj_a), per-expert experts
// and no "model.language_model." prefix; a file may instead hold Qwen3-Next's grouped
// in_proj_qkvz / in_proj_ba (per key head g: [q_g | k_g | v and z of its r = Hv/Hk value heads],
// [b (r) | a (r)]), packed experts (experts.gate_up_proj [E, 2I, C], gate rows first, and
// experts.down_proj [E, C, I]) and the prefix. Every layout is a row permutation of tessel's
// tensors, so import and export move values without arithmetic and round trips are bitwise.
#pragma once

#include <string>
#include <vector>

#include "tessel/ckpt/safetensors.h"
#include "tessel/core/params.h"

namespace tessel {

// How a checkpoint file lays out the parameters.
struct HfQwenLayout {
  bool grouped_gdn = false;         // Qwen3-Next's in_proj_qkvz / in_proj_ba
  bool packed_experts = false;      // the decoder layers' experts.gate_up_proj / experts.down_proj
  bool packed_mtp_experts = false;  // the same under mtp.*
  bool vl_prefix = false;           // the decoder under model.language_model. (Qwen3.5's VL files)
};

// The GDN head counts and sizes the grouped layout needs (Hk, Hv, dk, dv).
struct GdnHeads {
  int64_t key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0;
};

// One tensor of a file: viewed as (rows, row_len), its rows [file_row, file_row + rows) are rows
// [param_row, param_row + rows) of registry parameter `param` viewed as (·, row_len).
struct HfRowCopy {
  int param;
  int64_t param_row, file_row, rows;
};
struct HfFileTensor {
  std::string name;
  Shape shape;
  int64_t row_len;
  std::vector<HfRowCopy> copies;  // together they cover every row once
};

// The file tensors that hold the registry's parameters in `layout`, in the order of the first
// parameter each holds.
std::vector<HfFileTensor> hf_qwen_file_tensors(const ParamRegistry& registry,
                                               const HfQwenLayout& layout, const GdnHeads& heads);

// The layout that a file's tensor names show.
HfQwenLayout hf_qwen_layout_of(const SafetensorsReader& reader);

// Fills every registry parameter from `reader`, whose layout is detected. Vision tensors
// (model.visual.*) are skipped, and so are mtp.* tensors when the registry has no MTP
// parameters (as transformers' text decoders do); any other tensor the layout does not place is
// an error naming the file. `family` is config.json's model_type, or empty when the file came
// without one: a qwen3_next model_type needs grouped GDN projections and the Qwen3.5 ones flat.
// The registry is untouched when the file is refused.
void load_hf_qwen_weights(ParamRegistry& registry, const SafetensorsReader& reader,
                          const GdnHeads& heads, const std::string& family);

// The registry's parameters (whole tensors) as `path` in `layout`, F32.
void write_hf_qwen_weights(const ParamRegistry& registry, const HfQwenLayout& layout,
                           const GdnHeads& heads, const std::string& path);

}  // namespace tessel
