// libFuzzer harness for GPT-2's vocab.json + merges.txt reader (parse_gpt2_bpe): the input is
// the two files joined by a NUL byte (no NUL: the whole input is vocab.json, merges empty).
#include "fuzz_tokenizer_common.h"
#include "tessel/data/tokenizers/loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view vocab = input.substr(0, nul);
  const std::string_view merges = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  try {
    const auto t = tessel::parse_gpt2_bpe(vocab, "fuzz/vocab.json", merges, "fuzz/merges.txt");
    tessel::fuzz::exercise(*t, merges);
  } catch (const tessel::Error&) {
  }
  return 0;
}
