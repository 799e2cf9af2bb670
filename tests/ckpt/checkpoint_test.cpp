// Checkpoints (checkpoint.h): resuming in a new process follows the uninterrupted run bitwise
// under the same layout and within the equivalence tolerance under another; damaged saves and
// saves of another model are refused with an error naming the file. Every run is `tessel train`
// as a user runs it (under mpirun for several ranks), with a time limit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/log_json.h"
#include "support/run_command.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/ckpt/checkpoint.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

const char* kModel =
    "--arch gpt2 --num-layers 2 --hidden-size 64 --num-attention-heads 8 --ffn-hidden-size 128 ";
const std::string kCommon =
    "--seq-length 32 --global-batch-size 8 --micro-batch-size 2 --lr 3e-3 --min-lr 3e-4 "
    "--lr-warmup-iters 2 --lr-decay-style cosine --log-interval 1 --seed 11 --threads 1 ";
const std::string kTraining = kCommon + "--train-iters 20 --eval-iters 0 ";

// A case's folder, as fresh_dir made it.
fs::path case_dir(const std::string& name) {
  return fs::temp_directory_path() / ("tessel_checkpoint_" + std::to_string(::getpid())) / name;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = case_dir(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// `tessel train` on `ranks` processes with `flags`; the losses it logged.
std::vector<double> train(const fs::path& dir, int ranks, const std::string& flags,
                          const char* model = kModel) {
  const std::string log = (dir / "log.jsonl").string();
  fs::remove(log);
  const std::string train =
      std::string(TESSEL_BINARY) + " train " + model + kTraining + flags + " --log-json " + log;
  const std::string cmd = ranks == 1 ? "timeout 120 " + train
                                     : "timeout 240 mpirun --allow-run-as-root --oversubscribe -n " +
                                           std::to_string(ranks) + " -x OMP_NUM_THREADS=1 " + train;
  const testing::CommandResult r = testing::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  return testing::log_json_losses(log);
}

// 20 iterations straight, and 10 + save then resume for 10 in a new process under `resumed`.
struct Resume {
  std::vector<double> straight, first, second;
};

Resume straight_and_resumed(const std::string& name, int saved_ranks, const std::string& saved,
                            int resumed_ranks, const std::string& resumed,
                            const char* model = kModel) {
  const fs::path dir = fresh_dir(name), ckpt = dir / "ckpt";
  Resume r;
  r.straight = train(dir, saved_ranks, saved, model);
  // The first half runs with --train-iters 20 --eval-iters 0 too (the schedule is the whole run's) and stops
  // after the save at 10 (--exit-interval, as Megatron's).
  r.first = train(dir, saved_ranks,
                  saved + " --save " + ckpt.string() + " --load " + ckpt.string() + " --exit-interval 10",
                  model);
  r.second = train(dir, resumed_ranks, resumed + " --load " + ckpt.string(), model);
  return r;
}

void expect_bitwise(const Resume& r) {
  ASSERT_EQ(r.straight.size(), 20u);
  ASSERT_EQ(r.first.size(), 10u);
  ASSERT_EQ(r.second.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(r.first[i], r.straight[i]) << "iteration " << i + 1;
    EXPECT_EQ(r.second[i], r.straight[10 + i]) << "iteration " << 11 + i;
  }
}

TEST(Checkpoint, SameLayoutResumeIsBitwise) { expect_bitwise(straight_and_resumed("same", 1, "", 1, "")); }

// Saved by a background writer while training went on (a save every 3 iterations, the last one
// committed at exit), under TP2.
TEST(Checkpoint, AsyncSaveResumeIsBitwise) {
  expect_bitwise(straight_and_resumed("async", 2, "--tp 2 --async-save --save-interval 3", 2, "--tp 2"));
}

// Tensor and pipeline parallel at once (GPT-2's tied embedding on both stages), the same layout
// again after the restart.
TEST(Checkpoint, SameLayoutResumeIsBitwiseUnderTp2Pp2) {
  expect_bitwise(straight_and_resumed("tp2pp2", 4, "--tp 2 --pp 2", 4, "--tp 2 --pp 2"));
}

const char* kMoeModel =
    "--arch llama --num-layers 2 --hidden-size 64 --num-attention-heads 8 --group-query-attention --num-query-groups 4 "
    "--ffn-hidden-size 128 --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 ";

TEST(Checkpoint, MoeSameLayoutResumeIsBitwise) {
  expect_bitwise(straight_and_resumed("moe_same", 1, "", 1, "", kMoeModel));
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, size_t from) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double rel = std::abs(got[i] - want[from + i]) / want[from + i];
    EXPECT_LT(rel, 1e-4) << "iteration " << from + i + 1 << ": " << got[i] << " vs " << want[from + i];
  }
}

