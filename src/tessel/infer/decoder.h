// Incremental decoding of one sequence: a prefill reads the prompt at once, then each new token is
// one step that reads only it. Every layer keeps what it carries from one position to the next
// (model/block.h: attention's keys and values, Gated DeltaNet's conv history and delta-rule
// state), so a step costs one token's forward instead of the whole context's, and its logits are
// those the forward of the whole sequence gives at that position.
//
// The context is the model's --seq-length positions. When the tokens read would pass it, the
// decoder slides: it forgets everything, keeps the last half of the context (all of the new tokens
// if they are more, at most a whole context) and reads those again in one prefill; decoding goes on
// from there. Generating past the context thus costs one prefill every seq_length / 2 tokens, and
// every token is drawn seeing between half a context and a whole one of the tokens before it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessel/model/transformer.h"

namespace tessel {

class Decoder {
 public:
  // `model`: a whole model (embedding and head) in one process, built for micro batch 1 with
  // `k`, which computes and holds the state (ChunkBuild::decoding: no memory for what decoding
  // does not use); it must outlive the decoder.
  Decoder(const Kernels& k, TransformerChunk& model);

  // Reads `tokens` after those read so far (sliding first when they do not fit, as above) and
  // returns the logits of the last of them: this rank's V_l entries, on the host.
  const std::vector<float>& read(std::span<const int32_t> tokens);

  // The tokens the state holds now, oldest first (at most seq_length).
  const std::vector<int32_t>& context() const { return context_; }
  // The positions the model reads at most: its --seq-length.
  int64_t context_size() const { return capacity_; }

 private:
  // Decodes `tokens`, which fit after the state's, and takes the last one's logits.
  void decode(std::span<const int32_t> tokens);

  TransformerChunk& model_;
  const Kernels& k_;
  int64_t capacity_;
  ChunkActivations acts_;    // the layers' scratch for one decode call
  ChunkDecodeState state_;
  Tensor tokens_;            // (seq_length) i32 the tokens of one decode call
  std::vector<int32_t> context_;
  std::vector<float> logits_;
};

}  // namespace tessel
