// TikTokenizer: tiktoken's rank files (one `base64(token) rank` line per token, as OpenAI
// publishes cl100k_base.tiktoken) with a named pattern, and Megatron-LM's TikTokenizer JSON
// vocabulary (a list of {"rank", "token_bytes", "token_str"}) whose ids start after
// --tiktoken-num-special-tokens special tokens. As Megatron's tokenize (tiktoken's
// encode_ordinary), special tokens are not looked for in the text; they decode to their text.
// A token's id is its rank: merges join two tokens whose concatenation is a token, lowest rank
// first, and a piece that is itself a token is emitted whole.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/bpe_tokenizer.h"
#include "tessel/data/tokenizers/loaders.h"

namespace tessel {

namespace {

// Strict base64 (RFC 4648 alphabet, '=' padding to a multiple of 4).
std::optional<std::string> base64_decode(std::string_view s) {
  static const std::array<int8_t, 256> value = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) v[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return v;
  }();
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  while (pad < 2 && s[s.size() - 1 - pad] == '=') ++pad;
  std::string out;
  uint32_t acc = 0;
  for (size_t i = 0; i < s.size() - pad; ++i) {
    const int8_t v = value[static_cast<unsigned char>(s[i])];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    if (i % 4 == 3) {
      out += static_cast<char>(acc >> 16);
      out += static_cast<char>(acc >> 8);
      out += static_cast<char>(acc);
      acc = 0;
    }
  }
  if (pad == 1) {  // 3 symbols: 2 bytes
    out += static_cast<char>(acc >> 10);
    out += static_cast<char>(acc >> 2);
  } else if (pad == 2) {  // 2 symbols: 1 byte
    out += static_cast<char>(acc >> 4);
  }
  return out;
}

// The special tokens of OpenAI's encodings, used when the rank file is that encoding's (it has
// exactly `ranks` ranks).
struct Encoding {
  const char* pattern;
  int32_t ranks;
  std::vector<std::pair<const char*, int32_t>> specials;
};
const Encoding kEncodings[] = {
    {"gpt2", 50256, {{"<|endoftext|>", 50256}}},
    {"cl100k", 100256, {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
                        {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}}},
    {"o200k", 199998, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
};

// Ranks from `base64 rank` lines; token bytes by rank.
BpeVocab parse_rank_lines(std::string_view text, std::string_view name) {
  BpeVocab vocab;
  std::vector<size_t> line_of;  // by rank, for messages
  const int64_t limit = static_cast<int64_t>(std::count(text.begin(), text.end(), '\n')) + 1 + kMaxIdGap;
  for_each_line(text, [&](size_t line_no, std::string_view line) {
    if (line.empty()) return;
    const size_t space = line.find(' ');
    TESSEL_CHECK(space != std::string_view::npos, "{} line {}: expected `base64-token rank`", name, line_no);
    std::optional<std::string> token = base64_decode(line.substr(0, space));
    TESSEL_CHECK(token, "{} line {}: {:?} is not valid base64", name, line_no, std::string(line.substr(0, space)));
    const std::string_view rank_text = line.substr(space + 1);
    int64_t rank = -1;
    const auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    TESSEL_CHECK(ec == std::errc() && end == rank_text.data() + rank_text.size() && rank >= 0 && rank < limit,
                 "{} line {}: rank {:?} is not an integer in [0, {}) (lines + 2^20)", name, line_no, std::string(rank_text), limit);
    const auto r = static_cast<int32_t>(rank);
    if (r < vocab.size() && vocab.present[r])
      fail("{} line {}: rank {} was already given on line {}", name, line_no, r, line_of[r]);
    vocab.set(r, std::move(*token));
    line_of.resize(vocab.size());
    line_of[r] = line_no;
  });
  TESSEL_CHECK(vocab.size() > 0, "{}: no ranks", name);
  TokenIndex index;
  index.build(vocab);
  for (int32_t r = 0; r < vocab.size(); ++r)
    if (vocab.present[r] && index.find(vocab.bytes[r]) != r)
      fail("{} line {}: the token of rank {} already has rank {} (line {})", name, line_of[r], r,
           *index.find(vocab.bytes[r]), line_of[*index.find(vocab.bytes[r])]);
  return vocab;
}

// Megatron's JSON vocabulary: ranks 0..n-1 in order, the first 256 the single bytes; cut to
// `keep` ranks and moved up by `offset` ids.
BpeVocab parse_megatron_json(std::string_view text, std::string_view name, int32_t keep, int32_t offset) {
  const nlohmann::json list = parse_json_text(text, name);
  TESSEL_CHECK(list.is_array(), "{}: expected a list of {{rank, token_bytes, token_str}}", name);
  TESSEL_CHECK(static_cast<int64_t>(list.size()) >= keep,
               "{}: {} ranks, fewer than --vocab-size minus --tiktoken-num-special-tokens = {}", name, list.size(), keep);
  BpeVocab vocab;
  for (int32_t i = 0; i < keep; ++i) {
    const nlohmann::json& e = list[i];
    TESSEL_CHECK(e.is_object() && e.contains("rank") && e["rank"].is_number_integer() && e.contains("token_bytes") &&
                     e["token_bytes"].is_string(), "{}: entry {} needs an integer \"rank\" and a \"token_bytes\" string", name, i);
    TESSEL_CHECK(e["rank"].get<int64_t>() == i, "{}: entry {} has rank {} (ranks must run 0, 1, 2, ...)", name, i,
                 e["rank"].dump());
    std::optional<std::string> token = base64_decode(e["token_bytes"].get<std::string>());
    TESSEL_CHECK(token, "{}: entry {}: token_bytes is not valid base64", name, i);
    TESSEL_CHECK(i >= 256 || (token->size() == 1 && static_cast<unsigned char>((*token)[0]) == i),
                 "{}: entry {} must be the single byte 0x{:02X}", name, i, i);
    vocab.set(i + offset, std::move(*token));
  }
  TokenIndex index;
  index.build(vocab);
  for (int32_t id = offset; id < vocab.size(); ++id)
    TESSEL_CHECK(index.find(vocab.bytes[id]) == id, "{}: entry {} repeats the token of entry {}", name, id - offset,
                 *index.find(vocab.bytes[id]) - offset);
  return vocab;
}

}  // namespace

std::unique_ptr<Tokenizer> parse_tiktoken(std::string_view ranks, std::string_view name, const TokenizerOptions& options) {
  TESSEL_CHECK(!options.tiktoken_pattern.empty(), "--tokenizer-type TikTokenizer needs --tiktoken-pattern "
               "(gpt2, cl100k, o200k, qwen2, or Megatron's v1, v2)");
  BpeTokenizerParts parts;
  parts.type = "TikTokenizer";
  parts.byte_level_spelling = false;
  parts.pre.rules.push_back({Regex(named_pattern(options.tiktoken_pattern), name), SplitBehavior::Isolated, false});
  const size_t first = ranks.find_first_not_of(" \t\r\n");
  BpeVocab vocab;
  if (first != std::string_view::npos && ranks[first] == '[') {
    // Megatron's layout: special tokens first, then the ranks.
    const int32_t size = options.vocab_size > 0 ? options.vocab_size : 131072;
    const int32_t num_special = options.tiktoken_num_special_tokens;
    std::vector<std::string> specials = options.special_tokens;
    if (specials.empty()) specials = {"<unk>", "<s>", "</s>"};
    for (const char* required : {"<unk>", "<s>", "</s>"})
      TESSEL_CHECK(std::find(specials.begin(), specials.end(), required) != specials.end(),
                   "--tokenizer-special-tokens must include <unk>, <s> and </s> (Megatron's TikTokenizer)");
    TESSEL_CHECK(static_cast<int32_t>(specials.size()) <= num_special && num_special < size,
                 "--tiktoken-num-special-tokens {} must hold the {} special tokens and be below --vocab-size {}",
                 num_special, specials.size(), size);
    for (int32_t i = static_cast<int32_t>(specials.size()); i < num_special; ++i) specials.push_back(fmt::format("<SPECIAL_{}>", i));
    vocab = parse_megatron_json(ranks, name, size - num_special, num_special);
    for (int32_t i = 0; i < num_special; ++i) {
      TESSEL_CHECK(std::count(specials.begin(), specials.end(), specials[i]) == 1, "--tokenizer-special-tokens: {:?} is given twice", specials[i]);
      parts.specials.push_back({.content = specials[i], .id = i, .special = true});
      if (specials[i] == "<s>") parts.ids.bos = i;
      if (specials[i] == "</s>") parts.ids.eos = parts.ids.eod = i;
    }
    parts.vocab_size = size;
  } else {
    vocab = parse_rank_lines(ranks, name);
    int32_t count = 0;
    for (bool p : vocab.present) count += p;
    std::string_view pattern = options.tiktoken_pattern;
    if (pattern == "r50k" || pattern == "p50k") pattern = "gpt2";
    for (const Encoding& e : kEncodings)
      if (pattern.starts_with(e.pattern) && count == e.ranks && vocab.size() == e.ranks)
        for (const auto& [content, id] : e.specials) parts.specials.push_back({.content = content, .id = id, .special = true});
    int32_t next = std::max(vocab.size(), parts.specials.empty() ? 0 : parts.specials.back().id + 1);
    for (const std::string& s : options.special_tokens) parts.specials.push_back({.content = s, .id = next++, .special = true});
    for (const AddedToken& t : parts.specials)
      if (t.content == "<|endoftext|>") parts.ids.eod = parts.ids.eos = t.id;
  }
  TokenIndex index;
  index.build(vocab);
  std::vector<BpeMerge> merges = BpeModel::merges_from_ranks(vocab, index);
  return std::make_unique<BpeTokenizer>(std::make_unique<BpeModel>(std::move(vocab), merges, true, std::string(name)), std::move(parts));
}

std::unique_ptr<Tokenizer> load_tiktoken(const TokenizerOptions& options) {
  return parse_tiktoken(read_text_file(options.tokenizer_model), options.tokenizer_model, options);
}

}  // namespace tessel
