// A model folder carries its tokenizer: --save-hf writes it beside the weights, `tessel generate`
// and --init-from pick it up, `tessel export --init-from` passes it on, and --load refuses a run
// whose tokenizer is not the one its save was trained with.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/fixtures.h"
#include "support/run_command.h"
#include "tessel/data/utf8.h"

namespace tessel {
namespace {

using testing::CommandResult;
using testing::run_tessel;

const std::string kCorpus = TESSEL_SOURCE_DIR "/data/kjv-genesis-esther.txt";
const std::string kModel =
    "--arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 "
    "--micro-batch-size 2 --global-batch-size 4 --threads 1 ";

TEST(ModelFolderCli, TheTokenizerTravelsWithTheModel) {
  testing::TestDir dir;
  ASSERT_EQ(run_tessel("tokenizer train --input " + kCorpus +
                       " --vocab-size 300 --model-type byte-bpe --output " + dir.path("tok"))
                .exit_code,
            0);
  const std::string tokenizer = "--tokenizer-type hf --tokenizer-model " + dir.path("tok") + " ";
  ASSERT_EQ(run_tessel("preprocess --input " + kCorpus + " --output-prefix " + dir.path("kjv") +
                       " --append-eod " + tokenizer)
                .exit_code,
            0);
  const std::string data = "--data-path " + dir.path("kjv_text_document") + " ";
  const CommandResult trained = run_tessel("train " + kModel + tokenizer + data +
                                           "--train-iters 2 --eval-iters 0 --save " + dir.path("ckpt") +
                                           " --save-hf " + dir.path("hf"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(std::filesystem::exists(dir.path("hf/tokenizer.json")));
  std::ifstream config(dir.path("hf/config.json"));
  EXPECT_EQ(nlohmann::json::parse(config)["eos_token_id"], 299);  // <|endoftext|>, the last id

  // The prompt is encoded with the folder's tokenizer: its text comes back first, then whole
  // characters only.
  const CommandResult sampled = run_tessel("generate --model " + dir.path("hf") +
                                           " --prompt 'In the beginning' --max-new-tokens 12 --threads 1");
  ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_EQ(sampled.output.rfind("In the beginning", 0), 0u) << sampled.output;
  EXPECT_EQ(first_invalid_utf8(sampled.output), std::nullopt) << sampled.output;

  const CommandResult resumed =
      run_tessel("train " + kModel + data + "--train-iters 1 --eval-iters 0 --init-from " + dir.path("hf"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("HuggingFaceTokenizer (vocabulary 300)"), std::string::npos)
      << resumed.output;

  ASSERT_EQ(run_tessel("export --init-from " + dir.path("hf") + " --out " + dir.path("copy")).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(dir.path("copy/tokenizer.json")));

  const CommandResult other = run_tessel("train " + kModel + data +
                                         "--vocab-size 300 --train-iters 3 --eval-iters 0 --load " + dir.path("ckpt"));
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("saved with the HuggingFaceTokenizer (vocabulary 300"), std::string::npos)
      << other.output;
  EXPECT_NE(other.output.find("this run has the ByteTokenizer"), std::string::npos) << other.output;

  // A save records its tokenizer's identity, not its files: exported without the tokenizer
  // flags it would leave with the byte tokenizer (and bos/eos 0), so that is refused; with
  // them the files go with it.
  const CommandResult bare = run_tessel("export --load " + dir.path("ckpt") + " --out " + dir.path("bare"));
  EXPECT_NE(bare.exit_code, 0);
  EXPECT_NE(bare.output.find("give the tokenizer flags it was trained with"), std::string::npos) << bare.output;
  const CommandResult flagged =
      run_tessel("export --load " + dir.path("ckpt") + " --out " + dir.path("flagged") + " " + tokenizer);
  ASSERT_EQ(flagged.exit_code, 0) << flagged.output;
  EXPECT_TRUE(std::filesystem::exists(dir.path("flagged/tokenizer.json")));
  std::ifstream exported(dir.path("flagged/config.json"));
  EXPECT_EQ(nlohmann::json::parse(exported)["eos_token_id"], 299);
}

// Tokenizer files the tokenizer type does not read are refused, never dropped: --vocab-file and
// --merge-file without --tokenizer-type would otherwise train the byte tokenizer.
TEST(ModelFolderCli, TokenizerFilesWithoutTheirTypeAreRefused) {
  const CommandResult r = run_tessel("tokenizer encode --vocab-file vocab.json --merge-file merges.txt --input /dev/null");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--tokenizer-type ByteTokenizer reads no --vocab-file or --merge-file"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("GPT2BPETokenizer for --vocab-file and --merge-file"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessel
