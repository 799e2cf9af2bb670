#include "tessel/data/tokenizer_files.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/file_names.h"
#include "tessel/core/philox.h"
#include "tessel/core/writable.h"
#include "tessel/data/npy.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tessel/data/utf8.h"

namespace tessel {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kConfigName = "tokenizer_config.json";
constexpr const char* kEntry = "tessel_tokenizer";

bool is_type(const std::string& type, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (type == n) return true;
  return false;
}

// Whole or not at all, and never through a link at `to` (AtomicFile).
void copy_into(const std::string& from, const fs::path& to) {
  write_file_atomically(to.string(), read_text_file(from), Durability::kDurable);
}

json read_json_file(const fs::path& path) {
  return parse_json_text(read_text_file(path.string()), path.string());
}

// transformers' names of the special tokens (bos_token, ...) for the ids the tokenizer has.
void add_special_token_names(json& config, const Tokenizer& tokenizer) {
  const SpecialIds ids = tokenizer.special_ids();
  const std::pair<const char*, int32_t> named[] = {
      {"bos_token", ids.bos}, {"eos_token", ids.eos >= 0 ? ids.eos : ids.eod}, {"pad_token", ids.pad}};
  for (const auto& [key, id] : named)
    if (id >= 0 && !config.contains(key)) config[key] = tokenizer.id_to_token(id);
}

}  // namespace

