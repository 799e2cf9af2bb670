#include "tessel/infer/decoder.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel {

Decoder::Decoder(const Kernels& k, TransformerChunk& model)
    : model_(model),
      k_(k),
      capacity_(model.local_rows()),
      acts_(model.make_activations()),
      state_(model.make_decode_state()),
      tokens_(k.zeros({capacity_}, DType::I32)) {}

const std::vector<float>& Decoder::read(std::span<const int32_t> tokens) {
  TESSEL_CHECK(!tokens.empty(), "decoder: nothing to read");
  if (state_.length + static_cast<int64_t>(tokens.size()) <= capacity_) {
    decode(tokens);
    return logits_;
  }
  // Slide: the last half of the context (or all the new tokens, at most a context), read again.
  context_.insert(context_.end(), tokens.begin(), tokens.end());
  const int64_t kept = std::min<int64_t>(capacity_, std::max<int64_t>(capacity_ / 2, tokens.size()));
  std::vector<int32_t> window(context_.end() - kept, context_.end());
  context_.clear();
  state_ = model_.make_decode_state();
  decode(window);
  return logits_;
}

void Decoder::decode(std::span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  k_.memory.from_host(tokens_.ints(), tokens.data(), n * 4);
  model_.decode(acts_, state_, tokens_.ints(), n);
  context_.insert(context_.end(), tokens.begin(), tokens.end());
  const int64_t V = model_.vocab_shard_size();
  logits_.resize(V);
  k_.memory.to_host(logits_.data(), model_.logits(), V * 4);
}

}  // namespace tessel
