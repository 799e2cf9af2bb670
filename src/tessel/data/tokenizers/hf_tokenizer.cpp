// HuggingFaceTokenizer: a tokenizer.json holding a byte-level BPE model (GPT-2, Llama-3, Qwen2,
// and what `tessel tokenizer train --model-type byte-bpe` writes). Read: the added tokens, an NFC
// normalizer, pre-tokenizers (ByteLevel, Split, Digits, Sequence), the BPE model (merges as "a b"
// strings or ["a", "b"] pairs, ignore_merges) and a TemplateProcessing post-processor, which
// frames every encoding as Hugging Face's encode(add_special_tokens=True) — what Megatron's
// _HuggingFaceTokenizer.tokenize returns. bos/eos/pad come from tokenizer_config.json beside it.
// Anything else (WordPiece, Unigram, byte_fallback, Metaspace, ...) is refused by name. Added
// tokens are all matched on the text as given (Hugging Face matches "normalized" ones after the
// normalizer; with NFC that differs only for added tokens holding decomposable characters).
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/bpe_tokenizer.h"
#include "tessel/data/tokenizers/loaders.h"

namespace tessel {

namespace {

using nlohmann::json;

std::string type_of(const json& node, std::string_view what, std::string_view name) {
  TESSEL_CHECK(node.is_object() && node.contains("type") && node["type"].is_string(),
               "{}: {} must be an object with a \"type\"", name, what);
  return node["type"].get<std::string>();
}

bool flag(const json& node, const char* key, bool fallback) {
  return node.contains(key) && node[key].is_boolean() ? node[key].get<bool>() : fallback;
}

void read_normalizer(const json& node, BpeTokenizerParts& parts, std::string_view name) {
  if (node.is_null()) return;
  const std::string type = type_of(node, "normalizer", name);
  if (type == "NFC") {
    parts.nfc = true;
  } else if (type == "Sequence" && node.contains("normalizers") && node["normalizers"].is_array()) {
    for (const json& n : node["normalizers"]) read_normalizer(n, parts, name);
  } else {
    fail("{}: normalizer {} is not supported (supported: NFC, Sequence of NFC)", name, type);
  }
}

SplitBehavior parse_behavior(const std::string& s, std::string_view name) {
  if (s == "Removed") return SplitBehavior::Removed;
  if (s == "Isolated") return SplitBehavior::Isolated;
  if (s == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return SplitBehavior::Contiguous;
  fail("{}: Split behavior {:?} is unknown", name, s);
}

// A literal as a PCRE2 pattern.
std::string quote(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 0x80) out += '\\';
    out += c;
  }
  return out;
}

// Appends the rules of one pre-tokenizer; returns whether a ByteLevel step was seen.
bool read_pre_tokenizer(const json& node, BpeTokenizerParts& parts, std::string_view name) {
  if (node.is_null()) return false;
  const std::string type = type_of(node, "pre_tokenizer", name);
  if (type == "Sequence") {
    TESSEL_CHECK(node.contains("pretokenizers") && node["pretokenizers"].is_array(),
                 "{}: a Sequence pre_tokenizer needs a \"pretokenizers\" list", name);
    bool byte_level = false;
    for (const json& p : node["pretokenizers"]) byte_level |= read_pre_tokenizer(p, parts, name);
    return byte_level;
  }
  if (type == "ByteLevel") {
    if (flag(node, "add_prefix_space", true)) {
      // A prefix space is added to every piece that reaches ByteLevel: tessel supports it where
      // the pieces are still the whole text.
      TESSEL_CHECK(parts.pre.rules.empty(), "{}: ByteLevel add_prefix_space after a Split is not supported", name);
      parts.add_prefix_space = true;
    }
    if (flag(node, "use_regex", true))
      parts.pre.rules.push_back({Regex(named_pattern("gpt2"), name), SplitBehavior::Isolated, false});
    return true;
  }
  if (type == "Split") {
    TESSEL_CHECK(node.contains("pattern") && node["pattern"].is_object(), "{}: a Split needs a \"pattern\"", name);
    const json& pattern = node["pattern"];
    std::string regex;
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) regex = pattern["Regex"].get<std::string>();
    else if (pattern.contains("String") && pattern["String"].is_string()) regex = quote(pattern["String"].get<std::string>());
    else fail("{}: a Split pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}", name);
    const std::string behavior = node.contains("behavior") && node["behavior"].is_string()
                                     ? node["behavior"].get<std::string>() : "Isolated";
    parts.pre.rules.push_back({Regex(regex, name), parse_behavior(behavior, name), flag(node, "invert", false)});
    return false;
  }
  if (type == "Digits") {
    const bool individual = flag(node, "individual_digits", false);
    parts.pre.rules.push_back({Regex("\\p{N}", name), individual ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false});
    return false;
  }
  fail("{}: pre_tokenizer {} is not supported (supported: ByteLevel, Split, Digits, Sequence)", name, type);
}

