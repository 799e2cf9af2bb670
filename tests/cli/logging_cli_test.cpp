// tessel train's Megatron-LM logging flags (apps/logging_flags.h): every flag of Megatron's logging
// group and profiler window accepted with its form, W&B said once with where the metrics go, the
// flags that change nothing named in one line; --profile's window of iterations and ranks in the
// Chrome trace; the rules on the flags' values in one message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "support/run_command.h"

namespace {

using tessel::testing::run_command;

const std::string kModel =
    " train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 "
    "--global-batch-size 4 --threads 1 --data-path " TESSEL_SOURCE_DIR "/data/kjv-genesis-esther.txt ";

std::filesystem::path temp_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessel_logging_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The iterations and ranks of a trace's boxes.
std::pair<std::set<int>, std::set<int>> boxes(const std::filesystem::path& trace) {
  std::ifstream in(trace);
  const nlohmann::json json = nlohmann::json::parse(in);
  std::set<int> iterations, ranks;
  for (const nlohmann::json& e : json.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    iterations.insert(e.at("args").at("iteration").get<int>());
    ranks.insert(e.at("tid").get<int>());
  }
  return {iterations, ranks};
}

// Every flag of Megatron's LoggerConfig group (arguments.py's _add_logging_args) and ProfilingConfig's
// window, in Megatron's form; --profile's trace goes to profile_trace.json in the working folder.
TEST(LoggingCli, EveryMegatronLoggingFlagIsAccepted) {
  const std::filesystem::path dir = temp_dir("flags");
  const auto r = run_command(
      "cd " + dir.string() + " && " TESSEL_BINARY + kModel +
      "--train-iters 3 --log-interval 1 --tensorboard-dir tb --tensorboard-log-interval 1 "
      "--tensorboard-queue-size 5 --log-timers-to-tensorboard --no-log-loss-scale-to-tensorboard "
      "--disable-log-loss-scale-to-tensorboard --log-validation-ppl-to-tensorboard --log-memory-to-tensorboard "
      "--log-world-size-to-tensorboard --log-params-norm --log-num-zeros-in-grad --log-throughput "
      "--timing-log-level 2 --timing-log-option all --no-barrier-with-level-1-timing --logging-level 20 "
      "--log-progress --log-memory-interval 5 --log-device-memory-used --log-max-attention-logit --log-energy "
      "--moe-routing-trace-path traces --moe-routing-trace-max-training-iters 2 --moe-routing-trace-capture-logits "
      "--moe-routing-trace-capture-hidden-states --moe-routing-trace-dump-weights "
      "--wandb-project p --wandb-exp-name e --wandb-save-dir w --wandb-entity t "
      "--profile --profile-step-start 1 --profile-step-end 2 --profile-ranks 0 --profile-report 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "W&B is not reachable"), 1u) << r.output;
  EXPECT_NE(r.output.find("--wandb-project, --wandb-exp-name, --wandb-save-dir, --wandb-entity: W&B is not reachable "
                          "from tessel; the metrics go to --tensorboard-dir tb"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("14 of Megatron-LM's logging flags have no effect here: --timing-log-level, "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("params norm "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("profile: gemm "), std::string::npos) << r.output;  // --profile-report
  EXPECT_EQ(boxes(dir / "profile_trace.json").first, std::set<int>{2}) << r.output;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "tb"), {}), 1);
  std::filesystem::remove_all(dir);
}

// Megatron's window: its profiler starts after --profile-step-start iterations and stops after
// --profile-step-end; --profile-ranks keeps the others' boxes out; --pipeline-timeline names the file.
TEST(LoggingCli, ProfileWindowIsTheTracesIterationsAndRanks) {
  const std::filesystem::path dir = temp_dir("window");
  const std::string run = "mpirun --allow-run-as-root --oversubscribe -n 2 " TESSEL_BINARY + kModel +
                          "--pp 2 --train-iters 5 --profile --profile-step-start 1 --profile-step-end 3 "
                          "--pipeline-timeline " +
                          (dir / "trace.json").string();
  const auto every = run_command(run + " 2>&1");
  ASSERT_EQ(every.exit_code, 0) << every.output;
  EXPECT_NE(every.output.find("--profile: iterations 2 to 3 of every rank: " + (dir / "trace.json").string()),
            std::string::npos)
      << every.output;
  EXPECT_EQ(boxes(dir / "trace.json"), std::pair(std::set<int>{2, 3}, std::set<int>{0, 1}));
  const auto one = run_command(run + " --profile-ranks 1 2>&1");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(boxes(dir / "trace.json"), std::pair(std::set<int>{2, 3}, std::set<int>{1}));
  std::filesystem::remove_all(dir);
}

TEST(LoggingCli, BadValuesAreRefusedInOneMessage) {
  const auto r = run_command(TESSEL_BINARY + kModel +
                             "--train-iters 1 --tensorboard-log-interval 0 --tensorboard-queue-size 0 "
                             "--profile-ranks 1 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--tensorboard-log-interval 0 must be at least 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--tensorboard-queue-size 0 must be at least 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--profile-ranks 1: the job's ranks are 0 to 0"), std::string::npos) << r.output;
  const auto choice = run_command(TESSEL_BINARY + kModel + "--train-iters 1 --timing-log-option some 2>&1");
  EXPECT_NE(choice.exit_code, 0) << choice.output;
}

}  // namespace
