// A tokenizer travels with its model. `--save-hf` and `tessel export` copy the tokenizer's files
// into the model's folder under Hugging Face's names (tokenizer.json; vocab.json + merges.txt;
// tokenizer.model) with a tokenizer_config.json that says how tessel reads them, so that
// `tessel generate`, `--init-from` and transformers' AutoTokenizer find them there; checkpoints
// record the tokenizer's identity so that a resumed run cannot change it unnoticed.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "tessel/data/tokenizer.h"

namespace tessel {

// Copies the files `options` names into `dir` (created) and writes dir/tokenizer_config.json: the
// source's own tokenizer_config.json where a Hugging Face tokenizer has one, with the special
// tokens and a "tessel_tokenizer" entry (the --tokenizer-type and options, file names relative
// to dir). A config.json already in dir gets the tokenizer's bos and eos ids. The byte tokenizer
// has no files: only its entry is written. Throws tessel::Error naming a file that cannot be
// read or written.
void save_tokenizer_files(const TokenizerOptions& options, const Tokenizer& tokenizer,
                          const std::string& dir);

// The tokenizer of a model folder (or of the folder holding the file `path`): the
// "tessel_tokenizer" entry of its tokenizer_config.json, else by the files found, in
// transformers' order of preference: tokenizer.json (HuggingFaceTokenizer), vocab.json +
// merges.txt (GPT2BPETokenizer), tokenizer.model (Llama2Tokenizer). nullopt when there is none.
std::optional<TokenizerOptions> tokenizer_in_folder(const std::string& path);

// What identifies a tokenizer whatever its files are called: its type, vocabulary size, special
// ids and a fingerprint (FNV-1a over every token's spelling and the encoding of a probe text in
// several scripts), as a checkpoint records it.
nlohmann::json tokenizer_identity(const Tokenizer& tokenizer);

// Empty when `saved` (a checkpoint's record) names the same tokenizer as `current`, or records
// none (saves from before tokenizers were recorded hold a type name only); else why not.
std::string tokenizer_mismatch(const nlohmann::json& saved, const nlohmann::json& current);

}  // namespace tessel
