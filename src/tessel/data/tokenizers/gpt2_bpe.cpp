// GPT2BPETokenizer (Megatron's _GPT2BPETokenizer): OpenAI's GPT-2 files — encoder.json (or
// Hugging Face's vocab.json) and vocab.bpe (merges.txt) — with GPT-2's pattern. <|endoftext|>
// is Megatron's eod and eos; like Megatron's (and OpenAI's encoder.py) it is not looked for in
// the text: the string "<|endoftext|>" there encodes as ordinary text.
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/bpe_tokenizer.h"
#include "tessel/data/tokenizers/loaders.h"

namespace tessel {

namespace {

// merges.txt: an optional "#version" first line, then one merge per line, "a b", in rank order.
std::vector<BpeMerge> parse_merges_txt(std::string_view text, std::string_view name, const TokenIndex& index) {
  std::vector<BpeMerge> merges;
  for_each_line(text, [&](size_t line_no, std::string_view line) {
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) return;
    const size_t space = line.find(' ');
    TESSEL_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                     line.find(' ', space + 1) == std::string_view::npos,
                 "{} line {}: expected two tokens separated by one space, got {:?}", name, line_no, std::string(line));
    merges.push_back(resolve_merge(line.substr(0, space), line.substr(space + 1), static_cast<int32_t>(merges.size()),
                                   index, fmt::format("{} line {}", name, line_no)));
  });
  TESSEL_CHECK(!merges.empty(), "{}: no merges", name);
  return merges;
}

}  // namespace

std::unique_ptr<Tokenizer> parse_gpt2_bpe(std::string_view vocab_json, std::string_view vocab_name,
                                          std::string_view merges_txt, std::string_view merges_name) {
  BpeVocab vocab = parse_byte_level_vocab(parse_json_text(vocab_json, vocab_name), vocab_name);
  TokenIndex index;
  index.build(vocab);
  std::vector<BpeMerge> merges = parse_merges_txt(merges_txt, merges_name, index);
  BpeTokenizerParts parts;
  parts.type = "GPT2BPETokenizer";
  parts.pre.rules.push_back({Regex(named_pattern("gpt2"), vocab_name), SplitBehavior::Isolated, false});
  if (const std::optional<int32_t> eod = index.find("<|endoftext|>")) {
    parts.specials.push_back({.content = "<|endoftext|>", .id = *eod, .special = true});
    parts.ids.eod = parts.ids.eos = *eod;
  }
  return std::make_unique<BpeTokenizer>(std::make_unique<BpeModel>(std::move(vocab), merges, false, std::string(vocab_name)),
                                        std::move(parts));
}

std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::string& vocab_file, const std::string& merge_file) {
  const std::string vocab = read_text_file(vocab_file);
  return parse_gpt2_bpe(vocab, vocab_file, read_text_file(merge_file), merge_file);
}

}  // namespace tessel
