// Qwen3-Next / Qwen3.5 checkpoint layouts (ckpt/hf_layout.h) on small synthetic files: every
// layout writes and reads back bitwise, into the whole model and into any part of it (a stage's
// layers, an EP rank's experts), the grouped rows are where Hugging Face's
// fix_query_key_value_ordering reads them, a Qwen3-Next file converted to Qwen3.5's layout and
// back is the same bytes, and the bad inputs give one clear line.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "ckpt/hf_fixture.h"
#include "tessel/ckpt/hf_import.h"
#include "tessel/ckpt/hf_layout.h"
#include "tessel/ckpt/shards.h"
#include "tessel/ckpt/safetensors.h"

namespace tessel {
namespace {

using namespace hf_testing;
using testing::expect_error;

// Hk = 2 key heads of dk = 3, Hv = 4 value heads of dv = 2 (r = 2), C = 5, E = 3 experts of I = 4.
constexpr int64_t kC = 5, kHk = 2, kHv = 4, kDk = 3, kDv = 2, kE = 3, kI = 4, kV = 7;
const GdnHeads kHeads{kHk, kHv, kDk, kDv};

void add_moe(ParamRegistry& r, const std::string& p) {
  r.add(p + "mlp.gate.weight", {kE, kC}, ParamInit::Normal, 1.0f, true);
  for (int e = 0; e < kE; ++e) {
    const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
    r.add(x + "gate_proj.weight", {kI, kC}, ParamInit::Normal, 1.0f, true);
    r.add(x + "up_proj.weight", {kI, kC}, ParamInit::Normal, 1.0f, true);
    r.add(x + "down_proj.weight", {kC, kI}, ParamInit::Normal, 1.0f, true);
  }
  r.add(p + "mlp.shared_expert.gate_proj.weight", {6, kC}, ParamInit::Normal, 1.0f, true);
  r.add(p + "mlp.shared_expert_gate.weight", {1, kC}, ParamInit::Normal, 1.0f, true);
}

void add_attention(ParamRegistry& r, const std::string& p) {
  r.add(p + "self_attn.q_proj.weight", {2 * 2 * 4, kC}, ParamInit::Normal, 1.0f, true);
  r.add(p + "self_attn.q_norm.weight", {4}, ParamInit::Normal, 1.0f, false);
}

// A registry under tessel's names: layer 0 Gated DeltaNet, layer 1 attention, MoE in both, MTP.
ParamRegistry qwen_registry(uint64_t seed, bool mtp = true) {
  ParamRegistry r;
  const auto add = [&](const std::string& name, Shape s) {
    r.add(name, std::move(s), ParamInit::Normal, 1.0f, true);
  };
  add("model.embed_tokens.weight", {kV, kC});
  const std::string g = "model.layers.0.linear_attn.";
  add(g + "in_proj_qkv.weight", {2 * kHk * kDk + kHv * kDv, kC});
  add(g + "in_proj_z.weight", {kHv * kDv, kC});
  add(g + "in_proj_b.weight", {kHv, kC});
  add(g + "in_proj_a.weight", {kHv, kC});
  add(g + "conv1d.weight", {2 * kHk * kDk + kHv * kDv, 1, 4});
  add(g + "A_log", {kHv});
  add(g + "norm.weight", {kDv});
  add_moe(r, "model.layers.0.");
  add_attention(r, "model.layers.1.");
  add_moe(r, "model.layers.1.");
  add("model.norm.weight", {kC});
  add("lm_head.weight", {kV, kC});
  if (mtp) {
    add("mtp.fc.weight", {kC, 2 * kC});
    add_attention(r, "mtp.layers.0.");
    add_moe(r, "mtp.layers.0.");
  }
  r.finalize();
  r.init_values(seed);
  return r;
}

std::vector<float> read_tensor(const SafetensorsReader& reader, const std::string& name) {
  std::vector<float> v(reader.tensor(name).numel());
  reader.read(name, v.data());
  return v;
}

// tessel's import of `file` into `target`, here the whole model (its own declaration).
void load_qwen(ParamRegistry& target, const std::string& file, const std::string& family) {
  HfWeightFiles files(file);
  load_hf_params(target, target, files,
                 HfImportRules{.model = "Qwen3-Next", .qwen_extras = true, .family = family, .heads = kHeads});
}

struct LayoutCase {
  const char* family;
  HfLayout layout;
};
const LayoutCase kLayouts[] = {
    {"qwen3_next", {true, false, false, false}},      // Qwen3-Next as published
    {"qwen3_next", {true, true, true, false}},        // transformers v5's in-memory packing
    {"qwen3_5_moe", {false, true, false, true}},      // Qwen3.5 as published
    {"qwen3_5_moe_text", {false, false, false, false}},  // tessel's own names
    {"qwen3_5_moe", {false, true, true, true}},
    {"", {true, false, true, true}},  // no config.json: any layout
};

TEST_F(HfTest, QwenEveryLayoutRoundTripsBitwise) {
  const ParamRegistry original = qwen_registry(11);
  for (const LayoutCase& c : kLayouts) {
    SCOPED_TRACE(c.family);
    const std::string file = path(fmt::format("{}{}{}{}{}", c.family,
                                              c.layout.grouped_gdn, c.layout.packed_experts,
                                              c.layout.packed_mtp_experts, c.layout.vl_prefix));
    write_hf_weights(original, c.layout, kHeads, file);
    const HfLayout seen = hf_layout_of(HfWeightFiles(file).names());
    EXPECT_EQ(seen.grouped_gdn, c.layout.grouped_gdn);
    EXPECT_EQ(seen.packed_experts, c.layout.packed_experts);
    EXPECT_EQ(seen.packed_mtp_experts, c.layout.packed_mtp_experts);
    EXPECT_EQ(seen.vl_prefix, c.layout.vl_prefix);
    ParamRegistry loaded = qwen_registry(12);
    load_qwen(loaded, file, c.family);
    expect_same_values(original, loaded);
  }
}

// A rank's part of the model: the second layer (a pipeline stage) and experts 1 and 2 of each
// MoE layer (an EP rank's, ETP 2 splitting them), MTP included, read from every layout — packed
// experts and grouped projections row by row — equal the whole model's values there.
TEST_F(HfTest, QwenEveryLayoutLoadsIntoAPartOfTheModel) {
  const ParamRegistry original = qwen_registry(11);
  for (const LayoutCase& c : kLayouts) {
    SCOPED_TRACE(fmt::format("{} grouped {} packed {}", c.family, c.layout.grouped_gdn, c.layout.packed_experts));
    const std::string file = path("part");
    write_hf_weights(original, c.layout, kHeads, file);
    ParamRegistry part;
    for (const Param& p : original.params()) {
      const bool other_layer = p.name.starts_with("model.layers.0.");
      const bool other_expert = p.name.find(".experts.0.") != std::string::npos;
      if (other_layer || other_expert) continue;
      ShardSpec split;
      if (p.name.find(".experts.") != std::string::npos && p.global_shape[0] % 2 == 0)
        split = ShardSpec{.dim = 0, .group = ShardGroup::ETP, .index = 1, .count = 2, .expert_rank = 1, .expert_ranks = 2};
      part.add(p.name, p.global_shape, p.init, p.init_std, p.weight_decay, split);
    }
    part.finalize();
    HfWeightFiles files(file);
    load_hf_params(part, original, files,
                   HfImportRules{.model = "Qwen3-Next", .qwen_extras = true, .family = c.family, .heads = kHeads});
    for (const Param& p : part.params()) {
      std::vector<float> want(p.numel());
      take_local_slice(p, original.to_host(original.get(p.name)).data(), want.data());
      EXPECT_EQ(part.to_host(p), want) << p.name;
    }
  }
}

TEST_F(HfTest, QwenGroupedRowsAreHuggingFacesOrdering) {
  // fix_query_key_value_ordering: in_proj_qkvz viewed as (Hk, 2·dk + 2·r·dv, C) splits into
  // q (dk), k (dk), v (r·dv), z (r·dv) per key head; in_proj_ba as (Hk, 2·r, C) into b, a.
  const ParamRegistry r = qwen_registry(3);
  write_hf_weights(r, {true, true, false, true}, kHeads, path("grouped"));
  const SafetensorsReader reader(path("grouped/model.safetensors"));
  const std::string g = "model.language_model.layers.0.linear_attn.";
  const std::vector<float> qkvz = read_tensor(reader, g + "in_proj_qkvz.weight");
  const std::vector<float> ba = read_tensor(reader, g + "in_proj_ba.weight");
  const std::string t = "model.layers.0.linear_attn.";
  const std::vector<float> qkv = r.to_host(r.get(t + "in_proj_qkv.weight"));
  const std::vector<float> z = r.to_host(r.get(t + "in_proj_z.weight"));
  const std::vector<float> b = r.to_host(r.get(t + "in_proj_b.weight"));
  const std::vector<float> a = r.to_host(r.get(t + "in_proj_a.weight"));
  const int64_t rr = kHv / kHk, W = 2 * kDk + 2 * rr * kDv;
  for (int64_t h = 0; h < kHk; ++h) {
    for (int64_t c = 0; c < kC; ++c) {
      for (int64_t d = 0; d < kDk; ++d) {
        EXPECT_EQ(qkvz[(h * W + d) * kC + c], qkv[(h * kDk + d) * kC + c]);                   // q
        EXPECT_EQ(qkvz[(h * W + kDk + d) * kC + c], qkv[((kHk + h) * kDk + d) * kC + c]);    // k
      }
      for (int64_t j = 0; j < rr * kDv; ++j) {  // value head h·r + j / dv, element j % dv
        EXPECT_EQ(qkvz[(h * W + 2 * kDk + j) * kC + c], qkv[(2 * kHk * kDk + h * rr * kDv + j) * kC + c]);
        EXPECT_EQ(qkvz[(h * W + 2 * kDk + rr * kDv + j) * kC + c], z[(h * rr * kDv + j) * kC + c]);
      }
      for (int64_t j = 0; j < rr; ++j) {  // b first, then a
        EXPECT_EQ(ba[(h * 2 * rr + j) * kC + c], b[(h * rr + j) * kC + c]);
        EXPECT_EQ(ba[(h * 2 * rr + rr + j) * kC + c], a[(h * rr + j) * kC + c]);
      }
    }
  }
  // Packed experts: gate_up_proj[e] = [gate_e ; up_e], down_proj[e] = down_e.
  const std::vector<float> gate_up = read_tensor(reader, "model.language_model.layers.1.mlp.experts.gate_up_proj");
  const std::vector<float> down = read_tensor(reader, "model.language_model.layers.1.mlp.experts.down_proj");
  for (int e = 0; e < kE; ++e) {
    const std::string x = fmt::format("model.layers.1.mlp.experts.{}.", e);
    const std::vector<float> gate = r.to_host(r.get(x + "gate_proj.weight"));
    const std::vector<float> up = r.to_host(r.get(x + "up_proj.weight"));
    const std::vector<float> dn = r.to_host(r.get(x + "down_proj.weight"));
    for (int64_t i = 0; i < kI * kC; ++i) {
      EXPECT_EQ(gate_up[e * 2 * kI * kC + i], gate[i]);
      EXPECT_EQ(gate_up[e * 2 * kI * kC + kI * kC + i], up[i]);
      EXPECT_EQ(down[e * kC * kI + i], dn[i]);
    }
  }
  EXPECT_TRUE(reader.has("mtp.layers.0.mlp.experts.0.gate_proj.weight"));  // MTP per expert
  EXPECT_TRUE(reader.has("lm_head.weight"));
  EXPECT_TRUE(reader.has("mtp.fc.weight"));
}

TEST_F(HfTest, QwenNextToQwen35AndBackIsTheSameBytes) {
  const std::string next = path("next"), q35 = path("q35"), back = path("back");
  write_hf_weights(qwen_registry(5), {true, false, false, false}, kHeads, next);
  ParamRegistry r = qwen_registry(6);
  load_qwen(r, next, "qwen3_next");
  write_hf_weights(r, {false, true, false, true}, kHeads, q35);
  ParamRegistry s = qwen_registry(7);
  load_qwen(s, q35, "qwen3_5_moe");
  write_hf_weights(s, {true, false, false, false}, kHeads, back);
  const std::string weights = "/model.safetensors";
  EXPECT_EQ(bytes_of(next + weights), bytes_of(back + weights));
  EXPECT_NE(bytes_of(next + weights), bytes_of(q35 + weights));
}

TEST_F(HfTest, QwenLayoutOfTheOtherFamilyIsRefused) {
  const ParamRegistry r = qwen_registry(1);
  write_hf_weights(r, {true, false, false, false}, kHeads, path("g"));
  write_hf_weights(r, {false, false, false, false}, kHeads, path("f"));
  ParamRegistry target = qwen_registry(2);
  const ParamRegistry before = qwen_registry(2);
  expect_error(
      [&] { load_qwen(target, path("g"), "qwen3_5_moe"); },
      {path("g/model.safetensors"), "'model.layers.0.linear_attn.in_proj_qkvz.weight' is Qwen3-Next's grouped",
       "model_type is qwen3_5_moe"});
  expect_error(
      [&] { load_qwen(target, path("f"), "qwen3_next"); },
      {path("f/model.safetensors"), "Qwen3.5's flat GDN layout", "model_type is qwen3_next"});
  expect_same_values(before, target);
}

TEST_F(HfTest, QwenMissingAndUnexpectedTensors) {
  const ParamRegistry r = qwen_registry(1);
  std::vector<SafetensorsEntry> entries;
  for (const Param& p : r.params())
    if (p.name != "model.norm.weight") entries.push_back({p.name, p.global_shape, p.value});
  write_safetensors(path("missing.safetensors"), entries);
  ParamRegistry target = qwen_registry(2);
  expect_error([&] { load_qwen(target, path("missing.safetensors"), ""); },
               {path("missing.safetensors"), "missing tensor 'model.norm.weight'", "1 of the"});
  entries.push_back({"model.norm.weight", {kC}, r.get("model.norm.weight").value});
  entries.push_back({"model.layers.0.linear_attn.dt_bias", {kHv}, r.params()[0].value});
  write_safetensors(path("extra.safetensors"), entries);
  expect_error([&] { load_qwen(target, path("extra.safetensors"), ""); },
               {path("extra.safetensors"), "unexpected tensor 'model.layers.0.linear_attn.dt_bias'"});
  const std::vector<float> five(5, 0.0f);
  std::vector<SafetensorsEntry> wrong;
  for (const Param& p : r.params())
    wrong.push_back(p.name == "model.layers.1.self_attn.q_norm.weight"
                        ? SafetensorsEntry{p.name, {5}, five.data()}
                        : SafetensorsEntry{p.name, p.global_shape, p.value});
  write_safetensors(path("shape.safetensors"), wrong);
  expect_error([&] { load_qwen(target, path("shape.safetensors"), ""); },
               {path("shape.safetensors"), "'model.layers.1.self_attn.q_norm.weight' has shape [5]",
                "expects [4]"});
}

TEST_F(HfTest, QwenVisionAndUnusedMtpTensorsAreSkipped) {
  // A VL checkpoint's vision tower, and MTP weights offered to a model without MTP, are ignored
  // as transformers' text decoders ignore them.
  const ParamRegistry with_mtp = qwen_registry(4);
  write_hf_weights(with_mtp, {false, true, false, true}, kHeads, path("vl"));
  const SafetensorsReader vl(path("vl/model.safetensors"));
  std::vector<SafetensorsEntry> entries;
  for (const SafetensorsTensor& t : vl.tensors()) entries.push_back({t.name, t.shape, nullptr});
  std::vector<std::vector<float>> data;
  data.reserve(entries.size() + 1);
  for (SafetensorsEntry& e : entries) data.push_back(read_tensor(vl, e.name)), e.data = data.back().data();
  data.push_back(std::vector<float>(6, 1.0f));
  entries.push_back({"model.visual.patch_embed.proj.weight", {2, 3}, data.back().data()});
  write_safetensors(path("vision.safetensors"), entries);
  ParamRegistry no_mtp = qwen_registry(8, false);
  load_qwen(no_mtp, path("vision.safetensors"), "qwen3_5_moe");
  for (const Param& p : no_mtp.params())
    EXPECT_EQ(no_mtp.to_host(p), with_mtp.to_host(with_mtp.get(p.name))) << p.name;
}

}  // namespace
}  // namespace tessel
