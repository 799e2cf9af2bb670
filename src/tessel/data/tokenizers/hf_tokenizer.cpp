// HuggingFaceTokenizer: a tokenizer.json holding a BPE model, byte-level (GPT-2, Llama 3, Qwen,
// DeepSeek-V3, and what `tessel tokenizer train --model-type byte-bpe` writes) or
// SentencePiece-style with byte fallback (Llama 2, Gemma, Mistral), or a Unigram model (T5,
// ALBERT, XLM-R: unigram.h). Read: the added tokens (with lstrip, rstrip, single_word,
// normalized), the normalizers, pre-tokenizers and decoders of hf_components.cpp, the BPE model
// (merges as "a b" strings or ["a", "b"] pairs, ignore_merges, byte_fallback, unk_token,
// fuse_unk) or the Unigram model (vocab, unk_id, byte_fallback) and a TemplateProcessing
// post-processor, which frames
// encode() as the library's encode(add_special_tokens=True) — what Megatron's
// _HuggingFaceTokenizer.tokenize returns; encode_bare() leaves it out. The ids follow the
// tokenizer.json alone, as the Rust library does: tokenizer_config.json's add_bos_token and
// add_eos_token, which Python transformers' Llama/Gemma classes apply on top, are not read;
// only its bos/eos/pad names are. Anything else (WordPiece, WordLevel, ...) is refused
// by name.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/bpe_tokenizer.h"
#include "tessel/data/tokenizers/hf_components.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tessel/data/tokenizers/unigram.h"

namespace tessel {

namespace {

using nlohmann::json;

std::vector<BpeMerge> read_merges(const json& list, std::string_view name, const TokenIndex& index, bool byte_level) {
  TESSEL_CHECK(list.is_array(), "{}: model.merges must be a list", name);
  std::vector<BpeMerge> merges;
  merges.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    std::string a, b;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      TESSEL_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                   "{}: model.merges[{}] = {:?} is not two tokens separated by one space", name, i, s);
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else {
      TESSEL_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"]", name, i);
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    }
    merges.push_back(resolve_merge(a, b, static_cast<int32_t>(i), index, fmt::format("{} (model.merges[{}])", name, i), byte_level));
  }
  return merges;
}

std::vector<AddedToken> read_added_tokens(const json& list, int64_t vocab_size, std::string_view name) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  TESSEL_CHECK(list.is_array(), "{}: added_tokens must be a list", name);
  const int64_t limit = vocab_size + static_cast<int64_t>(list.size()) + kMaxIdGap;
  for (const json& t : list) {
    TESSEL_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t["id"].get<int64_t>() >= 0 &&
                     t["id"].get<int64_t>() < limit && t.contains("content") && t["content"].is_string(),
                 "{}: an added token needs an integer \"id\" in [0, {}) and a \"content\" string: {}", name, limit, t.dump());
    tokens.push_back({.content = t["content"].get<std::string>(), .id = t["id"].get<int32_t>(),
                      .special = hf_flag(t, "special", false), .lstrip = hf_flag(t, "lstrip", false),
                      .rstrip = hf_flag(t, "rstrip", false), .single_word = hf_flag(t, "single_word", false),
                      .normalized = hf_flag(t, "normalized", !hf_flag(t, "special", false))});
  }
  return tokens;
}

// The BPE model; throws on the fields tessel does not support.
std::unique_ptr<TokenModel> read_bpe_model(const json& model, bool byte_level, std::string_view name) {
  TESSEL_CHECK(!model.contains("dropout") || model["dropout"].is_null() ||
                   (model["dropout"].is_number() && model["dropout"].get<double>() == 0.0),
               "{}: BPE dropout is not supported (encoding would be random)", name);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    TESSEL_CHECK(!model.contains(key) || model[key].is_null() || (model[key].is_string() && model[key].get<std::string>().empty()),
                 "{}: model.{} is not supported", name, key);
  TESSEL_CHECK(model.contains("vocab") && model.contains("merges"), "{}: the BPE model needs vocab and merges", name);
  // Byte-level BPE starts from bytes; otherwise from characters, with byte fallback if asked.
  BpeSymbols symbols{.by_character = !byte_level, .byte_fallback = !byte_level && hf_flag(model, "byte_fallback", false),
                     .fuse_unk = hf_flag(model, "fuse_unk", false)};
  BpeVocab vocab = parse_byte_level_vocab(model["vocab"], fmt::format("{} (model.vocab)", name), byte_level);
  TokenIndex index;
  index.build(vocab);
  const std::vector<BpeMerge> merges = read_merges(model["merges"], name, index, byte_level);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"].get<std::string>();
    const std::optional<int32_t> id = index.find(unk);
    TESSEL_CHECK(id, "{}: model.unk_token {:?} is not in the vocabulary", name, unk);
    symbols.unk = *id;
  }
  return std::make_unique<BpeModel>(std::move(vocab), merges, hf_flag(model, "ignore_merges", false), std::string(name),
                                    symbols);
}

