// Hugging Face folders from the command line: `export --max-shard-size` writes shards and their
// index, which `generate`, `export --init-from` and `train --init-from` read like the one file;
// and under PP 2 × EP 2 a folder that does not fit the model is refused on every rank in one line
// before any rank trains, whether every rank sees the fault or only those reading its shard.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/run_command.h"
#include "tessel/ckpt/safetensors.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::run_command;
using testing::run_tessel;

const std::string kModel =
    "--arch llama --num-layers 4 --hidden-size 32 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
    "--ffn-hidden-size 64 --num-experts 4 --moe-router-topk 2 --seq-length 16 ";

std::string read(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(HfFolderCli, ShardedFolderReadsAsTheOneFile) {
  testing::TestDir dir;
  ASSERT_EQ(run_tessel("export " + kModel + "--seed 3 --out " + dir.path("one")).exit_code, 0);
  const CommandResult sharded = run_tessel("export " + kModel + "--seed 3 --max-shard-size 20KB --out " + dir.path("shards"));
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  EXPECT_NE(sharded.output.find("model.safetensors.index.json, its shards"), std::string::npos) << sharded.output;
  EXPECT_FALSE(fs::exists(dir.path("shards/model.safetensors")));
  EXPECT_TRUE(fs::exists(dir.path("shards/model.safetensors.index.json")));

  // Read back and written as one file again: the same bytes.
  const CommandResult back = run_tessel("export --init-from " + dir.path("shards") + " --out " + dir.path("back"));
  ASSERT_EQ(back.exit_code, 0) << back.output;
  EXPECT_EQ(read(dir.path("back/model.safetensors")), read(dir.path("one/model.safetensors")));
  const std::string generate = "generate --max-new-tokens 8 --prompt 'In the' --threads 1 --model ";
  const CommandResult from_one = run_tessel(generate + dir.path("one"));
  const CommandResult from_shards = run_tessel(generate + dir.path("shards"));
  ASSERT_EQ(from_shards.exit_code, 0) << from_shards.output;
  EXPECT_EQ(from_shards.output, from_one.output);

  const CommandResult bad = run_tessel("export " + kModel + "--max-shard-size 5XB --out " + dir.path("x"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--max-shard-size 5XB: not a size"), std::string::npos) << bad.output;
}

// The good folder's weights rewritten: without one tensor, with one more, with one of another
// shape.
void rewrite(const std::string& from, const std::string& to, const std::string& drop, const SafetensorsEntry* add) {
  const SafetensorsReader reader(from);
  std::vector<std::vector<float>> values;
  values.reserve(reader.tensors().size());
  std::vector<SafetensorsEntry> entries;
  for (const SafetensorsTensor& t : reader.tensors()) {
    if (t.name == drop) continue;
    values.emplace_back(t.numel());
    reader.read(t.name, values.back().data());
    entries.push_back({t.name, t.shape, values.back().data()});
  }
  if (add != nullptr) entries.push_back(*add);
  write_safetensors(to, entries, {{"format", "pt"}});
}

TEST(HfFolderCli, AFolderThatDoesNotFitIsRefusedOnEveryRankInOneLine) {
  testing::TestDir dir;
  ASSERT_EQ(run_tessel("export " + kModel + "--out " + dir.path("good")).exit_code, 0);
  ASSERT_EQ(run_tessel("export --arch gpt2 --num-layers 4 --hidden-size 32 --num-attention-heads 4 "
                       "--seq-length 16 --out " + dir.path("gpt2")).exit_code, 0);
  ASSERT_EQ(run_tessel("export " + kModel + "--max-shard-size 10KB --out " + dir.path("shards")).exit_code, 0);
  const auto folder = [&](const std::string& name) {
    fs::create_directories(dir.path(name));
    fs::copy_file(dir.path("good/config.json"), dir.path(name + "/config.json"));
    return dir.path(name + "/model.safetensors");
  };
  const std::string good = dir.path("good/model.safetensors");
  fs::copy_file(dir.path("gpt2/model.safetensors"), folder("other"));
  rewrite(good, folder("missing"), "model.layers.3.mlp.experts.3.up_proj.weight", nullptr);
  const std::vector<float> values(64, 1.0f);
  const SafetensorsEntry extra{"model.layers.4.input_layernorm.weight", {32}, values.data()};
  rewrite(good, folder("extra"), "", &extra);
  const SafetensorsEntry wider{"model.norm.weight", {64}, values.data()};
  rewrite(good, folder("shape"), "model.norm.weight", &wider);
  // A wrong shape in the shard of the last layer's experts: only the ranks of the last stage read it.
  const nlohmann::json map = nlohmann::json::parse(std::ifstream(dir.path("shards/model.safetensors.index.json")))["weight_map"];
  const std::string last = map["model.layers.3.mlp.experts.3.down_proj.weight"];
  const std::string expert = dir.path("shards/" + last);
  std::vector<float> copy(32 * 32);
  const SafetensorsEntry narrower{"model.layers.3.mlp.experts.3.down_proj.weight", {32, 32}, copy.data()};
  rewrite(expert, expert + ".new", "model.layers.3.mlp.experts.3.down_proj.weight", &narrower);
  fs::rename(expert + ".new", expert);

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"other", "unexpected tensor 'transformer.wte.weight': this llama model has no such parameter"},
      {"missing", "missing tensor 'model.layers.3.mlp.experts.3.up_proj.weight'"},
      {"extra", "unexpected tensor 'model.layers.4.input_layernorm.weight'"},
      {"shape", "tensor 'model.norm.weight' has shape [64] but the model expects [32]"},
      {"shards", "tensor 'model.layers.3.mlp.experts.3.down_proj.weight' has shape [32, 32] but the model expects [32, 64]"},
  };
  for (const auto& [name, message] : cases) {
    SCOPED_TRACE(name);
    const CommandResult r = run_command(
        "timeout 120 mpirun --allow-run-as-root --oversubscribe -n 4 -x OMP_NUM_THREADS=1 " +
        std::string(TESSEL_BINARY) + " train " + kModel +
        "--pp 2 --ep 2 --micro-batch-size 2 --global-batch-size 8 --train-iters 2 --eval-iters 0 --threads 1 --init-from " +
        dir.path(name));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.exit_code, 124) << "timed out";
    EXPECT_EQ(count(r.output, message), 1u) << r.output;
    EXPECT_EQ(count(r.output, "tessel: error:"), 1u) << r.output;
    EXPECT_EQ(r.output.find("iter "), std::string::npos) << "a rank trained:\n" << r.output;
  }
}

}  // namespace
}  // namespace tessel
