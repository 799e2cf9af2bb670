#include "tessel/ckpt/hf_import.h"

#include <algorithm>
#include <unordered_map>

#include "tessel/ckpt/hf.h"
#include "tessel/ckpt/shards.h"
#include "tessel/core/error.h"
#include "tessel/model/transformer.h"

namespace tessel {

namespace {

// Hugging Face's non-parameter buffers: GPT-2's causal mask and masked-fill value, old Llama
// checkpoints' RoPE frequencies. They are recomputed, never loaded.
bool is_hf_buffer(const std::string& name) {
  for (const char* suffix : {"attn.bias", "attn.masked_bias", "rotary_emb.inv_freq"}) {
    const std::string s = suffix;
    if (name == s || name.ends_with("." + s)) return true;
  }
  return false;
}

bool skipped(const std::string& name, const HfImportRules& rules, bool has_mtp) {
  if (is_hf_buffer(name) || (rules.tied_head && name == "lm_head.weight")) return true;
  return rules.qwen_extras && (name.starts_with("model.visual.") || (!has_mtp && name.starts_with("mtp.")));
}

// A model_type that does not match the file's GDN projections: one line naming both.
void check_family(const HfWeightFiles& files, const std::string& family) {
  const bool next = family == "qwen3_next";
  const bool qwen35 = family == "qwen3_5_moe" || family == "qwen3_5_moe_text";
  for (const std::string& name : files.names()) {
    if (name.ends_with(".linear_attn.in_proj_qkvz.weight") || name.ends_with(".linear_attn.in_proj_ba.weight")) {
      TESSEL_CHECK(!qwen35,
                   "{}: tensor '{}' is Qwen3-Next's grouped GDN layout, but config.json's "
                   "model_type is {} (whose layers hold in_proj_qkv, in_proj_z, in_proj_b, "
                   "in_proj_a)",
                   files.file_of(name), name, family);
    }
    if (name.ends_with(".linear_attn.in_proj_qkv.weight") || name.ends_with(".linear_attn.in_proj_z.weight")) {
      TESSEL_CHECK(!next,
                   "{}: tensor '{}' is Qwen3.5's flat GDN layout, but config.json's model_type "
                   "is qwen3_next (whose layers hold in_proj_qkvz and in_proj_ba)",
                   files.file_of(name), name);
    }
  }
}

// For each tensor `whole` needs, the name it has in the files ("" where none): every name of the
// files placed, none twice.
std::vector<std::string> match_names(const std::vector<HfFileTensor>& wanted, const ParamRegistry& whole,
                                     const HfWeightFiles& files, const HfImportRules& rules) {
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < wanted.size(); ++i) index.emplace(wanted[i].name, i);
  const bool has_mtp = std::any_of(whole.params().begin(), whole.params().end(),
                                   [](const Param& p) { return p.name.starts_with("mtp."); });
  std::vector<std::string> in_files(wanted.size());
  for (const std::string& name : files.names()) {
    auto it = index.find(name);
    if (it == index.end() && rules.gpt2_bare_names) it = index.find("transformer." + name);
    if (it == index.end()) {
      if (skipped(name, rules, has_mtp)) continue;
      fail("{}: unexpected tensor '{}': this {} model has no such parameter (is the file for another "
           "architecture, or of a layout mixed within the file?)",
           files.file_of(name), name, rules.model);
    }
    std::string& placed = in_files[it->second];
    TESSEL_CHECK(placed.empty(), "{}: tensors '{}' and '{}' both hold parameter {}", files.file_of(name),
                 placed, name, it->first);
    placed = name;
  }
  return in_files;
}

// Whether `mine` holds any parameter a file tensor fills.
bool needed(const HfFileTensor& t, const ParamRegistry& mine, const ParamRegistry& whole) {
  return std::any_of(t.copies.begin(), t.copies.end(),
                     [&](const HfRowCopy& c) { return mine.has(whole.params()[c.param].name); });
}

}  // namespace

