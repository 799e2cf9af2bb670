#include "tessel/ckpt/hf_qwen3_next.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "tessel/ckpt/shards.h"
#include "tessel/core/error.h"

namespace tessel {

namespace {

constexpr const char* kVlPrefix = "model.language_model.";
constexpr const char* kGdn = "linear_attn.";
constexpr const char* kExperts = "mlp.experts.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The file's name of a tessel name: the decoder's "model." becomes "model.language_model.".
std::string file_name(const std::string& name, const HfQwenLayout& layout) {
  if (layout.vl_prefix && name.starts_with("model.")) return kVlPrefix + name.substr(6);
  return name;
}

// Builds the file tensors parameter by parameter; a file tensor's copies for one parameter are
// adjacent, which the loader relies on.
class FileTensors {
 public:
  FileTensors(const ParamRegistry& registry, const HfQwenLayout& layout, const GdnHeads& heads)
      : registry_(registry), layout_(layout), heads_(heads) {}

  std::vector<HfFileTensor> build() {
    for (int i = 0; i < static_cast<int>(registry_.params().size()); ++i) place(i);
    return std::move(tensors_);
  }

 private:
  HfFileTensor& tensor(const std::string& name, Shape shape, int64_t row_len) {
    auto [it, inserted] = index_.emplace(file_name(name, layout_), tensors_.size());
    if (inserted) tensors_.push_back({it->first, std::move(shape), row_len, {}});
    return tensors_[it->second];
  }

  void place(int i) {
    const Param& p = registry_.params()[i];
    const std::string& name = p.name;
    const size_t gdn = name.rfind(kGdn);
    if (layout_.grouped_gdn && gdn != std::string::npos) {
      const std::string prefix = name.substr(0, gdn + std::strlen(kGdn));
      const std::string leaf = name.substr(prefix.size());
      if (leaf == "in_proj_qkv.weight" || leaf == "in_proj_z.weight")
        return place_qkvz(i, prefix, leaf == "in_proj_z.weight");
      if (leaf == "in_proj_b.weight" || leaf == "in_proj_a.weight")
        return place_ba(i, prefix, leaf == "in_proj_a.weight");
    }
    const size_t experts = name.rfind(kExperts);
    const bool mtp = name.starts_with("mtp.");
    if (experts != std::string::npos && (mtp ? layout_.packed_mtp_experts : layout_.packed_experts))
      return place_expert(i, name.substr(0, experts + std::strlen(kExperts)),
                          name.substr(experts + std::strlen(kExperts)));
    tensor(name, p.global_shape, shape_numel(p.global_shape)).copies.push_back({i, 0, 0, 1});
  }

  // in_proj_qkvz, viewed as Hk groups of W = 2·dk + 2·r·dv rows: [q_g | k_g | v_g | z_g].
  void place_qkvz(int i, const std::string& prefix, bool z) {
    const Param& p = registry_.params()[i];
    const int64_t Hk = heads_.key_heads, dk = heads_.key_dim, dv = heads_.value_dim;
    const int64_t r = heads_.value_heads / Hk, kd = Hk * dk, W = 2 * dk + 2 * r * dv;
    const int64_t C = p.global_shape.back();
    const int64_t rows = z ? heads_.value_heads * dv : 2 * kd + heads_.value_heads * dv;
    TESSEL_CHECK(p.global_shape == Shape({rows, C}),
                 "{}: shape {} does not fit {} key heads of {} and {} value heads of {}", p.name,
                 shape_str(p.global_shape), Hk, dk, heads_.value_heads, dv);
    HfFileTensor& t = tensor(prefix + "in_proj_qkvz.weight", {Hk * W, C}, C);
    for (int64_t g = 0; g < Hk; ++g) {
      if (z) {
        t.copies.push_back({i, g * r * dv, g * W + 2 * dk + r * dv, r * dv});
        continue;
      }
      t.copies.push_back({i, g * dk, g * W, dk});                          // q
      t.copies.push_back({i, kd + g * dk, g * W + dk, dk});                // k
      t.copies.push_back({i, 2 * kd + g * r * dv, g * W + 2 * dk, r * dv});  // v
    }
  }

