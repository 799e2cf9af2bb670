#include "tessel/infer/generate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessel/ckpt/finite_weights.h"
#include "tessel/ckpt/hf.h"
#include "tessel/ckpt/hf_import.h"
#include "tessel/core/error.h"
#include "tessel/core/philox.h"
#include "tessel/data/tokenizer.h"
#include "tessel/data/tokenizer_files.h"
#include "tessel/data/utf8.h"
#include "tessel/infer/decoder.h"
#include "tessel/model/transformer.h"

namespace tessel {

void validate_generate_options(const GenerateOptions& o) {
  std::vector<std::string> v;
  if (o.max_new_tokens < 0)
    v.push_back(fmt::format("--max-new-tokens {} must not be negative", o.max_new_tokens));
  if (o.top_k < 0) v.push_back(fmt::format("--top-k {} must not be negative (0: every token)", o.top_k));
  if (!(std::isfinite(o.temperature) && o.temperature >= 0))
    v.push_back(fmt::format("--temperature {} must be a finite number ≥ 0 (0: greedy)", o.temperature));
  if (!v.empty()) throw ConfigError(fmt::format("invalid generate options: {}", fmt::join(v, "; ")));
}

int32_t sample_token(const float* logits, int64_t V, float temperature, int64_t top_k, float u,
                     std::vector<std::pair<float, int32_t>>& scratch) {
  scratch.clear();
  for (int64_t v = 0; v < V; ++v) scratch.emplace_back(logits[v], static_cast<int32_t>(v));
  const int64_t k = top_k > 0 ? std::min(top_k, V) : V;
  std::partial_sort(scratch.begin(), scratch.begin() + k, scratch.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  if (temperature <= 0) return scratch[0].second;
  const float max_logit = scratch[0].first;
  double total = 0;
  for (int64_t i = 0; i < k; ++i) {
    scratch[i].first = static_cast<float>(std::exp((scratch[i].first - max_logit) / temperature));
    total += scratch[i].first;
  }
  double target = u * total, acc = 0;
  for (int64_t i = 0; i < k; ++i) {
    acc += scratch[i].first;
    if (acc >= target) return scratch[i].second;
  }
  return scratch[k - 1].second;
}

void sample_continuation(const Kernels& k, TransformerChunk& model, const std::vector<int32_t>& prompt, int64_t vocab,
                         const GenerateOptions& o, int32_t stop,
                         const std::function<void(int32_t)>& on_token) {
  Decoder decoder(k, model);
  std::vector<std::pair<float, int32_t>> scratch;
  scratch.reserve(vocab);
  const uint64_t stream = fnv1a64("generate");
  int32_t token = -1;
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    // The prompt first, then each drawn token alone.
    const std::vector<float>& logits =
        step == 0 ? decoder.read(prompt) : decoder.read(std::span<const int32_t>(&token, 1));
    // The padded vocabulary rows past the tokenizer's are never drawn.
    token = sample_token(logits.data(), vocab, o.temperature, o.top_k, random_uniform(o.seed, stream, step),
                         scratch);
    if (token == stop) return;
    on_token(token);
  }
}

std::unique_ptr<Tokenizer> model_tokenizer(const std::string& model_dir,
                                           const std::optional<TokenizerOptions>& given) {
  const auto null_type = [](const TokenizerOptions& o) { return canonical_tokenizer_type(o.type) == "NullTokenizer"; };
  std::optional<TokenizerOptions> found;
  if (!given || null_type(*given)) found = tokenizer_in_folder(model_dir);
  if (!given && !found) return std::make_unique<ByteTokenizer>();
  TokenizerOptions o = given ? *given : *found;
  if (null_type(o)) {
    // A NullTokenizer is only its vocabulary size, and generate has no --vocab-size: the
    // folder's is taken (--save-hf and export write it).
    TESSEL_CHECK(found && null_type(*found) && found->vocab_size > 0,
                 "{}: a NullTokenizer's vocabulary size is read from the folder's tokenizer_config.json "
                 "(tessel_tokenizer.vocab_size, written by --save-hf and export), and it has none", model_dir);
    o.vocab_size = found->vocab_size;
  }
  return make_tokenizer(o);
}

void generate(const std::string& model_dir, const GenerateOptions& o,
              const std::function<void(const std::string&)>& emit) {
  validate_generate_options(o);
  std::optional<ModelConfig> found = hf_config_beside(model_dir);
  TESSEL_CHECK(found.has_value(), "{}: no config.json (expected a folder written by tessel export "
               "or --save-hf)", model_dir);
  ModelConfig cfg = *found;
  const std::unique_ptr<Tokenizer> tokenizer = model_tokenizer(model_dir, o.tokenizer);
  TESSEL_CHECK(cfg.vocab_size >= tokenizer->vocab_size(),
               "{}: the model's vocabulary {} is smaller than the {}'s {}", model_dir,
               cfg.vocab_size, tokenizer->type(), tokenizer->vocab_size());

  // One sequence of the model's context, decoded incrementally (infer/decoder.h). A capacity drop
  // is a training step's (which tokens lose their place depends on the batch): generation routes
  // every token to its top-k experts.
  cfg.moe.capacity_factor = 0;
  cfg.moe.pad_to_capacity = false;
  const Kernels& k = cpu_kernels();
  ParamRegistry params;
  TransformerChunk model(k, params, cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}, .decoding = true},
                         ChunkGroups::one_process(k));
  params.finalize(k.memory);
  model.bind(params);
  load_hf_weights(params, cfg, model_dir);
  require_finite_weights(k, params, model_dir);

  std::vector<int32_t> prompt = tokenizer->encode(o.prompt.empty() ? "\n" : o.prompt);
  TESSEL_CHECK(!prompt.empty(), "the prompt encodes to no tokens");
  const SpecialIds ids = tokenizer->special_ids();
  const int32_t stop = o.ignore_eos ? -1 : ids.eos >= 0 ? ids.eos : ids.eod;
  // The new tokens are decoded together and after the prompt, so that a character split over
  // tokens (byte-level BPE, byte fallback) comes out whole, and what joins them to the prompt
  // too (NullTokenizer's space between ids, a SentencePiece word's leading space); what follows
  // the prompt's own text is emitted once no later token can change it, and bytes that are no
  // text as U+FFFD.
  emit(o.prompt);
  std::vector<int32_t> tokens = prompt;
  size_t shown = tokenizer->decode(prompt).size();
  sample_continuation(k, model, prompt, tokenizer->vocab_size(), o, stop, [&](int32_t token) {
    tokens.push_back(token);
    const std::string text = tokenizer->decode(tokens);
    const size_t complete = complete_utf8_prefix(text);
    if (complete > shown) {
      emit(replace_invalid_utf8(std::string_view(text).substr(shown, complete - shown)));
      shown = complete;
    }
  });
  const std::string text = tokenizer->decode(tokens);
  if (text.size() > shown) emit(replace_invalid_utf8(std::string_view(text).substr(shown)));
}

}  // namespace tessel
