// libFuzzer harness for the Hugging Face tokenizer.json reader (parse_hf_tokenizer): the input
// is the tokenizer.json; when it loads, it encodes and decodes (fuzz_tokenizer_common.h).
#include "fuzz_tokenizer_common.h"
#include "tessel/data/tokenizers/loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    const auto t = tessel::parse_hf_tokenizer(input, "fuzz/tokenizer.json");
    tessel::fuzz::exercise(*t, input);
  } catch (const tessel::Error&) {
  }
  return 0;
}
