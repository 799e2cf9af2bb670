#include "tessel/ckpt/hf_layout.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "tessel/ckpt/hf_files.h"
#include "tessel/core/error.h"

namespace tessel {

namespace {

constexpr const char* kVlPrefix = "model.language_model.";
constexpr const char* kGdn = "linear_attn.";
constexpr const char* kExperts = "mlp.experts.";

// The file's name of a tessel name: the decoder's "model." becomes "model.language_model.".
std::string file_name(const std::string& name, const HfLayout& layout) {
  if (layout.vl_prefix && name.starts_with("model.")) return kVlPrefix + name.substr(6);
  return name;
}

// Builds the file tensors parameter by parameter; a file tensor's copies for one parameter are
// adjacent, which the loader relies on.
class FileTensors {
 public:
  FileTensors(const ParamRegistry& registry, const HfLayout& layout, const GdnHeads& heads)
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
    auto [counted, first] = expert_counts_.emplace(prefix, 0);  // counted once a layer
    int64_t& E = counted->second;
    if (first)
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
  const HfLayout& layout_;
  const GdnHeads& heads_;
  std::vector<HfFileTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::unordered_map<std::string, int64_t> expert_counts_;  // per experts. prefix
};

}  // namespace

std::vector<HfFileTensor> hf_file_tensors(const ParamRegistry& registry, const HfLayout& layout,
                                          const GdnHeads& heads) {
  return FileTensors(registry, layout, heads).build();
}

HfLayout hf_layout_of(const std::vector<std::string>& names) {
  HfLayout layout;
  for (const std::string& name : names) {
    if (name.ends_with(".linear_attn.in_proj_qkvz.weight")) layout.grouped_gdn = true;
    if (name.ends_with(".mlp.experts.gate_up_proj"))
      (name.starts_with("mtp.") ? layout.packed_mtp_experts : layout.packed_experts) = true;
    if (name.starts_with(kVlPrefix)) layout.vl_prefix = true;
  }
  return layout;
}

void write_hf_weights(const ParamRegistry& registry, const HfLayout& layout, const GdnHeads& heads,
                      const std::string& dir, int64_t max_shard_bytes) {
  const std::vector<HfFileTensor> tensors = hf_file_tensors(registry, layout, heads);
  std::vector<std::vector<float>> values(tensors.size());
  std::vector<SafetensorsEntry> entries;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const HfFileTensor& t = tensors[i];
    values[i].resize(shape_numel(t.shape));
    int current = -1;
    std::vector<float> host;
    for (const HfRowCopy& copy : t.copies) {
      const Param& p = registry.params()[copy.param];
      TESSEL_CHECK(p.value != nullptr, "export to {}: parameter {} has no memory (registry not finalized)",
                   dir, p.name);
      TESSEL_CHECK(p.shard.count == 1, "export to {}: parameter {} is split over {} ranks", dir,
                   p.name, p.shard.count);
      if (copy.param != current) host = registry.to_host(p), current = copy.param;
      float* to = values[i].data() + copy.file_row * t.row_len;
      const int64_t n = copy.rows * t.row_len;
      std::memcpy(to, host.data() + copy.param_row * t.row_len, n * sizeof(float));
      if (layout.plain_norms && p.zero_centred) std::for_each(to, to + n, [](float& w) { w += 1.0f; });
    }
    entries.push_back({t.name, t.shape, values[i].data()});
  }
  write_hf_weight_files(dir, entries, max_shard_bytes);
}

}  // namespace tessel