// Saved by two TP ranks, resumed by one process.
TEST(Checkpoint, Tp2SaveResumesUnderOneProcess) {
  const Resume r = straight_and_resumed("tp2_to_single", 2, "--tp 2", 1, "");
  ASSERT_EQ(r.straight.size(), 20u);
  ASSERT_EQ(r.second.size(), 10u);
  expect_close(r.second, r.straight, 10);
}

// Saved by two DP ranks with the distributed optimizer (each holds half of Adam's moments),
// resumed under TP2.
TEST(Checkpoint, DistributedOptimizerSaveResumesUnderTp2) {
  const Resume r = straight_and_resumed("dp2_distopt_to_tp2", 2, "--use-distributed-optimizer", 2, "--tp 2");
  ASSERT_EQ(r.straight.size(), 20u);
  ASSERT_EQ(r.second.size(), 10u);
  expect_close(r.second, r.straight, 10);
}

// Pipeline stages (the tied embedding saved by both) resumed by one process.
TEST(Checkpoint, Pp2SaveResumesUnderOneProcess) {
  const Resume r = straight_and_resumed("pp2_to_single", 2, "--pp 2", 1, "");
  ASSERT_EQ(r.second.size(), 10u);
  expect_close(r.second, r.straight, 10);
}

// Experts saved by two EP ranks (each holding two, under local names) resumed by one process.
TEST(Checkpoint, MoeEp2SaveResumesUnderOneProcess) {
  const Resume r = straight_and_resumed("ep2_to_single", 2, "--ep 2", 1, "", kMoeModel);
  ASSERT_EQ(r.straight.size(), 20u);
  ASSERT_EQ(r.second.size(), 10u);
  expect_close(r.second, r.straight, 10);
}

// Context parallel (each rank holds half of every sequence) resumed by one process.
TEST(Checkpoint, Cp2SaveResumesUnderOneProcess) {
  const Resume r = straight_and_resumed("cp2_to_single", 2, "--cp 2", 1, "");
  ASSERT_EQ(r.second.size(), 10u);
  expect_close(r.second, r.straight, 10);
}

// All of TP, PP and DP in the save (8 ranks); the resume has none of its TP and PP: two stages of
// two virtual chunks each, over DP 2 with the distributed optimizer.
TEST(Checkpoint, Tp2Pp2Dp2SaveResumesUnderVppAndDistributedOptimizer) {
  const char* four_layers =
      "--arch gpt2 --num-layers 4 --hidden-size 64 --num-attention-heads 8 --ffn-hidden-size 128 ";
  const Resume r = straight_and_resumed("tp2pp2dp2_to_vpp", 8, "--tp 2 --pp 2", 4,
                                        "--pp 2 --vpp 2 --use-distributed-optimizer", four_layers);
  ASSERT_EQ(r.straight.size(), 20u);
  ASSERT_EQ(r.second.size(), 10u);
  expect_close(r.second, r.straight, 10);
}

// One save under TP2·PP2·DP2 (8 ranks), resumed under other layouts: TP1·PP4, TP4·PP1·DP2, one
// process, DP2 with the distributed optimizer.
TEST(Checkpoint, Tp2Pp2Dp2SaveResumesUnderManyLayouts) {
  const char* four_layers =
      "--arch gpt2 --num-layers 4 --hidden-size 64 --num-attention-heads 8 --ffn-hidden-size 128 ";
  const fs::path dir = fresh_dir("tp2pp2dp2_many"), ckpt = dir / "ckpt";
  const std::vector<double> straight = train(dir, 8, "--tp 2 --pp 2", four_layers);
  train(dir, 8, "--tp 2 --pp 2 --save " + ckpt.string() + " --exit-interval 10", four_layers);
  const std::pair<int, std::string> layouts[] = {
      {4, "--pp 4"}, {8, "--tp 4"}, {1, ""}, {2, "--use-distributed-optimizer"}};
  for (const auto& [ranks, flags] : layouts) {
    SCOPED_TRACE(flags);
    const std::vector<double> second = train(dir, ranks, flags + " --load " + ckpt.string(), four_layers);
    ASSERT_EQ(second.size(), 10u);
    expect_close(second, straight, 10);
  }
}

