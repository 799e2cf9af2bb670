// Text generation from a trained model: autoregressive sampling with temperature and top-k.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tessel {

struct GenerateOptions {
  std::string prompt;
  int64_t max_new_tokens = 200;
  float temperature = 0.8f;  // 0: greedy
  int64_t top_k = 40;        // 0: the whole vocabulary
  uint64_t seed = 1;
};

// Loads `model_dir` (config.json + model.safetensors, as `tessel export` or --save-hf write),
// then generates; each new token's text is passed to `emit` as soon as it is drawn.
void generate(const std::string& model_dir, const GenerateOptions& options,
              const std::function<void(const std::string&)>& emit);

// Draws a token from logits (V) with temperature and top-k; `u` is uniform in (0, 1]: the token
// whose cumulative probability first reaches u. `scratch` is reused between calls.
int32_t sample_token(const float* logits, int64_t V, float temperature, int64_t top_k, float u,
                     std::vector<std::pair<float, int32_t>>& scratch);

}  // namespace tessel
