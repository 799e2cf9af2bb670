// A tokenizer travels with its model: save_tokenizer_files writes each kind of tokenizer into a
// model folder, tokenizer_in_folder finds it again (by tessel's entry or by Hugging Face's file
// names), and the identity a checkpoint records tells tokenizers apart whatever their files are.
#include "tessel/data/tokenizer_files.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "tessel/core/error.h"
#include "tessel/data/tokenizers/train.h"
#include "tokenizer_fixtures.h"

namespace tessel {
namespace {

using testing::TestDir;

const char* kSample = " the aa xyz in then, naïve 你好 <|endoftext|> more";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Saved, found and made again: the same tokenizer (identity and encoding), its folder named
// beside --tokenizer-type in tokenizer_config.json.
void expect_travels(const TokenizerOptions& options, const TestDir& dir, const std::string& file) {
  const std::unique_ptr<Tokenizer> original = make_tokenizer(options);
  const std::string folder = dir.path("model_" + options.type);
  save_tokenizer_files(options, *original, folder);
  if (!file.empty()) {
    EXPECT_TRUE(std::filesystem::exists(folder + "/" + file)) << file;
  }
  const std::optional<TokenizerOptions> found = tokenizer_in_folder(folder);
  ASSERT_TRUE(found.has_value()) << options.type;
  const std::unique_ptr<Tokenizer> again = make_tokenizer(*found);
  EXPECT_EQ(again->type(), original->type());
  EXPECT_EQ(tokenizer_identity(*again), tokenizer_identity(*original)) << options.type;
  EXPECT_EQ(again->encode(kSample), original->encode(kSample)) << options.type;
  EXPECT_EQ(read_json(folder + "/tokenizer_config.json")["tessel_tokenizer"]["tokenizer_type"],
            options.type);
}

TEST(TokenizerFiles, EveryKindTravelsWithTheModel) {
  TestDir dir;
  expect_travels({.type = "ByteTokenizer"}, dir, "");
  const std::string vocab = dir.write("encoder.json", testing::tiny_vocab_json().dump());
  const std::string merges = dir.write("vocab.bpe", testing::tiny_merges_txt());
  expect_travels({.type = "GPT2BPETokenizer", .vocab_file = vocab, .merge_file = merges}, dir,
                 "vocab.json");
  const std::string hf = dir.write("hf.json", testing::tiny_tokenizer_json(false).dump());
  expect_travels({.type = "HuggingFaceTokenizer", .tokenizer_model = hf}, dir, "tokenizer.json");
  TokenizerOptions tiktoken{.type = "TikTokenizer",
                            .tokenizer_model = dir.write("tiny.tiktoken", testing::tiny_ranks()),
                            .tiktoken_pattern = "cl100k"};
  tiktoken.special_tokens = {"<|endoftext|>"};
  expect_travels(tiktoken, dir, "tiny.tiktoken");
  const TokenizerOptions sp = train_tokenizer({.inputs = {TESSEL_SOURCE_DIR "/data/kjv-genesis-esther.txt"},
                                               .vocab_size = 500,
                                               .model_type = "bpe",
                                               .output_dir = dir.path("sp"),
                                               .threads = 1});
  TokenizerOptions llama = sp;
  llama.type = "Llama2Tokenizer";
  expect_travels(llama, dir, "tokenizer.model");
}

// A Hugging Face folder keeps its own tokenizer_config.json (bos/eos, chat template ...); a
// config.json beside gets the tokenizer's eos id instead of 0.
TEST(TokenizerFiles, KeepsTheSourceConfigAndSetsTheModelsEos) {
  TestDir dir;
  dir.write("tokenizer.json", testing::tiny_tokenizer_json(true).dump());
  dir.write("tokenizer_config.json", R"({"eos_token": "<|endoftext|>", "chat_template": "x"})");
  const TokenizerOptions options{.type = "hf", .tokenizer_model = dir.path()};
  const std::string folder = dir.path("model");
  std::filesystem::create_directories(folder);
  std::ofstream(folder + "/config.json") << R"({"model_type": "gpt2", "eos_token_id": 0})";
  save_tokenizer_files(options, *make_tokenizer(options), folder);
  const nlohmann::json config = read_json(folder + "/tokenizer_config.json");
  EXPECT_EQ(config["chat_template"], "x");
  EXPECT_EQ(config["tessel_tokenizer"]["tokenizer_type"], "HuggingFaceTokenizer");
  EXPECT_EQ(read_json(folder + "/config.json")["eos_token_id"], 263);
  EXPECT_EQ(read_json(folder + "/config.json")["model_type"], "gpt2");
}

// Folders that transformers wrote: found by their files, in transformers' order.
TEST(TokenizerFiles, FoundByHuggingFacesFileNames) {
  TestDir dir;
  EXPECT_EQ(tokenizer_in_folder(dir.path()), std::nullopt);
  dir.write("vocab.json", testing::tiny_vocab_json().dump());
  dir.write("merges.txt", testing::tiny_merges_txt());
  EXPECT_EQ(tokenizer_in_folder(dir.path())->type, "GPT2BPETokenizer");
  dir.write("tokenizer.json", testing::tiny_tokenizer_json(false).dump());
  const std::optional<TokenizerOptions> hf = tokenizer_in_folder(dir.write("model.safetensors", ""));
  ASSERT_TRUE(hf.has_value());
  EXPECT_EQ(hf->type, "HuggingFaceTokenizer");
  EXPECT_EQ(make_tokenizer(*hf)->vocab_size(), 264);
  dir.write("tokenizer_config.json", R"({"tessel_tokenizer": {"tokenizer_type": 7}})");
  EXPECT_NE(testing::error_of([&] { tokenizer_in_folder(dir.path()); })
                .find("tokenizer_config.json tessel_tokenizer: "),
            std::string::npos);
}

// The files tokenizer_config.json names are plain names in its folder: a path leading out of it
// (another run's tokenizer, an absolute path) is refused naming the file and the entry.
TEST(TokenizerFiles, FileNamesLeadingOutOfTheFolderAreRefused) {
  TestDir dir;
  std::filesystem::create_directories(dir.path("model"));
  dir.write("tokenizer.json", testing::tiny_tokenizer_json(true).dump());
  for (const std::string name : {std::string("../tokenizer.json"), dir.path("tokenizer.json"), std::string(), std::string("..")}) {
    const nlohmann::json entry = {{"tokenizer_type", "HuggingFaceTokenizer"}, {"tokenizer_model", name}};
    dir.write("model/tokenizer_config.json", nlohmann::json{{"tessel_tokenizer", entry}}.dump());
    const std::string error = testing::error_of([&] { tokenizer_in_folder(dir.path("model")); });
    EXPECT_NE(error.find(dir.path("model/tokenizer_config.json") + ": tessel_tokenizer.tokenizer_model names the file \"" +
                         name + "\", which is not a file name in this folder"),
              std::string::npos)
        << error;
  }
}

// The same tokenizer in two spellings of its file (merges as strings, as pairs) is one; fewer
// merges or another vocabulary make another, and the message says how they differ.
TEST(TokenizerFiles, IdentityTellsTokenizersApart) {
  TestDir dir;
  const auto gpt2 = make_tokenizer({.type = "gpt2",
                                    .vocab_file = dir.write("v.json", testing::tiny_vocab_json().dump()),
                                    .merge_file = dir.write("m.txt", testing::tiny_merges_txt())});
  const auto pairs = make_tokenizer(
      {.type = "hf", .tokenizer_model = dir.write("p.json", testing::tiny_tokenizer_json(true).dump())});
  const auto strings = make_tokenizer(
      {.type = "hf", .tokenizer_model = dir.write("s.json", testing::tiny_tokenizer_json(false).dump())});
  EXPECT_EQ(tokenizer_mismatch(tokenizer_identity(*pairs), tokenizer_identity(*strings)), "");
  // GPT-2's files hold no added tokens: "<|endoftext|>" in text is ordinary text there.
  EXPECT_NE(tokenizer_mismatch(tokenizer_identity(*gpt2), tokenizer_identity(*pairs)), "");
  std::string fewer = testing::tiny_merges_txt();
  fewer = fewer.substr(0, fewer.rfind('\n', fewer.size() - 2) + 1);  // without the last merge
  const auto other = make_tokenizer({.type = "gpt2", .vocab_file = dir.path("v.json"),
                                     .merge_file = dir.write("m2.txt", fewer)});
  const std::string why = tokenizer_mismatch(tokenizer_identity(*gpt2), tokenizer_identity(*other));
  EXPECT_NE(why.find("they differ in fingerprint"), std::string::npos) << why;
  const std::string bytes =
      tokenizer_mismatch(tokenizer_identity(*gpt2), tokenizer_identity(ByteTokenizer()));
  EXPECT_NE(bytes.find("this run has the ByteTokenizer (vocabulary 256"), std::string::npos) << bytes;
  EXPECT_NE(bytes.find("vocab_size, special_ids, fingerprint"), std::string::npos) << bytes;
}

}  // namespace
}  // namespace tessel