// Fully sharded: a ZeRO-3 save over PP 2 × DP 2 (each rank holding half of each unit's weights,
// gradients and moments; GPT-2's tied embedding on both stages) resumes bitwise in the same
// layout, and under ZeRO-2, the distributed optimizer (ZeRO-1) and in one process within the
// suite's tolerance.
TEST(Checkpoint, FullyShardedPp2SaveResumesUnderOtherStrategies) {
  const char* four_layers =
      "--arch gpt2 --num-layers 4 --hidden-size 64 --num-attention-heads 8 --ffn-hidden-size 128 ";
  const std::string zero3 = "--pp 2 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params";
  const Resume r = straight_and_resumed("zero3_pp2", 4, zero3, 4, zero3, four_layers);
  expect_bitwise(r);
  const fs::path dir = case_dir("zero3_pp2"), ckpt = dir / "ckpt";
  const std::pair<int, std::string> layouts[] = {
      {2, "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads"},
      {2, "--use-distributed-optimizer"},
      {1, ""}};
  for (const auto& [ranks, flags] : layouts) {
    SCOPED_TRACE(flags);
    const std::vector<double> second = train(dir, ranks, flags + " --load " + ckpt.string(), four_layers);
    ASSERT_EQ(second.size(), 10u);
    expect_close(second, r.straight, 10);
  }
}

// A MoE save under EP4 resumed under EP2 and by one process (EP1).
TEST(Checkpoint, MoeEp4SaveResumesUnderEp2AndEp1) {
  const fs::path dir = fresh_dir("ep4_many"), ckpt = dir / "ckpt";
  const std::vector<double> straight = train(dir, 4, "--ep 4", kMoeModel);
  train(dir, 4, "--ep 4 --save " + ckpt.string() + " --exit-interval 10", kMoeModel);
  for (const auto& [ranks, flags] : {std::pair<int, std::string>{2, "--ep 2"}, {1, ""}}) {
    SCOPED_TRACE(flags);
    const std::vector<double> second = train(dir, ranks, flags + " --load " + ckpt.string(), kMoeModel);
    ASSERT_EQ(second.size(), 10u);
    expect_close(second, straight, 10);
  }
}

