// The readers of a tokenizer.json's pipeline (normalizer, pre_tokenizer, decoder,
// post_processor) into BpeTokenizerParts, for hf_tokenizer.cpp. Each refuses a component it does
// not support with one line naming it and the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "tessel/data/tokenizers/bpe_tokenizer.h"

namespace tessel {

// The node's "type"; throws when it has none.
std::string hf_type(const nlohmann::json& node, std::string_view what, std::string_view name);
bool hf_flag(const nlohmann::json& node, const char* key, bool fallback);

void read_normalizer(const nlohmann::json& node, BpeTokenizerParts& parts, std::string_view name);
// Appends the pre-tokenizer's rules; returns whether a ByteLevel step was seen (the vocabulary is
// then spelled in GPT-2's byte alphabet).
bool read_pre_tokenizer(const nlohmann::json& node, BpeTokenizerParts& parts, std::string_view name);
void read_decoder(const nlohmann::json& node, BpeTokenizerParts& parts, bool byte_level, std::string_view name);
void read_post_processor(const nlohmann::json& node, BpeTokenizerParts& parts, std::string_view name);

}  // namespace tessel
