#include "tessel/data/tokenizers/pretokenizer.h"

#include <utility>

#include "tessel/core/error.h"

namespace tessel {

namespace {

// The patterns as their tokenizers publish them (tiktoken's encodings, GPT-2's encoder.py,
// Qwen2's tokenizer.json, Megatron-LM's PATTERN_TIKTOKEN and _V2).
const std::pair<const char*, const char*> kPatterns[] = {
    {"gpt2", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"},
    {"cl100k", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"o200k", R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"qwen2", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"v1", R"([^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"},
    {"v2", R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
};

const std::pair<const char*, const char*> kAliases[] = {
    {"r50k", "gpt2"}, {"p50k", "gpt2"}, {"r50k_base", "gpt2"}, {"p50k_base", "gpt2"},
    {"cl100k_base", "cl100k"}, {"llama3", "cl100k"}, {"o200k_base", "o200k"},
};

}  // namespace

std::string named_pattern(std::string_view name) {
  for (const auto& [alias, target] : kAliases)
    if (name == alias) name = target;
  for (const auto& [known, pattern] : kPatterns)
    if (name == known) return pattern;
  fail("--tiktoken-pattern {}: unknown (known: gpt2, r50k, p50k, cl100k, llama3, o200k, qwen2, v1, v2)", name);
}

}  // namespace tessel