  // in_proj_ba, viewed as Hk groups of 2·r rows: [b of the group's r heads | a of them].
  void place_ba(int i, const std::string& prefix, bool a) {
    const Param& p = registry_.params()[i];
    const int64_t Hk = heads_.key_heads, Hv = heads_.value_heads, r = Hv / Hk;
    const int64_t C = p.global_shape.back();
    TESSEL_CHECK(p.global_shape == Shape({Hv, C}), "{}: shape {} does not fit {} value heads",
                 p.name, shape_str(p.global_shape), Hv);
    HfFileTensor& t = tensor(prefix + "in_proj_ba.weight", {2 * Hv, C}, C);
    for (int64_t g = 0; g < Hk; ++g) t.copies.push_back({i, g * r, g * 2 * r + (a ? r : 0), r});
  }

  // experts.{e}.{gate,up,down}_proj.weight into gate_up_proj [E, 2I, C] and down_proj [E, C, I].
  void place_expert(int i, const std::string& prefix, const std::string& leaf) {
    const Param& p = registry_.params()[i];
    const size_t dot = leaf.find('.');
    const int64_t e = std::stoll(leaf.substr(0, dot));
    const std::string w = leaf.substr(dot + 1);
    int64_t E = 0;
    while (registry_.has(fmt::format("{}{}.gate_proj.weight", prefix, E))) ++E;
    const int64_t I = registry_.get(prefix + "0.gate_proj.weight").global_shape[0];
    const int64_t C = registry_.get(prefix + "0.gate_proj.weight").global_shape[1];
    if (w == "down_proj.weight") {
      tensor(prefix + "down_proj", {E, C, I}, I).copies.push_back({i, 0, e * C, C});
      return;
    }
    TESSEL_CHECK(w == "gate_proj.weight" || w == "up_proj.weight", "{}: not an expert weight",
                 p.name);
    tensor(prefix + "gate_up_proj", {E, 2 * I, C}, C)
        .copies.push_back({i, 0, e * 2 * I + (w == "up_proj.weight" ? I : 0), I});
  }

  const ParamRegistry& registry_;
  const HfQwenLayout& layout_;
  const GdnHeads& heads_;
  std::vector<HfFileTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// A model_type that does not match the file's GDN projections: one line naming both.
void check_family(const SafetensorsReader& reader, const std::string& family) {
  const bool next = family == "qwen3_next";
  const bool qwen35 = family == "qwen3_5_moe" || family == "qwen3_5_moe_text";
  for (const SafetensorsTensor& t : reader.tensors()) {
    if (ends_with(t.name, ".linear_attn.in_proj_qkvz.weight") ||
        ends_with(t.name, ".linear_attn.in_proj_ba.weight")) {
      TESSEL_CHECK(!qwen35,
                   "{}: tensor '{}' is Qwen3-Next's grouped GDN layout, but config.json's "
                   "model_type is {} (whose layers hold in_proj_qkv, in_proj_z, in_proj_b, "
                   "in_proj_a)",
                   reader.path(), t.name, family);
    }
    if (ends_with(t.name, ".linear_attn.in_proj_qkv.weight") ||
        ends_with(t.name, ".linear_attn.in_proj_z.weight")) {
      TESSEL_CHECK(!next,
                   "{}: tensor '{}' is Qwen3.5's flat GDN layout, but config.json's model_type "
                   "is qwen3_next (whose layers hold in_proj_qkvz and in_proj_ba)",
                   reader.path(), t.name);
    }
  }
}

}  // namespace

std::vector<HfFileTensor> hf_qwen_file_tensors(const ParamRegistry& registry,
                                               const HfQwenLayout& layout, const GdnHeads& heads) {
  return FileTensors(registry, layout, heads).build();
}

HfQwenLayout hf_qwen_layout_of(const SafetensorsReader& reader) {
  HfQwenLayout layout;
  for (const SafetensorsTensor& t : reader.tensors()) {
    if (ends_with(t.name, ".linear_attn.in_proj_qkvz.weight")) layout.grouped_gdn = true;
    if (ends_with(t.name, ".mlp.experts.gate_up_proj"))
      (t.name.starts_with("mtp.") ? layout.packed_mtp_experts : layout.packed_experts) = true;
    if (t.name.starts_with(kVlPrefix)) layout.vl_prefix = true;
  }
  return layout;
}

void load_hf_qwen_weights(ParamRegistry& registry, const SafetensorsReader& reader,
                          const GdnHeads& heads, const std::string& family) {
  const std::string& file = reader.path();
  check_family(reader, family);
  const std::vector<HfFileTensor> wanted =
      hf_qwen_file_tensors(registry, hf_qwen_layout_of(reader), heads);
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < wanted.size(); ++i) index.emplace(wanted[i].name, i);
  const bool has_mtp = std::any_of(registry.params().begin(), registry.params().end(),
                                   [](const Param& p) { return p.name.starts_with("mtp."); });

