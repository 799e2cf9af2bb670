#include "tessel/data/tokenizers/train.h"

#include <sentencepiece_trainer.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <thread>
#include <unordered_map>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tessel/data/utf8.h"

// libsentencepiece's log threshold (exported by the library, not declared in its headers): its
// trainer reports every step on stderr otherwise.
namespace sentencepiece::logging {
void SetMinLogLevel(int level);
}

namespace tessel {

namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  TESSEL_CHECK(out, "{}: cannot write", path.string());
}

TokenizerOptions train_sentencepiece(const TokenizerTrainOptions& o, const std::filesystem::path& dir) {
  std::string inputs;
  for (const std::string& f : o.inputs) {
    TESSEL_CHECK(f.find(',') == std::string::npos, "{}: libsentencepiece cannot take a file name with a comma", f);
    check_utf8(read_text_file(f), f);
    inputs += (inputs.empty() ? "" : ",") + f;
  }
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Llama-2's trainer settings, where they are not the user's to choose: text kept as it is
  // (identity normalization, white space runs kept), digits one per piece.
  const std::unordered_map<std::string, std::string> args = {
      {"input", inputs},
      {"model_prefix", (dir / "tokenizer").string()},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"num_threads", std::to_string(threads)},
  };
  sentencepiece::logging::SetMinLogLevel(1);
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(args);
  TESSEL_CHECK(status.ok(), "tokenizer train: libsentencepiece: {}", status.ToString());
  TokenizerOptions result;
  result.type = "GPTSentencePieceTokenizer";
  result.tokenizer_model = (dir / "tokenizer.model").string();
  return result;
}

TokenizerOptions train_byte_level(const TokenizerTrainOptions& o, const std::filesystem::path& dir) {
  std::vector<std::string> texts;
  for (const std::string& f : o.inputs) {
    texts.push_back(read_text_file(f));
    check_utf8(texts.back(), f);
  }
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  write_file(dir / "tokenizer.json", train_byte_bpe_json(views, o.vocab_size, o.min_frequency));
  const nlohmann::json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"bos_token", "<|endoftext|>"},
                                 {"eos_token", "<|endoftext|>"}, {"unk_token", nullptr},
                                 {"clean_up_tokenization_spaces", false}, {"add_prefix_space", false}};
  write_file(dir / "tokenizer_config.json", config.dump(2) + "\n");
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
  if (o.model_type != "bpe" && o.model_type != "unigram" && o.model_type != "byte-bpe")
    bad.push_back(fmt::format("--model-type {}: must be bpe, unigram (SentencePiece) or byte-bpe (tokenizer.json)", o.model_type));
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
