// TESSEL_CPU_ISA (kernels/cpu_isa.cpp): avx2 trains and says so, the same as the native kernels
// within fp32's rounding and identical from run to run; another value is refused, in one process
// and on every rank of a job, naming the variable.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/log_json.h"
#include "support/run_command.h"

namespace tessel {
namespace {

using testing::CommandResult;
using testing::log_json_losses;
using testing::run_command;

const std::string kTrain =
    " train --mock-data --tokenizer-type NullTokenizer --vocab-size 256 --arch gpt2 --num-layers 2 "
    "--hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 "
    "--global-batch-size 4 --train-iters 3 --eval-iters 0 --log-interval 1 --lr 1e-2 --lr-warmup-iters 0 "
    "--threads 1 ";

CommandResult train_with(const std::string& isa, const std::string& args) {
  return run_command("TESSEL_CPU_ISA=" + isa + " " + TESSEL_BINARY + kTrain + args);
}

TEST(CpuIsaCli, Avx2TrainsAsTheNativeKernelsWithinTheRoundingAndSaysSo) {
  testing::TestDir dir;
  const CommandResult native = train_with("native", "--log-json " + dir.path("native.jsonl"));
  ASSERT_EQ(native.exit_code, 0) << native.output;
  EXPECT_EQ(native.output.find("TESSEL_CPU_ISA"), std::string::npos) << native.output;
  std::vector<std::vector<double>> avx2;
  for (const char* name : {"avx2_a.jsonl", "avx2_b.jsonl"}) {
    const CommandResult r = train_with("avx2", std::string("--log-json ") + dir.path(name));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("TESSEL_CPU_ISA=avx2: the CPU kernels and oneDNN compute as on an AVX2-only CPU"),
              std::string::npos) << r.output;
    avx2.push_back(log_json_losses(dir.path(name)));
  }
  const std::vector<double> reference = log_json_losses(dir.path("native.jsonl"));
  ASSERT_EQ(reference.size(), 3u);
  EXPECT_EQ(avx2[0], avx2[1]);  // bit for bit, run to run
  ASSERT_EQ(avx2[0].size(), reference.size());
  for (size_t i = 0; i < reference.size(); ++i) EXPECT_NEAR(avx2[0][i], reference[i], 1e-4 * reference[i]) << i;
}

TEST(CpuIsaCli, AnotherValueIsRefusedNamingTheVariable) {
  const CommandResult one = train_with("avx512", "");
  EXPECT_NE(one.exit_code, 0);
  EXPECT_NE(one.output.find("TESSEL_CPU_ISA=avx512: expected native or avx2"), std::string::npos) << one.output;
  // Under mpirun every rank reads it: the ranks inherit the launcher's environment.
  const CommandResult job = run_command("TESSEL_CPU_ISA=sse timeout 120 mpirun --allow-run-as-root --oversubscribe -n 2 " +
                                        std::string(TESSEL_BINARY) + kTrain);
  EXPECT_NE(job.exit_code, 0);
  EXPECT_NE(job.output.find("TESSEL_CPU_ISA=sse: expected native or avx2"), std::string::npos) << job.output;
}

}  // namespace
}  // namespace tessel
