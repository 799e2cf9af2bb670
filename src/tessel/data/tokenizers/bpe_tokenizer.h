// The BPE and Unigram tokenizers (GPT2BPETokenizer, HuggingFaceTokenizer, TikTokenizer; BPE
// byte-level or SentencePiece-style, or a Unigram model): text -> added tokens cut out (those
// matched on the text as given) -> each segment normalized -> added tokens matched on normalized
// text cut out -> Metaspace -> pre-tokenized -> each piece encoded by the model (BPE's merges,
// Unigram's best segmentation), framed by the post-processor's template.
// Decoding runs the decoder chain over the tokens. Only the loaders differ (gpt2_bpe.cpp,
// hf_tokenizer.cpp, tiktoken.cpp), and tokenizers/loaders.h declares them.
#pragma once

#include <memory>

#include "tessel/data/tokenizer.h"
#include "tessel/data/tokenizers/added_tokens.h"
#include "tessel/data/tokenizers/bpe.h"
#include "tessel/data/tokenizers/decoder.h"
#include "tessel/data/tokenizers/normalizer.h"
#include "tessel/data/tokenizers/pretokenizer.h"

namespace tessel {

struct BpeTokenizerParts {
  std::string type;  // the --tokenizer-type it answers to
  Normalizer normalizer;
  std::optional<Metaspace> metaspace;  // the Metaspace pre-tokenizer's text change (its split is in `pre`)
  PreTokenizer pre;
  bool add_prefix_space = false;  // ByteLevel's: a space before text that does not start with one
  std::optional<Decoder> decoder;  // none: the tokens' bytes joined
  // Special and added tokens: they decode to their content; their ids may lie past the model's.
  std::vector<AddedToken> specials;
  bool split_specials = false;   // cut their text out of the input (Hugging Face), or treat it as text (tiktoken, GPT-2)
  std::vector<int32_t> prefix;   // the post-processor's template: ids before every encoding ...
  std::vector<int32_t> suffix;   // ... and after it
  SpecialIds ids;
  bool byte_level_spelling = true;  // id_to_token in GPT-2's alphabet ("Ġthe"); else the raw bytes
  int32_t vocab_size = 0;           // 0: one past the largest id
};

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(std::unique_ptr<const TokenModel> model, BpeTokenizerParts parts);

  std::string type() const override { return parts_.type; }
  int32_t vocab_size() const override { return vocab_size_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode_bare(std::string_view text) const override;
  std::string decode(std::span<const int32_t> tokens) const override;
  SpecialIds special_ids() const override { return parts_.ids; }
  std::string id_to_token(int32_t id) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::vector<std::pair<std::string, int32_t>> special_tokens() const override;

 private:
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_segment(std::string_view text, bool starts_input, std::vector<int32_t>& out) const;
  const AddedToken* special(int32_t id) const;

  std::unique_ptr<const TokenModel> model_;
  BpeTokenizerParts parts_;
  AddedTokenSplitter splitter_;             // added tokens matched on the text as given ...
  AddedTokenSplitter normalized_splitter_;  // ... and on the normalized text
  std::vector<int32_t> special_of_;  // id -> index into parts_.specials, or -1
  int32_t vocab_size_;
};

}  // namespace tessel
