// Hugging Face weight folders of several shards (ckpt/hf_files.h): written as save_pretrained
// writes them and read back as the one file, a part of the model opening only the shards that
// hold it, and an index or shard that disagree refused in one line naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/hf_fixture.h"
#include "tessel/ckpt/hf_files.h"
#include "tessel/ckpt/safetensors.h"

namespace tessel {
namespace {

using namespace hf_testing;
using testing::expect_error;

// The files of a folder, by name.
std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

nlohmann::json read_json(const std::string& file) { return nlohmann::json::parse(std::ifstream(file)); }

void write_json(const std::string& file, const nlohmann::json& j) { std::ofstream(file) << j.dump(); }

// small_llama's 21 tensors in shards of at most 1,600 bytes: the embedding (3,840 bytes) alone.
constexpr int64_t kShardBytes = 1600;

TEST_F(HfTest, ShardedFolderLoadsAsTheOneFile) {
  const ModelConfig cfg = small_llama();
  const ParamRegistry saved = make_registry(cfg, 3);
  export_hf(saved, cfg, path("m"), "", kShardBytes);
  const std::set<std::string> files = files_in(path("m"));
  EXPECT_FALSE(files.count("model.safetensors"));
  ASSERT_TRUE(files.count("model.safetensors.index.json"));
  const nlohmann::json index = read_json(path("m/model.safetensors.index.json"));
  std::set<std::string> shards;
  for (const auto& [name, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
  EXPECT_GT(shards.size(), 4u);
  EXPECT_EQ(index["weight_map"].size(), saved.params().size());
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), saved.numel() * 4);
  int64_t data = 0;
  for (const std::string& shard : shards) {
    EXPECT_TRUE(files.count(shard)) << shard;
    EXPECT_TRUE(shard.starts_with("model-") && shard.ends_with(fmt::format("-of-{:05}.safetensors", shards.size())))
        << shard;
    const SafetensorsReader reader(path("m/" + shard));
    int64_t bytes = 0;
    for (const SafetensorsTensor& t : reader.tensors()) bytes += t.end - t.begin;
    EXPECT_TRUE(bytes <= kShardBytes || reader.tensors().size() == 1) << shard << ": " << bytes;
    data += bytes;
  }
  EXPECT_EQ(data, saved.numel() * 4);

  ParamRegistry loaded = make_registry(cfg, 4);
  load_hf_weights(loaded, cfg, path("m"));
  expect_same_values(saved, loaded);
  ParamRegistry by_index = make_registry(cfg, 5);  // the index named itself
  load_hf_weights(by_index, cfg, path("m/model.safetensors.index.json"));
  expect_same_values(saved, by_index);

  // Written again as one file, then in fewer shards: no file of an earlier write is left.
  export_hf(saved, cfg, path("m"));
  EXPECT_EQ(files_in(path("m")), (std::set<std::string>{"config.json", "model.safetensors"}));
  export_hf(saved, cfg, path("m"), "", kShardBytes);
  export_hf(saved, cfg, path("m"), "", 4 * kShardBytes);
  const std::set<std::string> fewer = files_in(path("m"));
  EXPECT_FALSE(fewer.count("model.safetensors"));
  for (const std::string& f : fewer) {
    if (f.starts_with("model-")) {
      EXPECT_TRUE(f.ends_with(fmt::format("-of-{:05}.safetensors", fewer.size() - 2))) << f;
    }
  }
}

// A pipeline stage's parameters (the second layer and the head) open only the shards that hold
// them, and read the same values as the whole model.
TEST_F(HfTest, PartOfTheModelOpensOnlyItsShards) {
  const ModelConfig cfg = small_llama();
  const ParamRegistry whole = make_registry(cfg, 3);
  export_hf(whole, cfg, path("m"), "", kShardBytes);
  ParamRegistry stage;
  for (const Param& p : whole.params())
    if (p.name.starts_with("model.layers.1.") || p.name == "model.norm.weight" || p.name == "lm_head.weight")
      stage.add(p.name, p.global_shape, p.init, p.init_std, p.weight_decay);
  stage.finalize();
  HfWeightFiles files(path("m"));
  load_hf_params(stage, whole, files, HfImportRules{});
  for (const Param& p : stage.params()) EXPECT_EQ(stage.to_host(p), whole.to_host(whole.get(p.name))) << p.name;

  const nlohmann::json map = read_json(path("m/model.safetensors.index.json"))["weight_map"];
  std::set<std::string> wanted, all;
  for (const auto& [name, shard] : map.items()) {
    all.insert(shard.get<std::string>());
    if (stage.has(name)) wanted.insert(path("m/" + shard.get<std::string>()));
  }
  const std::vector<std::string> opened = files.opened_files();
  EXPECT_EQ(std::set<std::string>(opened.begin(), opened.end()), wanted);
  EXPECT_EQ(opened.size(), wanted.size()) << "a shard opened twice";
  EXPECT_LT(wanted.size(), all.size());
}

TEST_F(HfTest, ShardsThatDisagreeWithTheIndexAreRefused) {
  const ModelConfig cfg = small_llama();
  const std::string index = path("m/model.safetensors.index.json");
  const auto fresh = [&] {
    fs::remove_all(path("m"));
    export_hf(make_registry(cfg, 1), cfg, path("m"), "", kShardBytes);
    return read_json(index);
  };
  const auto refused = [&](std::initializer_list<std::string> parts) {
    ParamRegistry r = make_registry(cfg, 2);
    const ParamRegistry before = make_registry(cfg, 2);
    expect_error([&] { load_hf_weights(r, cfg, path("m")); }, parts);
    expect_same_values(before, r);
  };
  nlohmann::json j = fresh();
  j["weight_map"]["model.norm.weight"] = "../model-00001-of-00009.safetensors";
  write_json(index, j);
  refused({index, "'model.norm.weight'", "not a file name in this folder"});

  j = fresh();
  j.erase("weight_map");
  write_json(index, j);
  refused({index, "no weight_map"});

  // The index places the final norm in the embedding's shard (opened first), which does not
  // hold it; and the norm's own shard holds what the index places elsewhere.
  j = fresh();
  const std::string norm_shard = j["weight_map"]["model.norm.weight"];
  const std::string embedding_shard = j["weight_map"]["model.embed_tokens.weight"];
  j["weight_map"]["model.norm.weight"] = embedding_shard;
  write_json(index, j);
  refused({index, "'model.norm.weight' is not in", embedding_shard, "where the index places it"});
  j = fresh();
  j["weight_map"]["model.norm.weight"] = "model-00099-of-00099.safetensors";
  write_json(index, j);
  refused({path("m/" + norm_shard), "holds tensor 'model.norm.weight'", "places in", "model-00099-of-00099"});

  // A tensor the index does not list, a shard file that is not there.
  j = fresh();
  j["weight_map"].erase("model.norm.weight");
  write_json(index, j);
  refused({path("m/" + norm_shard), "'model.norm.weight'", "does not list"});
  j = fresh();
  fs::remove(path("m/" + norm_shard));
  refused({path("m/" + norm_shard), "cannot open"});

  // An extra name in the index is unexpected, a missing one missing: every rank sees both.
  j = fresh();
  j["weight_map"]["model.layers.0.mlp.experts.0.up_proj.weight"] = norm_shard;
  write_json(index, j);
  refused({path("m/" + norm_shard), "unexpected tensor 'model.layers.0.mlp.experts.0.up_proj.weight'"});
  j = fresh();
  j["weight_map"].erase("lm_head.weight");
  write_json(index, j);
  refused({index, "missing tensor 'lm_head.weight'"});
}

}  // namespace
}  // namespace tessel