// TemplateProcessing's "single" template: the ids around $A.
void read_post_processor(const json& node, BpeTokenizerParts& parts, std::string_view name) {
  if (node.is_null()) return;
  const std::string type = type_of(node, "post_processor", name);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence" && node.contains("processors") && node["processors"].is_array()) {
    for (const json& p : node["processors"]) read_post_processor(p, parts, name);
    return;
  }
  TESSEL_CHECK(type == "TemplateProcessing", "{}: post_processor {} is not supported (supported: ByteLevel, "
               "TemplateProcessing, Sequence)", name, type);
  TESSEL_CHECK(node.contains("single") && node["single"].is_array(), "{}: TemplateProcessing needs \"single\"", name);
  const json specials = node.value("special_tokens", json::object());
  bool after = false;
  for (const json& item : node["single"]) {
    if (item.contains("Sequence")) {
      after = true;
      continue;
    }
    TESSEL_CHECK(item.contains("SpecialToken") && item["SpecialToken"].contains("id"),
                 "{}: a TemplateProcessing item must be a Sequence or a SpecialToken", name);
    const std::string token = item["SpecialToken"]["id"].get<std::string>();
    TESSEL_CHECK(specials.contains(token) && specials[token].contains("ids") && specials[token]["ids"].is_array(),
                 "{}: TemplateProcessing names {:?}, which is not in its special_tokens", name, token);
    for (const json& id : specials[token]["ids"]) (after ? parts.suffix : parts.prefix).push_back(id.get<int32_t>());
  }
}

std::vector<BpeMerge> read_merges(const json& list, std::string_view name, const TokenIndex& index) {
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
    merges.push_back(resolve_merge(a, b, static_cast<int32_t>(i), index, fmt::format("{} (model.merges[{}])", name, i)));
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
                      .special = flag(t, "special", false), .lstrip = flag(t, "lstrip", false),
                      .rstrip = flag(t, "rstrip", false), .single_word = flag(t, "single_word", false)});
  }
  return tokens;
}

void check_byte_level_model(const json& model, std::string_view name) {
  const std::string type = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "BPE";
  TESSEL_CHECK(type == "BPE", "{}: model type {} is not supported (tessel reads byte-level BPE tokenizer.json files)", name, type);
  TESSEL_CHECK(!flag(model, "byte_fallback", false), "{}: byte_fallback BPE (SentencePiece-style) is not supported: "
               "give the .model with --tokenizer-type Llama2Tokenizer", name);
  TESSEL_CHECK(!model.contains("dropout") || model["dropout"].is_null() ||
                   (model["dropout"].is_number() && model["dropout"].get<double>() == 0.0),
               "{}: BPE dropout is not supported (encoding would be random)", name);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    TESSEL_CHECK(!model.contains(key) || model[key].is_null() || (model[key].is_string() && model[key].get<std::string>().empty()),
                 "{}: model.{} is not supported by byte-level BPE", name, key);
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
    check_byte_level_model(model, name);
    TESSEL_CHECK(model.contains("vocab") && model.contains("merges"), "{}: the BPE model needs vocab and merges", name);
    BpeTokenizerParts parts;
    parts.type = "HuggingFaceTokenizer";
    read_normalizer(root.value("normalizer", json()), parts, name);
    TESSEL_CHECK(read_pre_tokenizer(root.value("pre_tokenizer", json()), parts, name),
                 "{}: no ByteLevel pre_tokenizer: tessel reads byte-level BPE tokenizer.json files only", name);
    if (const json decoder = root.value("decoder", json()); !decoder.is_null()) {
      const std::string type = type_of(decoder, "decoder", name);
      TESSEL_CHECK(type == "ByteLevel", "{}: decoder {} is not supported (byte-level BPE decodes with ByteLevel)", name, type);
    }
    read_post_processor(root.value("post_processor", json()), parts, name);
    BpeVocab vocab = parse_byte_level_vocab(model["vocab"], fmt::format("{} (model.vocab)", name));
    parts.specials = read_added_tokens(root.value("added_tokens", json()), vocab.size(), name);
    parts.split_specials = true;
    TokenIndex index;
    index.build(vocab);
    const std::vector<BpeMerge> merges = read_merges(model["merges"], name, index);

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
    const bool ignore_merges = flag(model, "ignore_merges", false);
    return std::make_unique<BpeTokenizer>(BpeModel(std::move(vocab), merges, ignore_merges, std::string(name)),
                                          std::move(parts));
  } catch (const json::exception& e) {
    fail("{}: unexpected structure: {}", name, e.what());
  }
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  TESSEL_CHECK(!path.empty(), "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model (tokenizer.json or its folder)");
  std::error_code ec;
  const fs::path file = fs::is_directory(path, ec) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  const fs::path config = file.parent_path() / "tokenizer_config.json";
  const std::string config_text = fs::exists(config, ec) ? read_text_file(config.string()) : std::string();
  return parse_hf_tokenizer(read_text_file(file.string()), file.string(), config_text, config.string());
}

}  // namespace tessel