// The files `tessel export --load` writes from a save and those of the run's own --save-hf
// hold the same tensors, bit for bit.
void expect_export_matches_save_hf(const fs::path& dir, const fs::path& ckpt) {
  const testing::CommandResult r =
      testing::run_tessel("export --load " + ckpt.string() + " --out " + (dir / "exported").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const SafetensorsReader want((dir / "hf" / "model.safetensors").string()),
      got((dir / "exported" / "model.safetensors").string());
  ASSERT_EQ(want.tensors().size(), got.tensors().size());
  for (const SafetensorsTensor& t : want.tensors()) {
    ASSERT_TRUE(got.has(t.name)) << t.name;
    std::vector<float> a(t.numel()), b(t.numel());
    want.read(t.name, a.data());
    got.read(t.name, b.data());
    EXPECT_EQ(a, b) << t.name;
  }
}

TEST(Checkpoint, ExportOfATp2SaveMatchesSaveHf) {
  const fs::path dir = fresh_dir("export"), ckpt = dir / "ckpt";
  train(dir, 2, "--tp 2 --save " + ckpt.string() + " --save-hf " + (dir / "hf").string());
  expect_export_matches_save_hf(dir, ckpt);
}

// A Megatron-LM checkpoint given to --load (its tracker has the same name as tessel's) is named as
// one, in each of its formats, with the way its weights can come in; Megatron's checkpoint format
// flags are accepted and answered at the start.
TEST(Checkpoint, AMegatronCheckpointIsNamed) {
  const fs::path dir = fresh_dir("megatron");
  const auto write = [](const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  };
  write(dir / "dist" / "latest_checkpointed_iteration.txt", "100");
  write(dir / "dist" / "iter_0000100" / "metadata.json",
        R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
            "common_backend_version": 1})");
  write(dir / "dist" / "iter_0000100" / "__0_0.distcp", "");
  write(dir / "legacy" / "latest_checkpointed_iteration.txt", "100\n");
  write(dir / "legacy" / "iter_0000100" / "mp_rank_00" / "model_optim_rng.pt", "");
  write(dir / "dcp" / "latest_checkpointed_iteration.txt", "7");
  write(dir / "dcp" / "iter_0000007" / ".metadata", "");
  write(dir / "dcp" / "iter_0000007" / "__0_0.distcp", "");
  write(dir / "release" / "latest_checkpointed_iteration.txt", "release");
  for (const auto& [name, format] : {std::pair<std::string, std::string>{"dist", "(torch_dist)"},
                                     {"legacy", "(torch, the legacy format)"},
                                     {"dcp", "(torch_dcp or fsdp_dtensor, torch.distributed.checkpoint's)"},
                                     {"release", "(a release checkpoint)"}}) {
    const testing::CommandResult r =
        testing::run_tessel("train " + std::string(kModel) + kTraining + "--load " + (dir / name).string());
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("a Megatron-LM checkpoint " + format + ", not a tessel save"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("convert it to a Hugging Face folder (Megatron-Bridge)"), std::string::npos) << r.output;
  }
  const testing::CommandResult flags = testing::run_tessel(
      "train " + std::string(kModel) + kCommon +
      "--train-iters 3 --eval-iters 0 --ckpt-format torch_dist --auto-detect-ckpt-format --dist-ckpt-strictness log_all");
  ASSERT_EQ(flags.exit_code, 0) << flags.output;
  for (const char* said : {"--ckpt-format torch_dist: tessel saves in its own format",
                           "--auto-detect-ckpt-format: --load tells a tessel save from a Megatron-LM checkpoint",
                           "--dist-ckpt-strictness log_all: tessel's --load is always strict"})
    EXPECT_NE(flags.output.find(said), std::string::npos) << said << "\n" << flags.output;
}

