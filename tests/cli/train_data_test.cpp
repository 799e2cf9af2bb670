// `tessel train` on real data as a user runs it: a preprocessed dataset with its tokenizer, the
// validation and test losses in the log and in --log-json under a pipeline, per-split blends,
// and the rules on the data flags, each a clean error.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/run_command.h"
#include "tessel/data/indexed_dataset.h"

namespace tessel {
namespace {

using testing::CommandResult;
using testing::run_command;
using testing::run_tessel;

const std::string kCorpus = TESSEL_SOURCE_DIR "/data/kjv-genesis-esther.txt";
const std::string kArch =
    "--arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 "
    "--seq-length 32 "
    "--micro-batch-size 2 --global-batch-size 4 --threads 1 ";
const std::string kModel = "--vocab-size 300 " + kArch;

// A BPE tokenizer of 300 tokens trained on the corpus (the model's vocabulary), and the corpus
// preprocessed with it.
struct Prepared {
  std::string tokenizer, prefix;
};
Prepared prepare(const testing::TestDir& dir) {
  Prepared p;
  EXPECT_EQ(run_tessel("tokenizer train --input " + kCorpus +
                       " --vocab-size 300 --model-type byte-bpe --output " + dir.path("tok"))
                .exit_code,
            0);
  p.tokenizer = "--tokenizer-type HuggingFaceTokenizer --tokenizer-model " + dir.path("tok") + " ";
  EXPECT_EQ(run_tessel("preprocess --input " + kCorpus + " --output-prefix " + dir.path("kjv") +
                       " --append-eod " + p.tokenizer)
                .exit_code,
            0);
  p.prefix = dir.path("kjv_text_document");
  return p;
}

// Under PP2 the last stage computes the losses and rank 0 logs them: each evaluation a line with
// the loss and its perplexity, and a JSON object, at the interval, after training, then the test.
TEST(TrainDataCli, ValidationLoggedUnderPipeline) {
  testing::TestDir dir;
  const Prepared data = prepare(dir);
  const CommandResult r = run_command(
      "timeout 120 mpirun --allow-run-as-root --oversubscribe -n 2 -x OMP_NUM_THREADS=1 " +
      std::string(TESSEL_BINARY) + " train " + kModel + data.tokenizer + "--data-path " +
      data.prefix + " --pp 2 --train-iters 4 --eval-interval 2 --eval-iters 3 --log-json " +
      dir.path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"validation loss at iteration 2 | lm loss value: ",
                           "validation loss at iteration 4 | lm loss value: ",
                           "test loss at iteration 4 | lm loss value: ", "| lm loss PPL: "})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << " missing from:\n" << r.output;
  std::vector<nlohmann::json> evaluations;
  std::ifstream log(dir.path("log.jsonl"));
  for (std::string line; std::getline(log, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("split")) evaluations.push_back(j);
  }
  ASSERT_EQ(evaluations.size(), 4u);
  const std::vector<std::pair<std::string, int>> want = {
      {"valid", 2}, {"valid", 4}, {"valid", 4}, {"test", 4}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(evaluations[i]["split"], want[i].first);
    EXPECT_EQ(evaluations[i]["iteration"], want[i].second);
    const double loss = evaluations[i]["loss"];
    EXPECT_GT(loss, 1.0);
    EXPECT_LT(loss, std::log(300.0) + 1.0);
    EXPECT_NEAR(evaluations[i]["ppl"].get<double>(), std::exp(loss), 1e-9 * std::exp(loss));
  }
  // Validation after training reads the valid split's next batches, not the same ones again.
  EXPECT_NE(evaluations[1]["loss"], evaluations[2]["loss"]);
}

// One blend per split: the train split trains, the valid split evaluates. Without --vocab-size
// the model's vocabulary is the tokenizer's, as Megatron's.
TEST(TrainDataCli, PerSplitPaths) {
  testing::TestDir dir;
  const Prepared data = prepare(dir);
  const CommandResult r = run_tessel("train " + kArch + data.tokenizer + "--train-data-path " +
                                     data.prefix + " --valid-data-path 1 " + data.prefix +
                                     " --train-iters 2 --eval-interval 2 "
                                     "--eval-iters 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("validation loss at iteration 2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("test loss"), std::string::npos) << "no test split given:\n" << r.output;
  EXPECT_NE(r.output.find("| vocab 300 |"), std::string::npos) << r.output;
  // Evaluation asked for, but no valid split: said once, not silently skipped.
  const CommandResult none = run_tessel("train " + kArch + data.tokenizer + "--data-path " +
                                        data.prefix + " --split 100,0,0 --train-iters 1 --eval-iters 1");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_NE(none.output.find("no validation: the valid split has no samples"), std::string::npos)
      << none.output;
}

// The data rules, each named: packing needs an end-of-document token (the byte tokenizer has
// none), --data-path excludes the per-split paths, a vocabulary smaller than the tokenizer's.
TEST(TrainDataCli, DataRulesAreCleanErrors) {
  testing::TestDir dir;
  const Prepared data = prepare(dir);
  auto expect_error = [](const std::string& args, const std::string& expected) {
    const CommandResult r = run_tessel("train " + kModel + args + " --train-iters 1");
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << args << "\n" << r.output;
  };
  expect_error("--reset-attention-mask", "end-of-document token");
  expect_error("--data-path " + kCorpus + " --train-data-path " + kCorpus,
               "--data-path excludes --train-data-path");
  const CommandResult small = run_tessel("train " + data.tokenizer + "--data-path " + data.prefix +
                                         " --vocab-size 256 --train-iters 1");
  EXPECT_EQ(small.exit_code, 1) << small.output;
  EXPECT_NE(small.output.find("--vocab-size 256"), std::string::npos) << small.output;
  expect_error("--data-path 0 " + data.prefix + " " + data.tokenizer, "weight");
}

// A validation batch that fails to read fails the run with the reader's message, agreed across
// the ranks as a training batch's: under DP 2 one rank reads the sample holding the token past
// the vocabulary, and the other must not wait for it in a collective (a hang, or MPI's abort).
TEST(TrainDataCli, BadValidationBatchFailsOnEveryRank) {
  testing::TestDir dir;
  IndexedDatasetWriter train(dir.path("train"), TokenDType::UInt16);
  for (int d = 0; d < 40; ++d) train.add_document(std::vector<int32_t>(40, 'a' + d % 26));
  train.finalize();
  IndexedDatasetWriter valid(dir.path("valid"), TokenDType::UInt16);
  std::vector<int32_t> tokens(4 * 32 + 1, 'v');
  tokens[5] = 300;  // in one sample of the four the evaluation reads
  valid.add_document(tokens);
  valid.finalize();
  const CommandResult r = run_command(
      "timeout 60 mpirun --allow-run-as-root --oversubscribe -n 2 " TESSEL_BINARY " train " + kArch +
      "--train-data-path " + dir.path("train") + " --valid-data-path " + dir.path("valid") +
      " --train-iters 2 --eval-interval 1 --eval-iters 1 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the run hung:\n" << r.output;
  EXPECT_NE(r.output.find(dir.path("valid") + ".bin: token 300 at byte offset 10"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("outside the vocabulary [0, 256)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessel
