// Resuming with other flags than the save's (train/resume.h), as Megatron does: a changed global
// batch goes on at the save's consumed samples, so the resumed run is the run whose batch changed
// at that sample (a step schedule) bit for bit; a changed learning-rate schedule is refused naming
// the flag, unless --override-opt_param-scheduler (the flags') or
// --use-checkpoint-opt_param-scheduler (the save's) says which to take. A save from before these
// fields were recorded resumes as its own global batch had consumed. A resumed run reads its data
// as far as it consumes, and its validation goes on at the save's consumed validation samples.
// Another --seed goes on, said; changed Adam settings are refused while the optimizer is resumed;
// dropout and --init-method-std may change.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "support/fixtures.h"
#include "support/run_command.h"

namespace tessel {
namespace {

using testing::CommandResult;
using testing::run_tessel;

// Sample-based, so the schedule's lengths (warmup 8, decay 64 samples) do not change with the batch.
const std::string kTrain =
    "train --arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
    "--micro-batch-size 2 --threads 1 --log-interval 1 --min-lr 3e-4 --lr-warmup-samples 8 --train-samples 64 "
    "--eval-iters 0 ";

struct Record {
  int64_t iteration;
  double loss, lr;
  int64_t batch;
};
std::vector<Record> records(const std::string& log) {
  std::vector<Record> out;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out.push_back({j["iteration"].get<int64_t>(), j["loss"].get<double>(), j["lr"].get<double>(),
                   j["global_batch_size"].get<int64_t>()});
  }
  return out;
}

CommandResult train(const std::string& flags) { return run_tessel(kTrain + flags); }

bool says(const CommandResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

// A run at --lr 3e-3 whose global batch is 4 for its first 20 samples (5 iterations), then 8:
// once as a step schedule (320 tokens = 20 samples), once saved after iteration 5 at batch 4.
struct ChangedBatch {
  testing::TestDir dir;
  std::vector<Record> straight;
  std::string save = dir.path("ckpt");

  ChangedBatch() {
    const CommandResult whole =
        train("--lr 3e-3 --step-batch-size-schedule '0:4 320:8' --log-json " + dir.path("straight.jsonl"));
    EXPECT_EQ(whole.exit_code, 0) << whole.output;
    straight = records(dir.path("straight.jsonl"));
    const CommandResult stopped = train("--lr 3e-3 --global-batch-size 4 --exit-interval 5 --save " + save);
    EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
  }

  // Resumed at global batch 8 with `flags`: its records (iterations 6 to 8: 64 samples / 8).
  std::vector<Record> resume(const std::string& name, const std::string& flags, CommandResult* result = nullptr) {
    const CommandResult r = train("--global-batch-size 8 --load " + save + " --log-json " + dir.path(name) + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (result != nullptr) *result = r;
    return records(dir.path(name));
  }

  // The resumed iterations equal the step schedule's, bit for bit.
  void expect_straight(const std::vector<Record>& resumed) const {
    ASSERT_GE(straight.size(), 8u);
    ASSERT_EQ(resumed.size(), 3u);
    for (size_t i = 0; i < resumed.size(); ++i) {
      const Record& want = straight[5 + i];
      EXPECT_EQ(resumed[i].iteration, want.iteration);
      EXPECT_EQ(resumed[i].batch, 8);
      EXPECT_EQ(resumed[i].loss, want.loss) << "iteration " << want.iteration;
      EXPECT_EQ(resumed[i].lr, want.lr) << "iteration " << want.iteration;
    }
  }
};

TEST(ResumeCli, AnotherGlobalBatchGoesOnAtTheConsumedSample) {
  ChangedBatch run;
  CommandResult r;
  run.expect_straight(run.resume("resumed.jsonl", "--lr 3e-3", &r));
  EXPECT_TRUE(says(r, "its 5 iterations consumed 20 samples; the next global batch (8) starts at sample 20"))
      << r.output;
  EXPECT_FALSE(says(r, "other data")) << r.output;
}

// --init-from beside a --load folder that holds a save: the save wins, as Megatron reads
// --pretrained-checkpoint only when --load holds no checkpoint, and the run says that the
// --init-from weights are not read (it read them, then replaced them without a word). Damaged,
// they stop nothing.
TEST(ResumeCli, InitFromBesideASaveIsNotReadAndIsSaid) {
  testing::TestDir dir;
  const std::string save = dir.path("ckpt"), hf = dir.path("hf");
  const CommandResult saved = train("--global-batch-size 4 --exit-interval 2 --save " + save + " --save-hf " + hf);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  for (const auto& e : std::filesystem::directory_iterator(hf))
    if (e.path().extension() == ".safetensors") std::ofstream(e.path()) << "not weights";
  const CommandResult r = train("--global-batch-size 4 --load " + save + " --init-from " + hf);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(says(r, "--init-from " + hf + ": its weights are not read: --load " + save + " holds iteration 2, "
                      "whose weights the run starts from")) << r.output;
}

// Other data goes on from the consumed samples, as Megatron's resume does, but is said (Megatron
// says nothing: a resumed run on another corpus looked like the same run).
TEST(ResumeCli, OtherDataGoesOnAndIsSaid) {
  ChangedBatch run;
  CommandResult r;
  const std::vector<Record> resumed = run.resume("split.jsonl", "--lr 3e-3 --split 90,9,1", &r);
  EXPECT_EQ(resumed.size(), 3u);
  EXPECT_TRUE(says(r, "other data than its run's: --split \"90,9,1\" (was \"969, 30, 1\"); the samples it "
                      "consumed count into this data's order"))
      << r.output;
}

// Another --seed shuffles the data otherwise: the consumed samples count into another order (the
// issue 43 re-probe: samples replayed or skipped without a word). Megatron goes on; so does
// tessel, saying so.
TEST(ResumeCli, AnotherSeedGoesOnAndIsSaid) {
  ChangedBatch run;
  CommandResult r;
  EXPECT_EQ(run.resume("seed.jsonl", "--lr 3e-3 --seed 7", &r).size(), 3u);
  EXPECT_TRUE(says(r, "other data than its run's: --seed 7 (was 1234)")) << r.output;
}

// Adam's betas and eps come back with Megatron's optimizer state, whatever the flags say: a change
// is refused naming every flag (the re-probe: applied without a word), and taken with a fresh
// optimizer (--no-load-optim).
TEST(ResumeCli, ChangedAdamSettingsAreRefusedUnlessTheOptimizerIsFresh) {
  ChangedBatch run;
  const std::string changed = "--lr 3e-3 --global-batch-size 8 --adam-beta1 0.8 --adam-eps 1e-6 --load " + run.save;
  const CommandResult r = train(changed);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(says(r, "--adam-beta1 0.8 (the save's 0.9), --adam-eps 1e-06 (the save's 1e-08): Megatron restores "
                      "Adam's betas and eps with its state"))
      << r.output;
  const CommandResult fresh = train(changed + " --no-load-optim");
  EXPECT_EQ(fresh.exit_code, 0) << fresh.output;
}

// Dropout and --init-method-std are not part of the weights: a resume and a --finetune take them
// anew, as Megatron's (the re-probe: refused as "another model" by a config.json key). A model
// that differs is named by every flag that differs, as --init-from's check.
TEST(ResumeCli, RunSettingsMayChangeAndAnotherModelIsNamedByEveryFlag) {
  ChangedBatch run;
  const std::string resume = "--lr 3e-3 --global-batch-size 8 --load " + run.save + " ";
  CommandResult r = train(resume + "--hidden-dropout 0.2 --init-method-std 0.5");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = train(resume + "--finetune --attention-dropout 0.2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = train(resume + "--num-layers 3 --hidden-size 64 --openai-gelu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(says(r, "saved from another model: --num-layers 3 but the save has 2; --hidden-size 64 but the save "
                      "has 32"))
      << r.output;
  EXPECT_TRUE(says(r, "--openai-gelu true but the save has false")) << r.output;
}

TEST(ResumeCli, AChangedScheduleIsRefusedNamingTheFlag) {
  ChangedBatch run;
  const CommandResult r = train("--lr 1e-3 --global-batch-size 8 --load " + run.save);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(says(r, "the learning-rate schedule differs from the save's: max_lr: the flags' 0.001 (--lr), the "
                      "save's 0.003; give the save's values, --override-opt_param-scheduler"))
      << r.output;
  const CommandResult both = train("--lr 1e-3 --load " + run.save +
                                   " --override-opt_param-scheduler --use-checkpoint-opt_param-scheduler");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_TRUE(says(both, "--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler: give one"))
      << both.output;
}

TEST(ResumeCli, TheCheckpointsScheduleIsKeptOnRequest) {
  ChangedBatch run;
  CommandResult r;
  run.expect_straight(run.resume("kept.jsonl", "--lr 1e-3 --use-checkpoint-opt_param-scheduler", &r));
  EXPECT_TRUE(says(r, "--use-checkpoint-opt_param-scheduler: the learning-rate schedule of the save")) << r.output;
}

TEST(ResumeCli, TheFlagsScheduleOverridesOnRequest) {
  ChangedBatch run;
  CommandResult r;
  // Megatron's spelling with dashes is the same flag.
  const std::vector<Record> resumed = run.resume("override.jsonl", "--lr 1e-3 --override-opt-param-scheduler", &r);
  EXPECT_TRUE(says(r, "--override-opt_param-scheduler: the learning-rate schedule of the flags")) << r.output;
  ASSERT_EQ(resumed.size(), 3u);
  // After 20 samples of a linear decay from 1e-3 at sample 8 to 3e-4 at sample 64.
  EXPECT_NEAR(resumed[0].lr, 3e-4 + (1.0 - 12.0 / 56.0) * 7e-4, 1e-9);
}

TEST(ResumeCli, ASaveWithoutTheNewFieldsConsumedItsOwnBatches) {
  ChangedBatch run;
  const std::string meta = run.save + "/iter_0000005/metadata.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(meta));
  j["run_config"].erase("consumed_train_samples");
  j["run_config"].erase("consumed_valid_samples");
  j["run_config"].erase("opt_param_scheduler");
  std::ofstream(meta) << j.dump();
  CommandResult r;
  run.expect_straight(run.resume("old.jsonl", "--lr 3e-3", &r));
  EXPECT_TRUE(says(r, "a save from before consumed_train_samples was recorded")) << r.output;
  EXPECT_TRUE(says(r, "a save from before its learning-rate schedule was recorded")) << r.output;
}

// Iteration-based runs on a corpus of 37 samples of 32 tokens (one document, one epoch), so that
// the train split is sized in whole epochs close to what it asks for.
struct SmallCorpus {
  testing::TestDir dir;
  std::string save = dir.path("ckpt");
  std::string flags;

  SmallCorpus() {
    std::ifstream in(TESSEL_SOURCE_DIR "/data/kjv-genesis-esther.txt");
    std::string text(1200, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    flags = "train --arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 "
            "--micro-batch-size 1 --threads 1 --lr 3e-3 --log-interval 1 --save " + save +
            " --data-path " + dir.write("small.txt", text) + " ";
  }
};

// 4 iterations of 8 samples saved, resumed at a global batch of 1 up to iteration 74: Megatron's
// size for the train split, 74 × 1 samples (two epochs), ends before the 32 + 70 samples the run
// consumes; the run used to stop at sample 74 after training 42 iterations.
TEST(ResumeCli, ASmallerGlobalBatchReadsAsFarAsItConsumes) {
  SmallCorpus run;
  const std::string train = run.flags + "--split 100,0,0 --eval-iters 0 ";
  const CommandResult first = run_tessel(train + "--global-batch-size 8 --train-iters 4");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const CommandResult resumed = run_tessel(train + "--global-batch-size 1 --train-iters 74 --override-opt_param-scheduler "
                                           "--load " + run.save + " --log-json " + run.dir.path("log.jsonl"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  std::ifstream log(run.dir.path("log.jsonl"));
  std::string last;
  for (std::string line; std::getline(log, line);) last = line;
  EXPECT_EQ(nlohmann::json::parse(last)["consumed_samples"], 32 + 70) << last;
}

// Megatron's validation iterator goes on at the save's consumed_valid_samples: 2 evaluations of
// 1 batch of 4 consumed 8 validation samples; resumed at a global batch of 8, the evaluations of
// iterations 6 and 8 read 8 samples each from sample 8 on (not from 16, where these flags' batch
// would have put them), and the save of iteration 8 records 24.
TEST(ResumeCli, TheValidationGoesOnAtTheSavesConsumedSamples) {
  testing::TestDir dir;
  const std::string save = dir.path("ckpt");
  const std::string train = "train --arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 "
                            "--micro-batch-size 2 --threads 1 --lr 3e-3 --eval-iters 1 --eval-interval 2 --data-path "
                            TESSEL_SOURCE_DIR "/data/kjv-genesis-esther.txt --save " + save + " ";
  const CommandResult first = run_tessel(train + "--global-batch-size 4 --train-iters 4");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const CommandResult resumed =
      run_tessel(train + "--global-batch-size 8 --train-iters 8 --override-opt_param-scheduler --load " + save);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(says(resumed, "its evaluations consumed 8 validation samples; the next evaluation starts there, as "
                            "Megatron's consumed_valid_samples (these flags would have consumed 16)"))
      << resumed.output;
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(save + "/iter_0000008/metadata.json"));
  EXPECT_EQ(meta["run_config"]["consumed_valid_samples"], 8 + 2 * 8);
}

// A consumed-samples count no run of tessel's can have reached (its loader numbers samples below
// 2^31) is refused by --load naming the metadata.json and the field; 2^62 used to fail as "cannot
// draw 4611686018427387912 samples", naming neither. A count that is possible but takes the
// iterations left past 2^31 samples is named too, not met by the loader iterations later.
TEST(ResumeCli, AnAbsurdConsumedSampleCountIsRefusedNamingTheFile) {
  SmallCorpus run;
  const std::string train = run.flags + "--global-batch-size 2 --eval-iters 0 --split 100,0,0 ";
  ASSERT_EQ(run_tessel(train + "--train-iters 2").exit_code, 0);
  const std::string meta = run.save + "/iter_0000002/metadata.json";
  const nlohmann::json saved = nlohmann::json::parse(std::ifstream(meta));
  for (const auto& [key, count, said] : std::vector<std::tuple<std::string, int64_t, std::string>>{
           {"consumed_train_samples", int64_t{1} << 62, "consumed_train_samples 4611686018427387904 is past 2^31 samples"},
           {"consumed_valid_samples", int64_t{1} << 62, "consumed_valid_samples 4611686018427387904 is past 2^31 samples"},
           {"consumed_train_samples", (int64_t{1} << 31) - 2,
            "consumed_train_samples 2147483646: the iterations 3 to 4 (--train-iters) after it would read samples up "
            "to 2147483649"}}) {
    nlohmann::json edited = saved;
    edited["run_config"][key] = count;
    std::ofstream(meta) << edited.dump();
    const CommandResult r = run_tessel(train + "--train-iters 4 --override-opt_param-scheduler --load " + run.save);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(meta + ": " + said), std::string::npos) << key << " " << count << "\n" << r.output;
  }
}

}  // namespace
}  // namespace tessel
