// CheckpointSaver (checkpoint.h) in one process: a synchronous save is committed — metadata.json
// and the tracker written — before save() returns; a background save is committed by the first
// poll() after its writer is done; a failed write stops the run at once (a background one at
// the next poll), naming the file, the error and the save the tracker still names.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/fixtures.h"
#include "support/tiny_model.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/save_lock.h"
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
    fs::create_directories(dir.path("ckpt"));  // as a run makes its --save folder at its start
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

// The --save folder deleted (or replaced) under a run that holds its lock stops the run at its
// next save, which does not make the folder again: made again, it would be unlocked, and a second
// run could write its saves beside this one's.
TEST(CheckpointSaver, AFolderDeletedUnderTheRunIsNotMadeAgain) {
  SaverFixture f;
  const std::string ckpt = f.dir.path("ckpt");
  const SaveLock lock(ckpt);
  CheckpointSaver saver(false, true, &lock);
  f.save(saver, 2);
  fs::remove_all(ckpt);
  const std::string deleted = testing::error_of([&] { f.save(saver, 4); });
  EXPECT_NE(deleted.find("--save " + ckpt + ": the folder was deleted or replaced while this run held its lock"),
            std::string::npos) << deleted;
  EXPECT_FALSE(fs::exists(ckpt));
  fs::create_directories(ckpt);  // another folder under the same name
  const std::string replaced = testing::error_of([&] { f.save(saver, 6); });
  EXPECT_NE(replaced.find("deleted or replaced"), std::string::npos) << replaced;
  EXPECT_TRUE(fs::is_empty(ckpt));
}

// The file names in metadata.json are plain names in the save's folder: a save naming another
// run's files ("../", an absolute path) holds no weights of its own, and neither `checkpoint
// verify` nor --load takes it.
TEST(CheckpointSaver, FileNamesLeadingOutOfTheSaveAreRefused) {
  SaverFixture f;
  CheckpointSaver saver(false);
  f.save(saver, 2);
  const std::string real = f.dir.path("ckpt/iter_0000002");
  const std::string hollow = f.dir.path("hollow/iter_0000002");
  fs::create_directories(hollow);
  std::ofstream(f.dir.path("hollow/latest_checkpointed_iteration.txt")) << "2\n";
  for (const std::string name : {std::string("../../ckpt/iter_0000002/rank_00000.safetensors"), real + "/rank_00000.safetensors"}) {
    nlohmann::json meta = nlohmann::json::parse(std::ifstream(real + "/metadata.json"));
    meta["files"][0]["name"] = name;
    for (auto& [tensor, t] : meta["tensors"].items())
      for (auto& shard : t["shards"]) shard["file"] = name;
    std::ofstream(hollow + "/metadata.json") << meta.dump();
    const std::string expected = hollow + "/metadata.json: an entry of \"files\" names the file \"" + name +
                                 "\", which is not a file name in this folder";
    const std::string verified = testing::error_of([&] { verify_checkpoint(f.dir.path("hollow")); });
    EXPECT_NE(verified.find(expected), std::string::npos) << verified;
    const std::string loaded = testing::error_of([&] {
      load_checkpoint(f.dir.path("hollow"), f.params, *f.optimizer, f.cfg);
    });
    EXPECT_NE(loaded.find(expected), std::string::npos) << loaded;
  }
}

// An iteration folder the run may save into that is a symbolic link is refused at its start, all
// of them named; one outside the run's iterations, or a name a save never makes, is left alone.
TEST(CheckpointSaver, LinkedIterationFoldersTheRunWouldSaveIntoAreNamed) {
  SaverFixture f;
  const std::string ckpt = f.dir.path("ckpt"), elsewhere = f.dir.path("elsewhere");
  fs::create_directories(elsewhere);
  for (const char* name : {"iter_0000001", "iter_0000005", "iter_0000010", "iter_5", "iter_00000007"})
    fs::create_directory_symlink(elsewhere, ckpt + "/" + name);
  fs::create_directories(ckpt + "/iter_0000006");
  const std::string named = testing::error_of([&] { require_no_linked_iteration_dirs(ckpt, 2, 10); });
  EXPECT_NE(named.find("--save " + ckpt + ": " + ckpt + "/iter_0000005 (iteration 5), " + ckpt +
                       "/iter_0000010 (iteration 10) are each a symbolic link"),
            std::string::npos) << named;
  for (const char* left : {"iter_0000001", "iter_5", "iter_00000007", "iter_0000006"})
    EXPECT_EQ(named.find(left), std::string::npos) << left << "\n" << named;
  EXPECT_NO_THROW(require_no_linked_iteration_dirs(ckpt, 11, 20));
  EXPECT_NO_THROW(require_no_linked_iteration_dirs(ckpt, 6, 9));
}

// A tracker that is not a regular file (a FIFO, a folder) is named as such, not called missing:
// the folder is a --save folder with something wrong in it, and a FIFO is never opened (its read
// would wait for a writer).
TEST(CheckpointSaver, ATrackerThatIsNotARegularFileIsNamed) {
  SaverFixture f;
  const std::string tracker = f.dir.path("ckpt/latest_checkpointed_iteration.txt");
  ASSERT_EQ(::mkfifo(tracker.c_str(), 0644), 0);
  const std::string fifo = testing::error_of([&] { f.latest(); });
  EXPECT_NE(fifo.find(tracker + " is not a regular file"), std::string::npos) << fifo;
  fs::remove(tracker);
  fs::create_directory(tracker);
  const std::string folder = testing::error_of([&] { f.latest(); });
  EXPECT_NE(folder.find(tracker + " is not a regular file"), std::string::npos) << folder;
  fs::remove(tracker);
  const std::string missing = testing::error_of([&] { f.latest(); });
  EXPECT_NE(missing.find(tracker + ": no checkpoint tracker"), std::string::npos) << missing;
}

}  // namespace
}  // namespace tessel
