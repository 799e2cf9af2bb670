// Inputs past what tessel can honour, as a hostile user gives them: each is refused in one line
// naming its bound and a non-zero exit, before it runs long, allocates, crashes or reports a
// result it could not deliver (issue 43: output that cannot be written, MTP depths with nothing
// to predict, nesting, thread counts and sizes).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <string>

#include "data/tokenizers/tokenizer_fixtures.h"
#include "support/fixtures.h"
#include "support/run_command.h"

namespace tessel {
namespace {

using testing::CommandResult;
using testing::run_command;
using testing::run_tessel;

const std::string kModel = "--arch llama --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 ";
const std::string kTrain = "train " + kModel +
                           "--micro-batch-size 2 --global-batch-size 4 --threads 1 --train-iters 2 --eval-iters 0 ";

// Refused: exit 1 or 2 (not a signal), `expected` in the one line said.
void expect_refused(const CommandResult& r, const std::string& expected, const std::string& what) {
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << what << " -> " << r.exit_code << ": " << r.output.substr(0, 2000);
  EXPECT_NE(r.output.find(expected), std::string::npos) << what << " -> " << r.output.substr(0, 2000);
  EXPECT_LE(std::count(r.output.begin(), r.output.end(), '\n'), 1) << what << ": " << r.output.substr(0, 2000);
}

// Every command whose result is its standard output fails when that cannot be written
// (/dev/full: every write fails with "No space left on device").
TEST(BoundsCli, OutputThatCannotBeWrittenIsAnError) {
  testing::TestDir dir;
  ASSERT_EQ(run_tessel("export " + kModel + "--out " + dir.path("model")).exit_code, 0);
  const CommandResult saved = run_tessel(kTrain + "--save " + dir.path("save"));
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const std::string tokenizer = dir.write("tokenizer.json", testing::tiny_tokenizer_json(true).dump());
  for (const std::string& command :
       {"generate --model " + dir.path("model") + " --prompt hi --max-new-tokens 4",
        std::string("plan --model llama3-8b --cluster h100 --num-gpus 8 --tp 2 --micro-batch-size 1 --json"),
        std::string("layout --world 8 --tp 2 --pp 2"), "checkpoint inspect " + dir.path("save"),
        "tokenizer inspect --tokenizer-type HuggingFaceTokenizer --tokenizer-model " + tokenizer, std::string("--help"),
        std::string("train --help")}) {
    const CommandResult fine = run_tessel(command + " > /dev/null");
    EXPECT_EQ(fine.exit_code, 0) << command << ": " << fine.output;
    // The group's stderr comes back (run_command adds 2>&1 after it); its stdout is /dev/full.
    const CommandResult full = run_command("{ " + std::string(TESSEL_BINARY) + " " + command + " > /dev/full; }");
    // --help's writes fail inside CLI11, whose reason is gone by the check.
    expect_refused(full, command.ends_with("--help") ? "cannot write the standard output" : "No space left on device",
                   command);
  }
}

// Depth k of multi-token prediction predicts the token k + 1 ahead: a sequence no longer than
// the depths leaves the last nothing, and its loss would be logged as 0.
TEST(BoundsCli, MtpDepthsWithNothingToPredictAreRefused) {
  expect_refused(run_tessel("train --arch llama --num-layers 2 --hidden-size 32 --num-attention-heads 4 "
                            "--seq-length 2 --mtp-num-layers 2 --micro-batch-size 2 --global-batch-size 4 "
                            "--threads 1 --train-iters 1 --eval-iters 0"),
                 "--mtp-num-layers 2 needs --seq-length above it: a sequence of 2 leaves depth 2 no token to "
                 "predict", "--mtp-num-layers 2 --seq-length 2");
}

// Nesting that recursion would follow until the stack runs out: a tokenizer.json's Sequence
// 100,000 deep, 50,000 parentheses in a layer pattern.
TEST(BoundsCli, DeepNestingIsRefusedNamingTheBound) {
  testing::TestDir dir;
  nlohmann::json j = testing::tiny_tokenizer_json(true);
  j["normalizer"] = "@NESTED@";
  std::string text = j.dump(), nested;
  const int depth = 100000;
  for (int i = 0; i < depth; ++i) nested += R"({"type":"Sequence","normalizers":[)";
  for (int i = 0; i < depth; ++i) nested += "]}";
  text.replace(text.find("\"@NESTED@\""), 10, nested);
  const std::string file = dir.write("tokenizer.json", text);
  expect_refused(run_tessel("tokenizer inspect --tokenizer-type HuggingFaceTokenizer --tokenizer-model " + file),
                 file + ": JSON nested deeper than 64 levels", "Sequence 100,000 deep");

  const std::string parens = std::string(50000, '(') + "[1]" + std::string(50000, ')');
  expect_refused(run_tessel("export --arch llama --num-layers 1 --hidden-size 32 --num-attention-heads 4 "
                            "--experimental-attention-variant gdn --linear-attention-freq '" + parens + "' --out " +
                            dir.path("x")),
                 "parentheses nested deeper than 64", "50,000 parentheses");
  expect_refused(run_tessel("export --arch llama --num-layers 1 --hidden-size 32 --num-attention-heads 4 --num-experts 2 "
                            "--moe-layer-freq '([1]*999999)*999999' --out " + dir.path("y")),
                 "the list grows past 65536 entries", "a pattern of 10^12 entries");
}

// OpenMP starts a thread per count: 100,000 crashed inside its runtime.
TEST(BoundsCli, ThreadCountsAreBounded) {
  testing::TestDir dir;
  expect_refused(run_tessel(kTrain + "--threads 100000"), "--threads: Value 100000 not in range 0 to 1024",
                 "train --threads 100000");
  expect_refused(run_tessel("generate --model " + dir.path("none") + " --threads 100000"),
                 "--threads: Value 100000 not in range 0 to 1024", "generate --threads 100000");
  expect_refused(run_tessel("preprocess --input x --output-prefix " + dir.path("p") + " --workers 100000"),
                 "--workers: Value 100000 not in range 0 to 1024", "preprocess --workers 100000");
}

// Sizes that ran for minutes into a bare "out of memory", each refused at once. The whole test
// takes a second; each case is given far more.
TEST(BoundsCli, AbsurdSizesAreRefusedBeforeAllocating) {
  testing::TestDir dir;
  ASSERT_EQ(run_tessel("export " + kModel + "--out " + dir.path("model")).exit_code, 0);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir.path("model/config.json")));
  const auto start = std::chrono::steady_clock::now();
  config["hidden_size"] = 1000000000;
  config["head_dim"] = 1000000000 / 4;
  std::ofstream(dir.path("model/config.json")) << config.dump();
  expect_refused(run_tessel("generate --model " + dir.path("model")), "--hidden-size 1000000000 is past tessel's bound of 131072",
                 "config.json hidden_size 10^9");
  // Within every bound, and still terabytes: refused at the allocation, naming the machine's memory.
  expect_refused(run_tessel("export --arch llama --num-layers 1 --hidden-size 131072 --num-attention-heads 1024 "
                            "--ffn-hidden-size 1048576 --out " + dir.path("huge")),
                 "more than this machine's memory of", "a 400-billion-parameter layer");
  expect_refused(run_tessel("schedule --pp 100000 --microbatches 1000000"),
                 "--pp 100000 × --microbatches 1000000 × --vpp 1 = 100000000000 (microbatch, chunk) pairs, past the "
                 "bound of 4194304", "schedule of 10^11 pairs");
  expect_refused(run_tessel("schedule --pp 2 --microbatches 4 --forward-cost 1000000000"),
                 "past the bound of 16777216: --json prints the schedule without it", "a table of 10^10 cells");
  expect_refused(run_tessel("layout --world 2000000000"), "world size 2000000000 is past tessel's bound of 1048576 ranks",
                 "layout --world 2*10^9");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

// Sample counts past 2^63: refused naming the flags, not wrapped to a negative count or to a
// validation split that ends after the first iteration ("no valid sample 1512").
TEST(BoundsCli, SampleCountsPastTwoToTheSixtyThreeAreRefused) {
  const std::string train = "train " + kModel +
                            "--micro-batch-size 2 --global-batch-size 4 --threads 1 --mock-data "
                            "--tokenizer-type NullTokenizer --vocab-size 512 ";
  expect_refused(run_tessel(train + "--eval-iters 0 --train-iters 9223372036854775807"),
                 "--train-iters 9223372036854775807 × --global-batch-size 4 is past 2^63 samples",
                 "--train-iters 2^63 - 1");
  expect_refused(run_tessel(train + "--train-iters 2 --eval-interval 1 --eval-iters 1152921504606846976"),
                 "--eval-iters 1152921504606846976 × 3 evaluations × --global-batch-size 4 is past 2^63 samples",
                 "--eval-iters 2^60");
}

}  // namespace
}  // namespace tessel
