// Hugging Face import under PP = the world (2 or 4 ranks): from a folder of several shard files,
// each rank's pipeline stage (as the declare-only build gives it) reads the whole model's values
// for its parameters and opens only the shard files that hold them — counted by the importer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "ckpt/hf_fixture.h"
#include "support/world_copy.h"
#include "tessel/model/transformer.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

TEST(HfImport, EachStageOpensOnlyTheShardsHoldingIt) {
  auto world = world_copy();
  const int pp = world->size(), stage = world->rank();
  ModelConfig cfg = hf_testing::small_llama();
  cfg.num_layers = 4;
  ASSERT_EQ(cfg.num_layers % pp, 0);
  int pid = ::getpid();  // rank 0's names the folder every rank reads
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const fs::path dir = fs::temp_directory_path() / ("tessel_hf_import_mpi_" + std::to_string(pid));

  ParamRegistry whole;
  TransformerChunk::declare(cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}}, ChunkPlace{}, whole);
  whole.finalize();
  whole.init_values(7);
  // Shards of at most 1,600 bytes: the embedding and the head (1,920 bytes each) alone, a layer's
  // tensors in two or three.
  if (stage == 0) export_hf(whole, cfg, dir.string(), "", 1600);
  world->barrier();

  const int per_stage = cfg.num_layers / pp;
  ParamRegistry mine;
  TransformerChunk::declare(cfg, {.spec = ChunkSpec{stage * per_stage, per_stage, stage == 0, stage == pp - 1}},
                            ChunkPlace{}, mine);
  mine.finalize();
  const std::vector<std::string> opened = load_hf_weights(mine, cfg, dir.string());
  for (const Param& p : mine.params()) EXPECT_EQ(mine.to_host(p), whole.to_host(whole.get(p.name))) << p.name;

  const nlohmann::json map = nlohmann::json::parse(std::ifstream(dir / "model.safetensors.index.json"))["weight_map"];
  std::set<std::string> holding_mine, all;
  for (const auto& [name, shard] : map.items()) {
    all.insert(shard.get<std::string>());
    if (mine.has(name)) holding_mine.insert((dir / shard.get<std::string>()).string());
  }
  EXPECT_EQ(std::set<std::string>(opened.begin(), opened.end()), holding_mine) << "stage " << stage;
  EXPECT_EQ(opened.size(), holding_mine.size()) << "a shard opened twice";
  EXPECT_LT(holding_mine.size(), all.size()) << "stage " << stage << " needs every shard";
  world->barrier();
  if (stage == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace tessel
