// libFuzzer harness for the TikTokenizer readers: `base64 rank` lines, or Megatron's JSON
// vocabulary when the input starts with '[' (special tokens first, --vocab-size 300 and 10
// special ids so that a small seed fills it).
#include "fuzz_tokenizer_common.h"
#include "tessel/data/tokenizers/loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  tessel::TokenizerOptions options{.type = "TikTokenizer", .tiktoken_pattern = "cl100k"};
  options.vocab_size = 300;
  options.tiktoken_num_special_tokens = 10;
  try {
    const auto t = tessel::parse_tiktoken(input, "fuzz.tiktoken", options);
    tessel::fuzz::exercise(*t, input);
  } catch (const tessel::Error&) {
  }
  return 0;
}