void load_hf_params(ParamRegistry& mine, const ParamRegistry& whole, HfWeightFiles& files,
                    const HfImportRules& rules) {
  check_family(files, rules.family);
  const std::vector<HfFileTensor> wanted = hf_file_tensors(whole, hf_layout_of(files.names()), rules.heads);
  const std::vector<std::string> in_files = match_names(wanted, whole, files, rules);

  // Open the files this rank reads, then check every tensor of every open file against the model.
  for (size_t i = 0; i < wanted.size(); ++i)
    if (!in_files[i].empty() && needed(wanted[i], mine, whole)) files.tensor(in_files[i]);
  for (size_t i = 0; i < wanted.size(); ++i) {
    const SafetensorsTensor* t = in_files[i].empty() ? nullptr : files.opened_tensor(in_files[i]);
    if (t == nullptr) continue;
    TESSEL_CHECK(t->shape == wanted[i].shape, "{}: tensor '{}' has shape {} but the model expects {}",
                 files.file_of(t->name), t->name, shape_str(t->shape), shape_str(wanted[i].shape));
    TESSEL_CHECK(safetensors_dtype_is_float(t->dtype),
                 "{}: tensor '{}' has dtype {}; weights must be F32, F16, BF16 or F64",
                 files.file_of(t->name), t->name, t->dtype);
  }
  const auto missing = std::find(in_files.begin(), in_files.end(), std::string());
  TESSEL_CHECK(missing == in_files.end(),
               "{}: missing tensor '{}' ({} of the model's {} tensors are not in the file)", files.source(),
               wanted[missing - in_files.begin()].name,
               std::count(in_files.begin(), in_files.end(), std::string()), wanted.size());
  for (const Param& p : mine.params()) {
    TESSEL_CHECK(whole.has(p.name) && whole.get(p.name).global_shape == p.global_shape,
                 "loading {}: parameter {} {} is not the model's", files.source(), p.name,
                 shape_str(p.global_shape));
    TESSEL_CHECK(p.value != nullptr, "loading {}: parameter {} has no memory (registry not finalized)",
                 files.source(), p.name);
  }

  // Each parameter this rank holds, row by row: straight into the registry where it is whole and
  // on the host; else into its whole tensor, of which it keeps its slice (the one buffer beyond
  // the registry, sized once for the largest such parameter: growing it would copy; on the host
  // the slice is taken straight into the registry too).
  const bool on_host = &mine.memory() == &host_memory();
  const auto direct = [&](const Param& p) { return on_host && p.local_shape == p.global_shape; };
  int64_t largest = 0;
  for (const Param& p : mine.params())
    if (!direct(p)) largest = std::max(largest, shape_numel(p.global_shape));
  std::vector<float> full(static_cast<size_t>(largest));
  for (size_t i = 0; i < wanted.size(); ++i) {
    const HfFileTensor& w = wanted[i];
    for (size_t c = 0; c < w.copies.size();) {
      const Param& declared = whole.params()[w.copies[c].param];
      Param* held = mine.has(declared.name) ? &mine.get(declared.name) : nullptr;
      float* to = held == nullptr ? nullptr : direct(*held) ? held->value : full.data();
      for (; c < w.copies.size() && &whole.params()[w.copies[c].param] == &declared; ++c) {
        const HfRowCopy& copy = w.copies[c];
        if (held != nullptr)
          files.read(in_files[i], copy.file_row * w.row_len, copy.rows * w.row_len, to + copy.param_row * w.row_len);
      }
      if (held != nullptr && rules.plain_norms && declared.zero_centred) {  // the files hold 1 + w
        float* end = to + shape_numel(declared.global_shape);
        std::for_each(to, end, [](float& w) { w -= 1.0f; });
      }
      if (held == nullptr || direct(*held)) continue;
      if (on_host)
        take_local_slice(*held, full.data(), held->value);
      else
        set_from_global(mine, *held, full.data());
    }
  }
}

std::vector<std::string> load_hf_weights(ParamRegistry& registry, const ModelConfig& cfg, const std::string& path) {
  ParamRegistry whole;
  TransformerChunk::declare(cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}}, ChunkPlace{}, whole);
  // A family with several model_types (Qwen3-Next's) tells their layouts apart by config.json.
  const Family& family = family_writing(cfg);
  const HfImportRules rules =
      family.import_rules(cfg, family.export_types.empty() ? "" : hf_model_type_beside(path));
  HfWeightFiles files(path);
  load_hf_params(registry, whole, files, rules);
  return files.opened_files();
}

}  // namespace tessel
