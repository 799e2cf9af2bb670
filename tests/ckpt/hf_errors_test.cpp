// Hugging Face weights that do not fit the model, or are broken: one clear error naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "ckpt/hf_fixture.h"
#include "tessel/ckpt/safetensors.h"

namespace tessel {
namespace {

using namespace hf_testing;
using testing::expect_error;
namespace fs = std::filesystem;

TEST_F(HfTest, MissingTensor) {
  ModelConfig cfg = small_llama();
  export_hf(make_registry(cfg, 1), cfg, path("m"));
  cfg.num_layers = 3;
  ParamRegistry r = make_registry(cfg, 1);
  const std::string file = path("m/model.safetensors");
  expect_error(
      [&] { load_hf_weights(r, cfg, file); },
      {file, "missing tensor 'model.layers.2.input_layernorm.weight'", "9 of the model's"});
}

TEST_F(HfTest, WrongShapeLeavesRegistryUntouched) {
  ModelConfig cfg = small_gpt2();
  export_hf(make_registry(cfg, 1), cfg, path("s"));
  cfg.vocab_size = 21;
  ParamRegistry r = make_registry(cfg, 2);
  const ParamRegistry before = make_registry(cfg, 2);
  const std::string file = path("s/model.safetensors");
  expect_error([&] { load_hf_weights(r, cfg, file); },
               {file, "'transformer.wte.weight' has shape [20, 8] but the model expects [21, 8]"});
  expect_same_values(before, r);
}

TEST_F(HfTest, UnexpectedTensor) {
  // Llama weights offered to a gpt2 model.
  const ModelConfig llama = small_llama();
  export_hf(make_registry(llama, 1), llama, path("u"));
  ParamRegistry r = make_registry(small_gpt2(), 1);
  const std::string file = path("u/model.safetensors");
  expect_error([&] { load_hf_weights(r, small_gpt2(), file); },
               {file, "unexpected tensor 'model.", "gpt2"});
  // A gpt2 file with one tensor too many.
  const ModelConfig gpt2 = small_gpt2();
  const ParamRegistry g = make_registry(gpt2, 1);
  std::vector<SafetensorsEntry> e;
  for (const Param& p : g.params()) e.push_back({p.name, p.global_shape, p.value});
  e.push_back({"transformer.h.0.attn.q_proj.weight", {8, 8}, g.params()[0].value});
  write_safetensors(path("extra.safetensors"), e);
  expect_error(
      [&] { load_hf_weights(r, gpt2, path("extra.safetensors")); },
      {path("extra.safetensors"), "unexpected tensor 'transformer.h.0.attn.q_proj.weight'"});
}

TEST_F(HfTest, TensorGivenTwice) {
  const ModelConfig cfg = small_gpt2();
  const ParamRegistry g = make_registry(cfg, 1);
  std::vector<SafetensorsEntry> e;
  for (const Param& p : g.params()) e.push_back({p.name, p.global_shape, p.value});
  const Param& wte = g.get("transformer.wte.weight");
  e.push_back({"wte.weight", wte.global_shape, wte.value});
  write_safetensors(path("twice.safetensors"), e);
  ParamRegistry r = make_registry(cfg, 2);
  expect_error([&] { load_hf_weights(r, cfg, path("twice.safetensors")); },
               {"twice.safetensors", "'transformer.wte.weight' and 'wte.weight'"});
}

TEST_F(HfTest, UnsupportedDtype) {
  // A parameter stored as integers: same shape, wrong kind of data.
  const std::string file = path("int.safetensors");
  const std::string header =
      R"({"model.norm.weight":{"dtype":"I32","shape":[16],"data_offsets":[0,64]}})";
  std::ofstream out(file, std::ios::binary);
  const uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header << std::string(64, '\0');
  out.close();
  ModelConfig cfg = small_llama();
  ParamRegistry r = make_registry(cfg, 1);
  expect_error([&] { load_hf_weights(r, cfg, file); }, {file, "'model.norm.weight' has dtype I32"});
}

TEST_F(HfTest, CorruptFiles) {
  ModelConfig cfg = small_llama();
  ParamRegistry r = make_registry(cfg, 1);
  const std::string empty = path("empty.safetensors");
  std::ofstream{empty};
  expect_error([&] { load_hf_weights(r, cfg, empty); }, {empty, "empty file"});

  export_hf(make_registry(cfg, 1), cfg, path("t"));
  const std::string file = path("t/model.safetensors");
  fs::resize_file(file, fs::file_size(file) - 5);
  expect_error([&] { load_hf_weights(r, cfg, file); },
               {file, "truncated: tensor 'lm_head.weight'"});

  expect_error([&] { load_hf_weights(r, cfg, path("")); }, {"no model.safetensors"});
  std::ofstream(path("model.safetensors.index.json")) << "{}";
  expect_error([&] { load_hf_weights(r, cfg, path("")); },
               {path("model.safetensors.index.json"), "no weight_map"});
}

}  // namespace
}  // namespace tessel