  // Every tensor of the file checked before any value moves, so a bad file changes nothing.
  std::vector<bool> seen(wanted.size(), false);
  for (const SafetensorsTensor& t : reader.tensors()) {
    if (t.name.starts_with("model.visual.") || (!has_mtp && t.name.starts_with("mtp."))) continue;
    auto it = index.find(t.name);
    TESSEL_CHECK(it != index.end(),
                 "{}: unexpected tensor '{}': this Qwen3-Next model has no such parameter (is the "
                 "file for another model, or of a layout mixed within the file?)",
                 file, t.name);
    const HfFileTensor& w = wanted[it->second];
    TESSEL_CHECK(t.shape == w.shape, "{}: tensor '{}' has shape {} but the model expects {}", file,
                 t.name, shape_str(t.shape), shape_str(w.shape));
    TESSEL_CHECK(safetensors_dtype_is_float(t.dtype),
                 "{}: tensor '{}' has dtype {}; weights must be F32, F16, BF16 or F64", file,
                 t.name, t.dtype);
    seen[it->second] = true;
  }
  const auto missing = std::find(seen.begin(), seen.end(), false);
  TESSEL_CHECK(missing == seen.end(), "{}: missing tensor '{}' ({} of the {} tensors the model needs are not in the file)",
               file, wanted[missing - seen.begin()].name,
               std::count(seen.begin(), seen.end(), false), wanted.size());

  std::vector<float> data, full;  // the file's tensor, a parameter's whole tensor
  for (const HfFileTensor& w : wanted) {
    data.resize(shape_numel(w.shape));
    reader.read(w.name, data.data());
    for (size_t c = 0; c < w.copies.size();) {
      Param& p = registry.params()[w.copies[c].param];
      TESSEL_CHECK(p.value != nullptr, "loading {}: parameter {} has no memory", file, p.name);
      full.resize(shape_numel(p.global_shape));
      for (; c < w.copies.size() && &registry.params()[w.copies[c].param] == &p; ++c) {
        const HfRowCopy& copy = w.copies[c];
        std::memcpy(full.data() + copy.param_row * w.row_len, data.data() + copy.file_row * w.row_len,
                    copy.rows * w.row_len * sizeof(float));
      }
      set_from_global(registry, p, full.data());
    }
  }
}

void write_hf_qwen_weights(const ParamRegistry& registry, const HfQwenLayout& layout,
                           const GdnHeads& heads, const std::string& path) {
  const std::vector<HfFileTensor> tensors = hf_qwen_file_tensors(registry, layout, heads);
  std::vector<std::vector<float>> values(tensors.size());
  std::vector<SafetensorsEntry> entries;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const HfFileTensor& t = tensors[i];
    values[i].resize(shape_numel(t.shape));
    int current = -1;
    std::vector<float> host;
    for (const HfRowCopy& copy : t.copies) {
      const Param& p = registry.params()[copy.param];
      TESSEL_CHECK(p.shard.count == 1, "export to {}: parameter {} is split over {} ranks", path,
                   p.name, p.shard.count);
      if (copy.param != current) host = registry.to_host(p), current = copy.param;
      std::memcpy(values[i].data() + copy.file_row * t.row_len,
                  host.data() + copy.param_row * t.row_len, copy.rows * t.row_len * sizeof(float));
    }
    entries.push_back({t.name, t.shape, values[i].data()});
  }
  write_safetensors(path, entries, {{"format", "pt"}});
}

}  // namespace tessel