void save_tokenizer_files(const TokenizerOptions& options, const Tokenizer& tokenizer,
                          const std::string& dir) {
  const std::string type = canonical_tokenizer_type(options.type);
  const fs::path out(dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  TESSEL_CHECK(!ec, "{}: cannot create the folder: {}", dir, ec.message());
  json config = json::object();
  json entry = {{"tokenizer_type", type}};
  if (is_type(type, {"HuggingFaceTokenizer"})) {
    const fs::path file = fs::is_directory(options.tokenizer_model, ec)
                              ? fs::path(options.tokenizer_model) / "tokenizer.json"
                              : fs::path(options.tokenizer_model);
    const fs::path source_config = file.parent_path() / kConfigName;
    if (fs::exists(source_config, ec)) config = read_json_file(source_config);
    if (!config.contains("tokenizer_class")) config["tokenizer_class"] = "PreTrainedTokenizerFast";
    copy_into(file.string(), out / "tokenizer.json");
    entry["tokenizer_model"] = "tokenizer.json";
  } else if (is_type(type, {"GPT2BPETokenizer"})) {
    config["tokenizer_class"] = "GPT2Tokenizer";
    copy_into(options.vocab_file, out / "vocab.json");  // encoder.json is the same format
    copy_into(options.merge_file, out / "merges.txt");  // and vocab.bpe
    entry["vocab_file"] = "vocab.json";
    entry["merge_file"] = "merges.txt";
  } else if (is_type(type, {"SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer"})) {
    config["tokenizer_class"] = "LlamaTokenizer";
    copy_into(options.tokenizer_model, out / "tokenizer.model");
    entry["tokenizer_model"] = "tokenizer.model";
  } else if (is_type(type, {"TikTokenizer"})) {
    // No transformers class reads tiktoken ranks: only tessel reads this folder's tokenizer.
    const std::string name = fs::path(options.tokenizer_model).filename().string();
    copy_into(options.tokenizer_model, out / name);
    entry["tokenizer_model"] = name;
    entry["tiktoken_pattern"] = options.tiktoken_pattern;
    entry["tiktoken_num_special_tokens"] = options.tiktoken_num_special_tokens;
    entry["special_tokens"] = options.special_tokens;
    entry["vocab_size"] = options.vocab_size;
  } else if (is_type(type, {"NullTokenizer"})) {
    entry["vocab_size"] = options.vocab_size;  // all there is to it: no files
  }
  add_special_token_names(config, tokenizer);
  config[kEntry] = entry;
  write_file_atomically((out / kConfigName).string(), config.dump(2) + "\n", Durability::kDurable);

  // transformers' generate stops at config.json's eos_token_id: the tokenizer's, not 0.
  const fs::path model_config = out / "config.json";
  if (!fs::exists(model_config, ec)) return;
  json model = read_json_file(model_config);
  const SpecialIds ids = tokenizer.special_ids();
  const int32_t eos = ids.eos >= 0 ? ids.eos : ids.eod;
  if (ids.bos >= 0) model["bos_token_id"] = ids.bos;
  if (eos >= 0) model["eos_token_id"] = eos;
  write_file_atomically(model_config.string(), model.dump(2) + "\n", Durability::kDurable);
}

std::optional<TokenizerOptions> tokenizer_in_folder(const std::string& path) {
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  auto has = [&](const char* name) { return fs::exists(dir / name, ec); };
  TokenizerOptions o;
  if (has(kConfigName)) {
    const json config = read_json_file(dir / kConfigName);
    if (config.contains(kEntry)) {
      const json& e = config.at(kEntry);
      const std::string where = (dir / kConfigName).string() + " " + kEntry;
      try {
        o.type = e.at("tokenizer_type").get<std::string>();
        auto file = [&](const char* key) {
          return e.contains(key) ? file_in_folder(dir.string(), e.at(key).get<std::string>(),
                                                  (dir / kConfigName).string(), fmt::format("{}.{}", kEntry, key))
                                 : std::string();
        };
        o.tokenizer_model = file("tokenizer_model");
        o.vocab_file = file("vocab_file");
        o.merge_file = file("merge_file");
        o.tiktoken_pattern = e.value("tiktoken_pattern", "");
        o.tiktoken_num_special_tokens = e.value("tiktoken_num_special_tokens", o.tiktoken_num_special_tokens);
        o.special_tokens = e.value("special_tokens", std::vector<std::string>{});
        o.vocab_size = e.value("vocab_size", 0);
      } catch (const json::exception& error) {
        throw Error(fmt::format("{}: {}", where, error.what()));
      }
      return o;
    }
  }
  if (has("tokenizer.json")) {
    o.type = "HuggingFaceTokenizer";
    o.tokenizer_model = dir.string();
  } else if (has("vocab.json") && has("merges.txt")) {
    o.type = "GPT2BPETokenizer";
    o.vocab_file = (dir / "vocab.json").string();
    o.merge_file = (dir / "merges.txt").string();
  } else if (has("tokenizer.model")) {
    o.type = "Llama2Tokenizer";
    o.tokenizer_model = (dir / "tokenizer.model").string();
  } else {
    return std::nullopt;
  }
  return o;
}

json tokenizer_identity(const Tokenizer& tokenizer) {
  // Every token's spelling and its text's encoding (which the merges decide), and a probe text.
  std::string spelled;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    std::string text;
    try {
      spelled += tokenizer.id_to_token(id);
      const int32_t one[1] = {id};
      text = tokenizer.decode(one);
    } catch (const Error&) {  // a hole in the vocabulary (o200k has some)
      spelled += "\x01hole";
    }
    if (!first_invalid_utf8(text))  // a lone byte of a character encodes to nothing
      for (int32_t t : tokenizer.encode(text)) spelled += fmt::format(" {}", t);
    spelled += '\0';
  }
  const char* probe = "The quick brown fox, 1234 times: naïve café — Добрый день, 你好世界 🙂\n\n  end";
  try {
    for (int32_t id : tokenizer.encode(probe)) spelled += fmt::format("{} ", id);
  } catch (const Error&) {  // NullTokenizer reads its numbers only
    spelled += "\x01no text";
  }
  const SpecialIds ids = tokenizer.special_ids();
  return {{"type", tokenizer.type()},
          {"vocab_size", tokenizer.vocab_size()},
          {"special_ids", {ids.eod, ids.bos, ids.eos, ids.pad}},
          {"fingerprint", fmt::format("{:016x}", fnv1a64(spelled))}};
}

std::string tokenizer_mismatch(const json& saved, const json& current) {
  if (!saved.is_object()) return {};  // a save from before tokenizers were recorded: a type name
  std::vector<std::string> differ;
  for (const char* key : {"vocab_size", "special_ids", "fingerprint"})
    if (saved.value(key, json()) != current.at(key)) differ.push_back(key);
  if (differ.empty()) return {};
  return fmt::format("saved with the {} (vocabulary {}, fingerprint {}), this run has the {} "
                     "(vocabulary {}, fingerprint {}): they differ in {}",
                     saved.value("type", "?"), saved.value("vocab_size", json()).dump(),
                     saved.value("fingerprint", "?"), current.at("type").get<std::string>(),
                     current.at("vocab_size").dump(), current.at("fingerprint").get<std::string>(),
                     fmt::format("{}", fmt::join(differ, ", ")));
}

}  // namespace tessel
