// The tokenizer file readers. Each file kind has a parse_* function over the file's bytes (what
// the fuzzers in bench/fuzz/ drive) and the make_tokenizer path reads the files and calls it.
// Every error is a tessel::Error that names the file and, where it helps, the line or offset.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessel/data/tokenizer.h"
#include "tessel/data/tokenizers/bpe.h"

namespace tessel {

// ---- shared by the readers (bpe_files.cpp) ----

// Ids may exceed the number of tokens given by at most this much (holes in the vocabulary): a
// bound that keeps a corrupt id from sizing a table of a billion entries.
constexpr int64_t kMaxIdGap = int64_t{1} << 20;

// The whole file; throws "PATH: cannot read: reason".
std::string read_text_file(const std::string& path);
// Calls fn(line number from 1, line without its "\n" or "\r\n") for each line of `text`.
void for_each_line(std::string_view text, const std::function<void(size_t, std::string_view)>& fn);
// Objects and lists within each other, at most: a real tokenizer.json nests about 6 deep.
inline constexpr int kMaxJsonDepth = 64;
// Throws "NAME: not valid JSON at byte N: reason", or naming kMaxJsonDepth for a deeper file.
nlohmann::json parse_json_text(std::string_view text, std::string_view name);
// A byte-level vocabulary (vocab.json, encoder.json, a tokenizer.json's model.vocab): token text
// in GPT-2's alphabet -> id; text outside it stands for its own UTF-8 bytes, as Hugging Face's
// ByteLevel decoder reads it. byte_level false: the token text is the token (SentencePiece-style).
// Throws on a non-integer or negative id, or one id given twice.
BpeVocab parse_byte_level_vocab(const nlohmann::json& vocab, std::string_view name, bool byte_level = true);
// The merge of tokens a and b (vocabulary spellings) with rank `rank`; `where` says where the
// merge was written ("merges.txt line 7"). Throws when a, b or a+b is not in the vocabulary.
BpeMerge resolve_merge(std::string_view a, std::string_view b, int32_t rank, const TokenIndex& index,
                       std::string_view where, bool byte_level = true);

// ---- GPT2BPETokenizer: vocab.json (or encoder.json) + merges.txt (or vocab.bpe) ----
std::unique_ptr<Tokenizer> parse_gpt2_bpe(std::string_view vocab_json, std::string_view vocab_name,
                                          std::string_view merges_txt, std::string_view merges_name);
std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::string& vocab_file, const std::string& merge_file);

// ---- HuggingFaceTokenizer: tokenizer.json (+ tokenizer_config.json for bos/eos/pad) ----
// `config_json` may be empty (no tokenizer_config.json).
std::unique_ptr<Tokenizer> parse_hf_tokenizer(std::string_view tokenizer_json, std::string_view name,
                                              std::string_view config_json = {},
                                              std::string_view config_name = {});
// `path`: a tokenizer.json, or a folder holding one.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path);

// ---- TikTokenizer: `base64(token) rank` lines, or Megatron's JSON vocabulary ----
std::unique_ptr<Tokenizer> parse_tiktoken(std::string_view ranks, std::string_view name,
                                          const TokenizerOptions& options);
std::unique_ptr<Tokenizer> load_tiktoken(const TokenizerOptions& options);

// ---- SentencePiece .model (libsentencepiece) ----
std::unique_ptr<Tokenizer> load_sentencepiece(const TokenizerOptions& options);

}  // namespace tessel
