// Small tokenizer files written by the tests: a byte-level BPE with all 256 bytes (id = byte)
// and a few merges, as GPT-2 files, as a tokenizer.json and as a tiktoken rank file.
#pragma once

#include "support/fixtures.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tessel/data/tokenizers/byte_level.h"

namespace tessel::testing {

// A per-test folder under the temporary directory, removed with the object.
// The tiny model's merges, in rank order (raw bytes): ids 256, 257, ... in this order.
inline const std::vector<std::pair<std::string, std::string>>& tiny_merges() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {" ", "t"}, {"h", "e"}, {" t", "he"}, {"a", "a"}, {"i", "n"}, {" ", "in"}};
  return m;
}

// vocab.json: the 256 bytes (id = byte value), the merged tokens, "xyz" (no merge makes it) and
// <|endoftext|>.
inline nlohmann::json tiny_vocab_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  int id = 256;
  for (const auto& [a, b] : tiny_merges()) vocab[byte_level_encode(a + b)] = id++;
  vocab["xyz"] = id++;
  vocab["<|endoftext|>"] = id++;
  return vocab;
}

inline std::string tiny_merges_txt() {
  std::string s = "#version: 0.2\n";
  for (const auto& [a, b] : tiny_merges()) s += byte_level_encode(a) + " " + byte_level_encode(b) + "\n";
  return s;
}

// The same model as a tokenizer.json; merges as "a b" strings or as pairs.
inline nlohmann::json tiny_tokenizer_json(bool merges_as_pairs, bool ignore_merges = false) {
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : tiny_merges()) {
    if (merges_as_pairs) merges.push_back({byte_level_encode(a), byte_level_encode(b)});
    else merges.push_back(byte_level_encode(a) + " " + byte_level_encode(b));
  }
  nlohmann::json vocab = tiny_vocab_json();
  const int eot = vocab["<|endoftext|>"];
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                     {"use_regex", true}};
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", eot}, {"content", "<|endoftext|>"}, {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", ignore_merges}}}};
}

}  // namespace tessel::testing
