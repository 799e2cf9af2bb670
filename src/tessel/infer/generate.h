// Text generation from a trained model: autoregressive sampling with temperature and top-k.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessel/data/tokenizer.h"
#include "tessel/model/transformer.h"

namespace tessel {

struct GenerateOptions {
  std::string prompt;
  int64_t max_new_tokens = 200;
  float temperature = 0.8f;  // 0: greedy
  int64_t top_k = 40;        // 0: the whole vocabulary
  uint64_t seed = 1;
  bool ignore_eos = false;  // go on past the tokenizer's end-of-sequence (or -document) token
  std::optional<TokenizerOptions> tokenizer;  // given by flags; else the model folder's
};

// Throws one tessel::ConfigError listing every rule the options break: --max-new-tokens and
// --top-k must not be negative, --temperature must be a finite number ≥ 0.
void validate_generate_options(const GenerateOptions& options);

// The tokenizer to generate with: `given`, else the one saved in the model folder
// (tokenizer_in_folder), else the byte tokenizer.
std::unique_ptr<Tokenizer> model_tokenizer(const std::string& model_dir,
                                           const std::optional<TokenizerOptions>& given);

// Checks the options, loads `model_dir` (config.json + model.safetensors, as `tessel export` or
// --save-hf write), then generates with model_tokenizer until --max-new-tokens or the
// end-of-sequence token. `emit` gets the prompt as given once the model has loaded (a folder it
// cannot load prints nothing), then the text as soon as it is whole (a character split over
// tokens comes out once its last token is drawn).
void generate(const std::string& model_dir, const GenerateOptions& options,
              const std::function<void(const std::string&)>& emit);

// Draws up to --max-new-tokens tokens after `prompt` from `model` (a whole model of one process
// built for micro batch 1 with `k`, its weights loaded), decoding incrementally
// (infer/decoder.h), each from the first `vocab` logits; passes each to on_token as it is drawn.
// Stops before `stop` (-1: never).
void sample_continuation(const Kernels& k, TransformerChunk& model, const std::vector<int32_t>& prompt, int64_t vocab,
                         const GenerateOptions& options, int32_t stop,
                         const std::function<void(int32_t)>& on_token);

// Draws a token from logits (V) with temperature and top-k; `u` is uniform in (0, 1]: the token
// whose cumulative probability first reaches u. `scratch` is reused between calls.
int32_t sample_token(const float* logits, int64_t V, float temperature, int64_t top_k, float u,
                     std::vector<std::pair<float, int32_t>>& scratch);

}  // namespace tessel
