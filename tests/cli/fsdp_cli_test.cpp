// Fully sharded data parallelism from the command line (parallel/fully_sharded.h): the flags'
// rules, each broken one listed in one message before any rank allocates the model; the run's
// line saying what is sharded; --profile-report's per-rank model state, which shows each rank
// holding its share. The layouts against one process are the equivalence suite's Fsdp cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <regex>
#include <string>

#include "support/run_command.h"

namespace tessel {
namespace {

using testing::CommandResult;
using testing::run_command;
using testing::run_tessel;

const std::string kTrain =
    "train --arch llama --num-layers 2 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128 "
    "--seq-length 16 --micro-batch-size 2 --threads 1 --log-interval 1 --eval-iters 0 --train-iters 2 ";

bool says(const CommandResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

TEST(FsdpCli, BadFlagsAreListedInOneMessage) {
  const CommandResult r = run_tessel(kTrain +
                                     "--data-parallel-sharding-strategy optim_grads --fsdp-reshard-after-forward never "
                                     "--num-distributed-optimizer-instances 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(says(r, "--data-parallel-sharding-strategy takes effect with --use-megatron-fsdp")) << r.output;
  EXPECT_TRUE(says(r, "--fsdp-reshard-after-forward needs --use-megatron-fsdp or --use-torch-fsdp2")) << r.output;
  EXPECT_TRUE(says(r, "--num-distributed-optimizer-instances 2")) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;

  const CommandResult both = run_tessel(kTrain + "--use-megatron-fsdp --use-torch-fsdp2 "
                                                 "--torch-fsdp2-no-reshard-after-forward --fsdp-reshard-after-forward always");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_TRUE(says(both, "--use-megatron-fsdp and --use-torch-fsdp2: give one")) << both.output;
  EXPECT_TRUE(says(both, "they disagree")) << both.output;

  const CommandResult unknown = run_tessel(kTrain + "--use-megatron-fsdp --data-parallel-sharding-strategy zero3");
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_TRUE(says(unknown, "--data-parallel-sharding-strategy")) << unknown.output;
}

// Two DP ranks under ZeRO-3: each holds half of the parameters, gradients and moments, and at
// most a few units whole at once; the run says so, and the same run under no_shard holds all.
TEST(FsdpCli, ProfileShowsEachRankHoldingItsShare) {
  const std::string mpirun = "timeout 120 mpirun --allow-run-as-root --oversubscribe -n 2 -x OMP_NUM_THREADS=1 " +
                             std::string(TESSEL_BINARY) + " " + kTrain + "--profile-report --use-megatron-fsdp ";
  const CommandResult zero3 = run_command(mpirun);
  ASSERT_EQ(zero3.exit_code, 0) << zero3.output;
  EXPECT_TRUE(says(zero3, "--use-megatron-fsdp optim_grads_params: data parallelism shards the optimizer state, "
                          "gradients and parameters (ZeRO-3)"))
      << zero3.output;
  const CommandResult whole = run_command(mpirun + "--data-parallel-sharding-strategy no_shard");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::regex line(R"(rank (\d) model state ([\d.]+) MiB = parameters ([\d.]+) \+ gradients ([\d.]+) \+ Adam moments ([\d.]+))");
  auto state = [&](const CommandResult& r, int rank) {
    for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it)
      if (std::stoi((*it)[1]) == rank) return std::array<double, 4>{std::stod((*it)[2]), std::stod((*it)[3]),
                                                                    std::stod((*it)[4]), std::stod((*it)[5])};
    ADD_FAILURE() << "no model state line for rank " << rank << "\n" << r.output;
    return std::array<double, 4>{};
  };
  for (int rank = 0; rank < 2; ++rank) {
    const std::array<double, 4> sharded = state(zero3, rank), all = state(whole, rank);
    for (int part = 1; part < 4; ++part)  // each half, within the slices' rounding
      EXPECT_NEAR(sharded[part], all[part] / 2, 0.01 * all[part]) << "rank " << rank << " part " << part;
  }
  EXPECT_TRUE(says(zero3, "units gathered whole at most")) << zero3.output;
}

}  // namespace
}  // namespace tessel
