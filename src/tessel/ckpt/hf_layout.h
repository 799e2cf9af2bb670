// How a Hugging Face checkpoint file lays out tessel's parameters, row by row. Most tensors are
// a parameter under its own name (DESIGN invariant 2); the Qwen3-Next family's files may instead
// hold Qwen3-Next's grouped in_proj_qkvz / in_proj_ba (per key head g: [q_g | k_g | v and z of
// its r = Hv/Hk value heads], [b (r) | a (r)]) where tessel holds Qwen3.5's flat in_proj_qkv
// [Q | K | V], in_proj_z, in_proj_b, in_proj_a; packed experts (experts.gate_up_proj [E, 2I, C],
// gate rows first, and experts.down_proj [E, C, I], as transformers 5 writes every MoE model)
// where tessel holds one matrix an expert; and a "model.language_model." prefix (Qwen3.5's VL
// files). Every layout is a row permutation of tessel's tensors, so import and export move values
// without arithmetic, round trips are bitwise, and a rank can read just the rows it holds. The one
// exception is a value: Llama files hold a zero-centred norm's weight (--apply-layernorm-1p) as
// 1 + w (HfLayout::plain_norms), and import takes the 1 away again: the weight read back may
// differ from w in its last bits, but where the gain 1 + w is at least 0.5 the gain the model
// computes is the same float (the subtraction is exact there). Which layout a family writes is
// its row's (family/family.h).
#pragma once

#include <string>
#include <vector>

#include "tessel/core/params.h"
#include "tessel/family/weights.h"

namespace tessel {

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
// parameter each holds (a parameter's rows all come from one file tensor, its copies adjacent).
std::vector<HfFileTensor> hf_file_tensors(const ParamRegistry& registry, const HfLayout& layout,
                                          const GdnHeads& heads);

// The layout that a file's tensor names show.
HfLayout hf_layout_of(const std::vector<std::string>& names);

// The registry's parameters (whole tensors) in `layout`, F32, as the weight files of the folder
// `dir` (ckpt/hf_files.h: one file, or shards of at most `max_shard_bytes` when it is > 0).
void write_hf_weights(const ParamRegistry& registry, const HfLayout& layout, const GdnHeads& heads,
                      const std::string& dir, int64_t max_shard_bytes = 0);

}  // namespace tessel
