#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <queue>
#include <unordered_map>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/byte_level.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tessel/data/tokenizers/pretokenizer.h"
#include "tessel/data/tokenizers/train.h"
#include "tessel/data/utf8.h"

namespace tessel {

namespace {

constexpr const char* kEndOfText = "<|endoftext|>";

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

class PairCounts {
 public:
  // Adds `sign` × the word's count for each adjacent pair of `w`, noting the word under each.
  void add(const Word& w, int32_t word_index, int sign) {
    for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
      const uint64_t key = pair_key(w.symbols[i], w.symbols[i + 1]);
      Entry& e = entries_[key];
      e.count += sign * w.count;
      if (sign > 0) {
        if (e.words.empty() || e.words.back() != word_index) e.words.push_back(word_index);
        changed_.push_back(key);
      }
    }
  }
  // The most frequent pair (ties: the smaller key) with its count, or count 0.
  std::pair<uint64_t, int64_t> best() {
    for (uint64_t key : changed_) heap_.push({entries_[key].count, key});
    changed_.clear();
    while (!heap_.empty()) {
      const auto [count, key] = heap_.top();
      const int64_t now = entries_[key].count;
      if (now == count) return {key, count};
      heap_.pop();  // stale: its count changed since it was pushed
      if (now > 0) heap_.push({now, key});
    }
    return {0, 0};
  }
  std::vector<int32_t> take_words(uint64_t key) {
    return std::move(entries_[key].words);  // the count falls to 0 as the words are rewritten
  }

 private:
  struct Entry {
    int64_t count = 0;
    std::vector<int32_t> words;  // may hold a word more than once, and words that lost the pair
  };
  struct Order {  // max count first; ties: smaller key first
    bool operator()(const std::pair<int64_t, uint64_t>& a, const std::pair<int64_t, uint64_t>& b) const {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    }
  };
  std::unordered_map<uint64_t, Entry> entries_;
  std::priority_queue<std::pair<int64_t, uint64_t>, std::vector<std::pair<int64_t, uint64_t>>, Order> heap_;
  std::vector<uint64_t> changed_;
};

}  // namespace

std::string train_byte_bpe_json(const std::vector<std::string_view>& texts, int32_t vocab_size, int64_t min_frequency) {
  TESSEL_CHECK(vocab_size >= 257, "--vocab-size {}: byte-level BPE needs at least 257 (256 bytes + {})", vocab_size, kEndOfText);
  PreTokenizer pre;
  pre.rules.push_back({Regex(named_pattern("gpt2"), "byte-bpe trainer"), SplitBehavior::Isolated, false});
  std::unordered_map<std::string_view, int64_t> counts;
  for (std::string_view text : texts) pre.for_each_piece(text, [&](std::string_view piece) { ++counts[piece]; });

  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [piece, count] : counts) {
    Word w{{}, count};
    for (unsigned char c : piece) w.symbols.push_back(c);
    words.push_back(std::move(w));
  }
  // Words in a fixed order, so that the result does not depend on the hash map's.
  std::sort(words.begin(), words.end(), [](const Word& a, const Word& b) { return a.symbols < b.symbols; });

  std::vector<std::string> tokens(256);
  for (int b = 0; b < 256; ++b) tokens[b] = std::string(1, static_cast<char>(b));
  std::unordered_map<std::string, int32_t> id_of;
  for (int b = 0; b < 256; ++b) id_of[tokens[b]] = b;
  std::vector<std::pair<int32_t, int32_t>> merges;

  PairCounts pairs;
  for (size_t i = 0; i < words.size(); ++i) pairs.add(words[i], static_cast<int32_t>(i), +1);
  std::vector<int32_t> seen(words.size(), -1);  // the merge that last rewrote each word
  while (static_cast<int32_t>(tokens.size()) < vocab_size - 1) {
    const auto [key, count] = pairs.best();
    if (count < std::max<int64_t>(min_frequency, 1)) break;
    const auto a = static_cast<int32_t>(key >> 32), b = static_cast<int32_t>(key & 0xFFFFFFFFu);
    // Two merges can spell the same token ("ab"+"c", "a"+"bc"): they share its id.
    const std::string joined = tokens[a] + tokens[b];
    auto [it, added] = id_of.emplace(joined, static_cast<int32_t>(tokens.size()));
    if (added) tokens.push_back(joined);
    const int32_t merged = it->second;
    merges.emplace_back(a, b);
    const int32_t stamp = static_cast<int32_t>(merges.size());
    for (int32_t wi : pairs.take_words(key)) {
      if (seen[wi] == stamp) continue;
      seen[wi] = stamp;
      Word& w = words[wi];
      pairs.add(w, wi, -1);
      std::vector<int32_t> out;
      out.reserve(w.symbols.size());
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(w.symbols[i]);
        }
      }
      w.symbols = std::move(out);
      pairs.add(w, wi, +1);
    }
  }

  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[byte_level_encode(tokens[id])] = id;
  const auto eot = static_cast<int32_t>(tokens.size());
  vocab[kEndOfText] = eot;
  nlohmann::ordered_json merge_list = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merges) merge_list.push_back({byte_level_encode(tokens[a]), byte_level_encode(tokens[b])});
  const nlohmann::ordered_json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                             {"trim_offsets", true}, {"use_regex", true}};
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = {{{"id", eot}, {"content", kEndOfText}, {"single_word", false}, {"lstrip", false},
                        {"rstrip", false}, {"normalized", false}, {"special", true}}};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level;
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                {"ignore_merges", false}, {"vocab", vocab}, {"merges", merge_list}};
  return j.dump(1) + "\n";
}

}  // namespace tessel
