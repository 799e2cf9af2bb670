#include "tessel/data/tokenizers/train.h"

#include <sentencepiece_trainer.h>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <thread>
#include <unordered_map>

#include "tessel/core/error.h"
#include "tessel/core/path_clashes.h"
#include "tessel/core/writable.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tessel/data/utf8.h"

// libsentencepiece's log threshold (exported by the library, not declared in its headers): its
// trainer reports every step on stderr otherwise.
namespace sentencepiece::logging {
void SetMinLogLevel(int level);
}

namespace tessel {

namespace {

// The input files' texts, each valid UTF-8, and not all blank: libsentencepiece stops on an
// assertion of its own for an empty input, and a tokenizer learnt from nothing is none.
std::vector<std::string> read_inputs(const TokenizerTrainOptions& o) {
  std::vector<std::string> texts;
  bool any_text = false;
  for (const std::string& f : o.inputs) {
    texts.push_back(read_text_file(f));
    check_utf8(texts.back(), f);
    any_text = any_text || texts.back().find_first_not_of(" \t\r\n") != std::string::npos;
  }
  TESSEL_CHECK(any_text, "tokenizer train: --input {}: no text to train on (empty, or white space only)",
               fmt::join(o.inputs, " "));
  return texts;
}

TokenizerOptions train_sentencepiece(const TokenizerTrainOptions& o, const std::filesystem::path& dir) {
  read_inputs(o);
  std::string inputs;
  for (const std::string& f : o.inputs) {
    TESSEL_CHECK(f.find(',') == std::string::npos, "{}: libsentencepiece cannot take a file name with a comma", f);
    inputs += (inputs.empty() ? "" : ",") + f;
  }
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Llama-2's trainer settings, where they are not the user's to choose: text kept as it is
  // (identity normalization, white space runs kept), digits one per piece.
  const std::unordered_map<std::string, std::string> args = {
      {"input", inputs},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", std::to_string(o.character_coverage.value_or(0.9995))},
      {"byte_fallback", o.byte_fallback.value_or(true) ? "true" : "false"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"num_threads", std::to_string(threads)},
  };
  sentencepiece::logging::SetMinLogLevel(1);
  // The model comes back in memory (without a model_prefix the library writes no file), to be
  // written whole.
  std::string model;
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(args, nullptr, &model);
  if (!status.ok()) {
    // The library words a vocabulary this text cannot fill ("too high", "smaller than
    // required_chars") without the flag that asked for it.
    std::string what = status.ToString();
    const std::string library_flag = "--character_coverage option";  // the library's own trainer's name
    if (const size_t at = what.find(library_flag); at != std::string::npos) what.replace(at, library_flag.size(), "--character-coverage");
    const bool vocabulary = what.find("ocabulary size") != std::string::npos || what.find("vocab_size") != std::string::npos;
    fail("tokenizer train: {}libsentencepiece: {}",
         vocabulary ? fmt::format("--vocab-size {} does not suit this text: ", o.vocab_size) : "", what);
  }
  TokenizerOptions result;
  result.type = "GPTSentencePieceTokenizer";
  result.tokenizer_model = (dir / "tokenizer.model").string();
  // Every file written whole or not at all: a failed train leaves the folder's old tokenizer.
  write_file_atomically(result.tokenizer_model, model, Durability::kDurable);
  return result;
}

TokenizerOptions train_byte_level(const TokenizerTrainOptions& o, const std::filesystem::path& dir) {
  const std::vector<std::string> texts = read_inputs(o);
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  write_file_atomically((dir / "tokenizer.json").string(), train_byte_bpe_json(views, o.vocab_size, o.min_frequency.value_or(2)),
                        Durability::kDurable);
  const nlohmann::json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"bos_token", "<|endoftext|>"},
                                 {"eos_token", "<|endoftext|>"}, {"unk_token", nullptr},
                                 {"clean_up_tokenization_spaces", false}, {"add_prefix_space", false}};
  write_file_atomically((dir / "tokenizer_config.json").string(), config.dump(2) + "\n", Durability::kDurable);
  TokenizerOptions result;
  result.type = "HuggingFaceTokenizer";
  result.tokenizer_model = dir.string();
  return result;
}

}  // namespace

TokenizerOptions train_tokenizer(const TokenizerTrainOptions& o) {
  std::vector<std::string> bad;
  if (o.inputs.empty()) bad.push_back("--input: give at least one text file");
  if (o.output_dir.empty()) bad.push_back("--output: give the folder to write");
  if (o.vocab_size <= 0) bad.push_back("--vocab-size: give the vocabulary size");
  // A model takes at most 2^24 (ModelConfig's bound); libsentencepiece's unigram trainer, asked
  // for 2^31 - 1, overflows its target and prunes for ever.
  if (o.vocab_size > (1 << 24))
    bad.push_back(fmt::format("--vocab-size {} is more than a tessel model takes (2^24 = {})", o.vocab_size, 1 << 24));
  if (o.model_type != "bpe" && o.model_type != "unigram" && o.model_type != "byte-bpe")
    bad.push_back(fmt::format("--model-type {}: must be bpe, unigram (SentencePiece) or byte-bpe (tokenizer.json)", o.model_type));
  const bool byte_level = o.model_type == "byte-bpe";
  // libsentencepiece asserts this range itself, in its own words.
  if (o.character_coverage && !(*o.character_coverage >= 0.98 && *o.character_coverage <= 1.0))
    bad.push_back(fmt::format("--character-coverage {} must be in [0.98, 1]", *o.character_coverage));
  if (o.min_frequency && *o.min_frequency < 1)
    bad.push_back(fmt::format("--min-frequency {} must be at least 1", *o.min_frequency));
  if (byte_level && (o.character_coverage || o.byte_fallback))
    bad.push_back(fmt::format("{} is SentencePiece's: --model-type byte-bpe does not read it (every byte is a token)",
                              o.character_coverage ? "--character-coverage" : "--byte-fallback"));
  if (!byte_level && o.min_frequency)
    bad.push_back(fmt::format("--min-frequency is byte-bpe's: --model-type {} does not read it", o.model_type));
  // An --output folder holding an --input (tt/tokenizer.json into tt) would replace the corpus.
  CommandPaths paths{.output_folders = {{"--output", o.output_dir}}};
  for (const std::string& input : o.inputs) paths.inputs.push_back({"--input", input});
  for (std::string& clash : path_clashes(paths)) bad.push_back(std::move(clash));
  if (!bad.empty()) {
    std::string msg = "tokenizer train: " + bad[0];
    for (size_t i = 1; i < bad.size(); ++i) msg += "; " + bad[i];
    throw ConfigError(msg);
  }
  const std::filesystem::path dir(o.output_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TESSEL_CHECK(!ec, "{}: cannot create the folder: {}", o.output_dir, ec.message());
  return o.model_type == "byte-bpe" ? train_byte_level(o, dir) : train_sentencepiece(o, dir);
}

}  // namespace tessel
