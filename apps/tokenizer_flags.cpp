#include "tokenizer_flags.h"

namespace tessel {

void add_tokenizer_flags(CLI::App& app, TokenizerOptions& options) {
  app.add_option("--tokenizer-type", options.type,
                 "ByteTokenizer | GPT2BPETokenizer | HuggingFaceTokenizer | TikTokenizer | SentencePieceTokenizer | "
                 "GPTSentencePieceTokenizer | Llama2Tokenizer (short: byte, gpt2, hf, tiktoken, sentencepiece)")
      ->capture_default_str();
  app.add_option("--vocab-file", options.vocab_file, "GPT2BPETokenizer: vocab.json or encoder.json");
  app.add_option("--merge-file", options.merge_file, "GPT2BPETokenizer: merges.txt or vocab.bpe");
  app.add_option("--tokenizer-model", options.tokenizer_model,
                 "tokenizer.json or its folder (HuggingFaceTokenizer), a .tiktoken or Megatron .json (TikTokenizer), "
                 "a .model (SentencePiece types)");
  app.add_option("--tiktoken-pattern", options.tiktoken_pattern, "TikTokenizer: gpt2 | cl100k | o200k | qwen2 | v1 | v2");
  app.add_option("--tiktoken-num-special-tokens", options.tiktoken_num_special_tokens,
                 "TikTokenizer with Megatron's .json: ids reserved for special tokens")
      ->capture_default_str();
  app.add_option("--tokenizer-special-tokens", options.special_tokens,
                 "TikTokenizer: special tokens (Megatron's .json: default <unk> <s> </s>)");
}

}  // namespace tessel