// A save of a model with no Hugging Face form (an ungated shared expert) keeps what it is in its
// description: `export --load` gives --save-hf's reason, before any weights are read.
TEST(Checkpoint, ExportOfASaveRefusesWhatSaveHfRefuses) {
  const std::string model = std::string(kMoeModel) + "--moe-shared-expert-intermediate-size 64 ";
  const fs::path dir = fresh_dir("export_refused"), ckpt = dir / "ckpt";
  ASSERT_EQ(train(dir, 1, "--save " + ckpt.string(), model.c_str()).size(), 20u);
  const testing::CommandResult r =
      testing::run_tessel("export --load " + ckpt.string() + " --out " + (dir / "out").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("a shared expert exports as qwen2_moe's, which is gated: add --moe-shared-expert-gate"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// Experts split over ETP (= TP 2) and EP 2, a shared expert split over TP: saved as slices,
// resumed with whole experts (ETP 1) and by one process, exported whole.
TEST(Checkpoint, MoeEp2Tp2Etp2SaveResumesUnderEtp1AndOneProcess) {
  const std::string model = std::string(kMoeModel) + "--moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate ";
  const std::string saved = "--ep 2 --tp 2 --sequence-parallel --etp 2";
  const fs::path dir = fresh_dir("etp2_many"), ckpt = dir / "ckpt";
  const std::vector<double> straight = train(dir, 4, saved, model.c_str());
  train(dir, 4,
        saved + " --save " + ckpt.string() + " --exit-interval 10 --save-hf " + (dir / "hf").string(),
        model.c_str());
  expect_export_matches_save_hf(dir, ckpt);
  const std::string whole_experts = "--ep 2 --tp 2 --sequence-parallel --etp 1";
  for (const auto& [ranks, flags] : {std::pair<int, std::string>{4, whole_experts}, {1, ""}}) {
    SCOPED_TRACE(flags);
    const std::vector<double> second =
        train(dir, ranks, flags + " --load " + ckpt.string(), model.c_str());
    ASSERT_EQ(second.size(), 10u);
    expect_close(second, straight, 10);
  }
}

// A job killed (SIGKILL) while it saves every iteration leaves the tracker on a complete save,
// which verifies and resumes.
TEST(Checkpoint, KilledJobLeavesTheTrackerOnACompleteSave) {
  const fs::path dir = fresh_dir("killed"), ckpt = dir / "ckpt";
  const std::string cmd = std::string(TESSEL_BINARY) + " train " + kModel + kCommon +
                          "--train-iters 100000 --eval-iters 0 --save-interval 1 --save " + ckpt.string();
  // Killed once the third save is committed (a synchronous save commits before training goes on,
  // so the fourth's folder appears after it), in the middle of some later one.
  const testing::CommandResult r = testing::run_command(
      "(" + cmd + " > /dev/null & pid=$!; for i in $(seq 200); do [ -e " +
      (ckpt / "iter_0000004").string() +
      " ] && break; sleep 0.05; done; kill -9 $pid; wait $pid; true)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const int64_t latest = latest_checkpointed_iteration(ckpt.string());
  EXPECT_GE(latest, 3);
  EXPECT_EQ(verify_checkpoint(ckpt.string()), 1);
  // The resumed run's schedule is another (20 iterations, not 100000), taken as the flags give it
  // (as Megatron, a changed schedule needs saying so): only the count is checked.
  const std::vector<double> resumed = train(dir, 1, "--load " + ckpt.string() + " --override-opt_param-scheduler");
  EXPECT_EQ(static_cast<int64_t>(resumed.size()), std::max<int64_t>(0, 20 - latest));
}

// A two-iteration save to damage: its folder, and the file of rank 0.
fs::path small_save(const std::string& name) {
  const fs::path dir = fresh_dir(name), ckpt = dir / "ckpt";
  train(dir, 1, "--exit-interval 2 --save " + ckpt.string());
  return ckpt;
}

void expect_error(const std::string& args, const std::string& needle) {
  const testing::CommandResult r = testing::run_tessel(args);
  EXPECT_NE(r.exit_code, 0) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
}

TEST(Checkpoint, InspectAndVerifyDescribeASave) {
  const fs::path ckpt = small_save("inspect");
  EXPECT_EQ(latest_checkpointed_iteration(ckpt.string()), 2);
  EXPECT_EQ(verify_checkpoint(ckpt.string()), 1);
  const testing::CommandResult v = testing::run_tessel("checkpoint verify " + ckpt.string());
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("1 files OK"), std::string::npos) << v.output;
  const testing::CommandResult i = testing::run_tessel("checkpoint inspect " + ckpt.string());
  EXPECT_EQ(i.exit_code, 0) << i.output;
  EXPECT_NE(i.output.find("iteration 2 | step count 2"), std::string::npos) << i.output;
  EXPECT_NE(i.output.find("tensor transformer.wte.weight [256, 64]"), std::string::npos) << i.output;
}

TEST(Checkpoint, DamagedOrMissingFilesAreRefusedNamingTheFile) {
  const fs::path ckpt = small_save("damaged");
  const fs::path file = ckpt / "iter_0000002" / "rank_00000.safetensors";
  const std::string load = std::string("train ") + kModel + kTraining + "--load " + ckpt.string();
  const auto size = fs::file_size(file);
  {  // one byte of the data section altered
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 100));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(size - 100));
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  }
  expect_error("checkpoint verify " + ckpt.string(), file.string() + ": checksum mismatch");
  expect_error(load, file.string() + ": checksum mismatch");
  fs::resize_file(file, size / 2);  // truncated
  expect_error(load, file.string() + ": checksum mismatch");
  fs::remove(file);
  expect_error(load, file.string() + ": missing checkpoint file");
}

TEST(Checkpoint, SaveOfAnotherModelIsRefused) {
  const fs::path ckpt = small_save("other_model");
  expect_error(std::string("train --arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 8 "
                           "--ffn-hidden-size 128 ") + kTraining + "--load " + ckpt.string(),
               (ckpt / "iter_0000002" / "metadata.json").string() + ": saved from another model");
}

}  // namespace
}  // namespace tessel
