#include "tessel/data/tokenizers/hf_components.h"

#include <algorithm>
#include <cctype>
#include <climits>

#include "tessel/core/error.h"

namespace tessel {

using nlohmann::json;

std::string hf_type(const json& node, std::string_view what, std::string_view name) {
  TESSEL_CHECK(node.is_object() && node.contains("type") && node["type"].is_string(),
               "{}: {} must be an object with a \"type\"", name, what);
  return node["type"].get<std::string>();
}

bool hf_flag(const json& node, const char* key, bool fallback) {
  return node.contains(key) && node[key].is_boolean() ? node[key].get<bool>() : fallback;
}

namespace {

std::string string_field(const json& node, const char* key, std::string_view what, std::string_view name) {
  TESSEL_CHECK(node.contains(key) && node[key].is_string(), "{}: {} needs a string \"{}\"", name, what, key);
  return node[key].get<std::string>();
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

// {"String": s} or {"Regex": r} as a PCRE2 pattern; sets *literal to s for the first.
std::string read_pattern(const json& node, std::string_view what, std::string_view name, std::string* literal = nullptr) {
  TESSEL_CHECK(node.contains("pattern") && node["pattern"].is_object(), "{}: a {} needs a \"pattern\"", name, what);
  const json& pattern = node["pattern"];
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) return pattern["Regex"].get<std::string>();
  TESSEL_CHECK(pattern.contains("String") && pattern["String"].is_string(),
               "{}: a {} pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}", name, what);
  const std::string s = pattern["String"].get<std::string>();
  TESSEL_CHECK(!s.empty(), "{}: a {} pattern must not be empty", name, what);
  if (literal) *literal = s;
  return quote(s);
}

SplitBehavior parse_behavior(const json& node, std::string_view name) {
  const std::string s = node.contains("behavior") && node["behavior"].is_string() ? node["behavior"].get<std::string>() : "Isolated";
  if (s == "Removed") return SplitBehavior::Removed;
  if (s == "Isolated") return SplitBehavior::Isolated;
  if (s == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return SplitBehavior::Contiguous;
  fail("{}: Split behavior {:?} is unknown", name, s);
}

// Metaspace's prepend_scheme ("always", "first", "never"), or the older add_prefix_space.
bool metaspace_prepends(const json& node, Metaspace& m, std::string_view name) {
  if (node.contains("prepend_scheme") && node["prepend_scheme"].is_string()) {
    const std::string s = node["prepend_scheme"].get<std::string>();
    if (s == "always") m.prepend = Metaspace::Prepend::Always;
    else if (s == "first") m.prepend = Metaspace::Prepend::First;
    else if (s == "never") m.prepend = Metaspace::Prepend::Never;
    else fail("{}: Metaspace prepend_scheme {:?} is unknown (always, first, never)", name, s);
  } else {
    m.prepend = hf_flag(node, "add_prefix_space", true) ? Metaspace::Prepend::Always : Metaspace::Prepend::Never;
  }
  if (node.contains("replacement")) m.replacement = string_field(node, "replacement", "Metaspace", name);
  return m.prepend != Metaspace::Prepend::Never;
}

}  // namespace

void read_normalizer(const json& node, BpeTokenizerParts& parts, std::string_view name) {
  if (node.is_null()) return;
  const std::string type = hf_type(node, "normalizer", name);
  using Kind = NormalizerStep::Kind;
  std::vector<NormalizerStep>& steps = parts.normalizer.steps;
  if (type == "Sequence") {
    TESSEL_CHECK(node.contains("normalizers") && node["normalizers"].is_array(), "{}: a Sequence normalizer needs \"normalizers\"", name);
    for (const json& n : node["normalizers"]) read_normalizer(n, parts, name);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    steps.push_back({.kind = type == "NFC" ? Kind::Nfc : type == "NFD" ? Kind::Nfd : type == "NFKC" ? Kind::Nfkc : Kind::Nfkd});
  } else if (type == "Lowercase") {
    steps.push_back({.kind = Kind::Lowercase});
  } else if (type == "Strip") {
    steps.push_back({.kind = Kind::Strip, .left = hf_flag(node, "strip_left", true), .right = hf_flag(node, "strip_right", true)});
  } else if (type == "Prepend") {
    steps.push_back({.kind = Kind::Prepend, .text = string_field(node, "prepend", "Prepend normalizer", name)});
  } else if (type == "Replace") {
    NormalizerStep step{.kind = Kind::Replace, .content = string_field(node, "content", "Replace normalizer", name)};
    const std::string pattern = read_pattern(node, "Replace normalizer", name, &step.text);
    if (step.text.empty()) step.regex = std::make_shared<Regex>(pattern, name);
    steps.push_back(std::move(step));
  } else {
    fail("{}: normalizer {} is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend, Sequence)",
         name, type);
  }
}

bool read_pre_tokenizer(const json& node, BpeTokenizerParts& parts, std::string_view name) {
  if (node.is_null()) return false;
  const std::string type = hf_type(node, "pre_tokenizer", name);
  std::vector<SplitRule>& rules = parts.pre.rules;
  if (type == "Sequence") {
    TESSEL_CHECK(node.contains("pretokenizers") && node["pretokenizers"].is_array(),
                 "{}: a Sequence pre_tokenizer needs a \"pretokenizers\" list", name);
    bool byte_level = false;
    for (const json& p : node["pretokenizers"]) byte_level |= read_pre_tokenizer(p, parts, name);
    return byte_level;
  }
  if (type == "ByteLevel") {
    if (hf_flag(node, "add_prefix_space", true)) {
      // A prefix space is added to every piece that reaches ByteLevel: tessel supports it where
      // the pieces are still the whole text.
      TESSEL_CHECK(rules.empty(), "{}: ByteLevel add_prefix_space after a Split is not supported", name);
      parts.add_prefix_space = true;
    }
    if (hf_flag(node, "use_regex", true)) rules.push_back({Regex(named_pattern("gpt2"), name), SplitBehavior::Isolated, false});
    return true;
  }
  if (type == "Metaspace") {
    // Its text change applies to each segment; tessel supports it first, where pieces are segments.
    TESSEL_CHECK(rules.empty() && !parts.metaspace, "{}: pre_tokenizer Metaspace after another pre-tokenizer is not supported", name);
    Metaspace m;
    metaspace_prepends(node, m, name);
    if (hf_flag(node, "split", true)) rules.push_back({Regex(quote(m.replacement), name), SplitBehavior::MergedWithNext, false});
    parts.metaspace = m;
    return false;
  }
  if (type == "Split") {
    rules.push_back({Regex(read_pattern(node, "Split", name), name), parse_behavior(node, name), hf_flag(node, "invert", false)});
    return false;
  }
  if (type == "Digits") {
    const bool individual = hf_flag(node, "individual_digits", false);
    rules.push_back({Regex("\\p{N}", name), individual ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false});
    return false;
  }
  if (type == "WhitespaceSplit") {
    rules.push_back({Regex("\\s+", name), SplitBehavior::Removed, false});
    return false;
  }
  if (type == "Punctuation") {  // Unicode's punctuation and ASCII's
    rules.push_back({Regex(R"([\p{P}\x{21}-\x{2f}\x{3a}-\x{40}\x{5b}-\x{60}\x{7b}-\x{7e}])", name), parse_behavior(node, name), false});
    return false;
  }
  fail("{}: pre_tokenizer {} is not supported (supported: ByteLevel, Metaspace, Split, Digits, WhitespaceSplit, "
       "Punctuation, Sequence)", name, type);
}

void read_decoder(const json& node, BpeTokenizerParts& parts, bool byte_level, std::string_view name) {
  if (node.is_null()) return;
  const std::string type = hf_type(node, "decoder", name);
  if (!parts.decoder) parts.decoder.emplace();
  std::vector<DecoderStep>& steps = parts.decoder->steps;
  using Kind = DecoderStep::Kind;
  if (byte_level) {
    TESSEL_CHECK(type == "ByteLevel", "{}: decoder {} is not supported with a byte-level vocabulary (it decodes with ByteLevel)",
                 name, type);
    steps.push_back({.kind = Kind::ByteLevel});
    return;
  }
  if (type == "Sequence") {
    TESSEL_CHECK(node.contains("decoders") && node["decoders"].is_array(), "{}: a Sequence decoder needs \"decoders\"", name);
    for (const json& d : node["decoders"]) read_decoder(d, parts, byte_level, name);
  } else if (type == "ByteFallback") {
    steps.push_back({.kind = Kind::ByteFallback});
  } else if (type == "Fuse") {
    steps.push_back({.kind = Kind::Fuse});
  } else if (type == "Strip") {
    auto count = [](const json& n) { return static_cast<int>(std::min<uint64_t>(n.get<uint64_t>(), INT_MAX)); };
    const std::string content = string_field(node, "content", "Strip decoder", name);
    TESSEL_CHECK(node.contains("start") && node["start"].is_number_unsigned() && node.contains("stop") && node["stop"].is_number_unsigned(),
                 "{}: a Strip decoder needs counts \"start\" and \"stop\"", name);
    steps.push_back({.kind = Kind::Strip, .content = content, .start = count(node["start"]), .stop = count(node["stop"])});
  } else if (type == "Replace") {
    std::string literal;
    read_pattern(node, "Replace decoder", name, &literal);
    TESSEL_CHECK(!literal.empty(), "{}: a Replace decoder with a Regex pattern is not supported", name);
    steps.push_back({.kind = Kind::Replace, .pattern = literal, .content = string_field(node, "content", "Replace decoder", name)});
  } else if (type == "Metaspace") {
    Metaspace m;
    const bool prepend = metaspace_prepends(node, m, name);
    steps.push_back({.kind = Kind::Metaspace, .content = m.replacement, .prepend = prepend});
  } else if (type == "ByteLevel") {  // listed below as supported: with its pre-tokenizer
    fail("{}: decoder ByteLevel without a ByteLevel pre-tokenizer is not supported (tessel knows a byte-level "
         "vocabulary by its pre-tokenizer)", name);
  } else {
    fail("{}: decoder {} is not supported (supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence)",
         name, type);
  }
}

// TemplateProcessing's "single" template: the ids around $A.
void read_post_processor(const json& node, BpeTokenizerParts& parts, std::string_view name) {
  if (node.is_null()) return;
  const std::string type = hf_type(node, "post_processor", name);
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
    for (const json& id : specials[token]["ids"]) {
      TESSEL_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX,
                   "{}: TemplateProcessing's {:?} has an id that is not a token id: {}", name, token, id.dump());
      (after ? parts.suffix : parts.prefix).push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
}

}  // namespace tessel