// The Unigram model: "vocab" a list of [piece, score], "unk_id" an index into it or null.
std::unique_ptr<TokenModel> read_unigram_model(const json& model, bool byte_level, std::string_view name) {
  // ByteLevel would spell the pieces in GPT-2's alphabet, one character per byte: the unknown
  // characters of the lattice would be bytes, not the characters tessel's pieces hold.
  TESSEL_CHECK(!byte_level, "{}: a Unigram model with a ByteLevel pre-tokenizer is not supported", name);
  TESSEL_CHECK(model.contains("vocab") && model["vocab"].is_array(), "{}: the Unigram model needs a \"vocab\" list", name);
  std::vector<UnigramPiece> pieces;
  pieces.reserve(model["vocab"].size());
  for (const json& entry : model["vocab"]) {
    TESSEL_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_number(),
                 "{}: model.vocab[{}] must be [piece, score]: {}", name, pieces.size(), entry.dump());
    pieces.push_back({entry[0].get<std::string>(), entry[1].get<double>()});
  }
  int32_t unk = -1;
  if (model.contains("unk_id") && !model["unk_id"].is_null()) {
    TESSEL_CHECK(model["unk_id"].is_number_unsigned() && model["unk_id"].get<uint64_t>() < pieces.size(),
                 "{}: model.unk_id must be the index of a piece (the vocabulary has {}): {}", name, pieces.size(),
                 model["unk_id"].dump());
    unk = model["unk_id"].get<int32_t>();
  }
  return std::make_unique<UnigramModel>(pieces, unk, hf_flag(model, "byte_fallback", false), std::string(name));
}

// tokenizer_config.json's bos_token, eos_token, pad_token: a string, or {"content": ...}.
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

std::unique_ptr<Tokenizer> parse_hf_tokenizer(std::string_view tokenizer_json, std::string_view name,
                                              std::string_view config_json, std::string_view config_name) {
  const json root = parse_json_text(tokenizer_json, name);
  try {
    TESSEL_CHECK(root.is_object() && root.contains("model") && root["model"].is_object(),
                 "{}: not a tokenizer.json (no \"model\" object)", name);
    const json& model = root["model"];
    const std::string type = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "BPE";
    TESSEL_CHECK(type == "BPE" || type == "Unigram",
                 "{}: model {} is not supported (supported: BPE, byte-level or with byte_fallback; Unigram)", name, type);
    BpeTokenizerParts parts;
    parts.type = "HuggingFaceTokenizer";
    read_normalizer(root.value("normalizer", json()), parts, name);
    // A ByteLevel pre-tokenizer spells the vocabulary in GPT-2's byte alphabet and BPE starts
    // from bytes; without one, tokens are text and BPE starts from characters.
    const bool byte_level = read_pre_tokenizer(root.value("pre_tokenizer", json()), parts, name);
    TESSEL_CHECK(byte_level || !parts.add_prefix_space, "{}: ByteLevel add_prefix_space needs ByteLevel", name);
    read_decoder(root.value("decoder", json()), parts, byte_level, name);
    // Without a decoder the library joins the tokens with spaces; a byte-level vocabulary is
    // held as bytes, and its tokens are joined as they are.
    if (!parts.decoder && !byte_level) parts.decoder.emplace().separator = " ";
    read_post_processor(root.value("post_processor", json()), parts, name);
    std::unique_ptr<TokenModel> token_model =
        type == "BPE" ? read_bpe_model(model, byte_level, name) : read_unigram_model(model, byte_level, name);
    const TokenIndex& index = token_model->index();
    parts.specials = read_added_tokens(root.value("added_tokens", json()), token_model->vocab().size(), name);
    parts.split_specials = true;
    parts.byte_level_spelling = byte_level;

    const json config = config_json.empty() ? json::object() : parse_json_text(config_json, config_name);
    auto id_of = [&](const std::optional<std::string>& token, std::initializer_list<const char*> fallbacks) -> int32_t {
      std::vector<std::string> names;
      if (token) names.push_back(*token);
      else if (config_json.empty()) names.assign(fallbacks.begin(), fallbacks.end());
      for (const std::string& n : names) {
        for (const AddedToken& t : parts.specials)
          if (t.content == n) return t.id;
        if (token)  // named by the config: may be an ordinary vocabulary entry
          if (std::optional<int32_t> id = index.find(n)) return *id;
      }
      return -1;
    };
    // Without a tokenizer_config.json, the usual names of the special tokens stand in.
    parts.ids.bos = id_of(config_token(config, "bos_token"), {"<|begin_of_text|>", "<s>", "<bos>"});
    parts.ids.eos = id_of(config_token(config, "eos_token"), {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"});
    parts.ids.pad = id_of(config_token(config, "pad_token"), {"<pad>", "<|pad|>"});
    parts.ids.eod = parts.ids.eos;
    return std::make_unique<BpeTokenizer>(std::move(token_model), std::move(parts));
  } catch (const json::exception& e) {
    fail("{}: unexpected structure: {}", name, e.what());
  }
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path file = fs::is_directory(path, ec) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  const fs::path config = file.parent_path() / "tokenizer_config.json";
  const std::string config_text = fs::exists(config, ec) ? read_text_file(config.string()) : std::string();
  return parse_hf_tokenizer(read_text_file(file.string()), file.string(), config_text, config.string());
}

}  // namespace tessel
