// CheckpointSaver (checkpoint.h) in one process: a synchronous save is committed — metadata.json
// and the tracker written — before save() returns; a background save is committed by the first
// poll() after its writer is done; a failed write stops the run at once (a background one at
// the next poll), naming the file, the error and the save the tracker still names.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/fixtures.h"
#include "support/tiny_model.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/transformer.h"
#include "tessel/parallel/groups.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

struct SaverFixture {
  testing::TestDir dir;
  ParamRegistry params;
  ProcessGroups groups = ProcessGroups::single();
  ModelConfig cfg = testing::tiny_config(Arch::GPT2);
  std::unique_ptr<AdamW> optimizer;

  SaverFixture() {  // the parameters of the model `cfg` (verify_checkpoint checks a save against it)
    TransformerChunk::declare(cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}}, ChunkPlace{}, params);
    params.finalize();
    params.init_values(3);
    optimizer = std::make_unique<AdamW>(cpu_kernels(), params, OptimizerConfig{});
  }
  void save(CheckpointSaver& saver, int64_t iteration) {
    saver.save(dir.path("ckpt"), iteration, params, *optimizer, cfg, false, 1, nlohmann::json::object(),
               groups);
  }
  int64_t latest() const { return latest_checkpointed_iteration(dir.path("ckpt")); }
  // Makes the rank file of `iteration` impossible to write: a folder that is not empty.
  void block(int64_t iteration) const {
    const fs::path file = checkpoint_iteration_dir(dir.path("ckpt"), iteration) + "/rank_00000.safetensors";
    fs::create_directories(file);
    std::ofstream(file / "in-the-way") << "x";
  }
};

TEST(CheckpointSaver, SynchronousSaveIsCommittedBeforeTrainingGoesOn) {
  SaverFixture f;
  CheckpointSaver saver(false);
  f.save(saver, 2);
  EXPECT_EQ(f.latest(), 2);  // no finish() needed
  EXPECT_EQ(verify_checkpoint(f.dir.path("ckpt")), 1);
  f.save(saver, 4);
  EXPECT_EQ(f.latest(), 4);
}

TEST(CheckpointSaver, BackgroundSaveIsCommittedWhenItsWriterIsDone) {
  SaverFixture f;
  CheckpointSaver saver(true);
  f.save(saver, 3);
  EXPECT_THROW(f.latest(), Error);  // written, perhaps, but not committed
  for (int polls = 0; polls < 500; ++polls) {
    saver.poll(f.groups);
    if (fs::exists(f.dir.path("ckpt/latest_checkpointed_iteration.txt"))) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(f.latest(), 3);
  EXPECT_EQ(verify_checkpoint(f.dir.path("ckpt")), 1);
}

TEST(CheckpointSaver, FailedWriteStopsAtOnceNamingTheFile) {
  SaverFixture f;
  CheckpointSaver saver(false);
  f.save(saver, 2);
  f.block(4);
  try {
    f.save(saver, 4);
    ADD_FAILURE() << "no JobError";
  } catch (const JobError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the checkpoint save of iteration 4 failed:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank_00000.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("latest_checkpointed_iteration.txt still names iteration 2"), std::string::npos) << msg;
  }
  EXPECT_EQ(f.latest(), 2);
}

TEST(CheckpointSaver, FailedBackgroundWriteIsRaisedByThePoll) {
  SaverFixture f;
  CheckpointSaver saver(true);
  f.block(5);
  f.save(saver, 5);  // the writer fails on its own thread
  bool raised = false;
  for (int polls = 0; polls < 500 && !raised; ++polls) {
    try {
      saver.poll(f.groups);
    } catch (const JobError& e) {
      raised = true;
      EXPECT_NE(std::string(e.what()).find("no save in"), std::string::npos) << e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(raised);
  saver.finish(f.groups);  // nothing left in flight
}

}  // namespace
}  // namespace tessel
