// Dropout keyed by global coordinates (DESIGN invariant 1). Whether an element is kept is a pure
// function of (seed, site, the sample's index in the run, the row's position in the whole
// sequence, the feature): Philox-4x32-10 (Random123's, as core/philox.h) on the counter
// (feature / 4, position, sample, site) under the key (seed), lane feature % 4 of its output. No
// rank, split, schedule or recompute enters the key, so every layout — features split over TP,
// rows over SP and CP, samples over DP and microbatches — draws the mask one process draws, and
// a recomputed forward draws it again. One function for the CPU kernels and CUDA threads alike.
#pragma once

#include <cstdint>

#include "tessel/core/host_device.h"
#include "tessel/core/philox.h"

namespace tessel {

// Which dropout a mask belongs to: an embedding's output, a layer's mixer output (attention or
// Gated DeltaNet) or MLP / MoE output before the residual add, or a layer's attention
// probabilities (one site per query head).
enum class DropoutKind : uint32_t { Embedding = 0, Mixer = 1, Mlp = 2, AttentionProbs = 3 };

// The site word of the counter: (layer + 1) · 2^16 + kind · 2^14 + head. The model's embedding is
// layer −1 (site 0); multi-token prediction's embeddings and layers follow the decoder's layers.
// Layers below 2^16 − 1 and heads below 2^14 (the model's rules check both).
TESSEL_HOST_DEVICE inline uint32_t dropout_site(int layer, DropoutKind kind, int64_t head = 0) {
  return (static_cast<uint32_t>(layer + 1) << 16) | (static_cast<uint32_t>(kind) << 14) |
         static_cast<uint32_t>(head);
}

// One dropout call's mask: the probability, the key, and the rows' coordinates. p = 0 (or no
// samples: evaluation and inference) applies no dropout.
struct DropoutSite {
  float p = 0.0f;
  uint64_t seed = 0;
  uint32_t site = 0;
  const int32_t* samples = nullptr;    // (rows) each row's sample index in the run
  const int32_t* positions = nullptr;  // (rows) each row's position in the whole sequence
  // The residual sites: the first feature of these columns. Attention probabilities: the first
  // query head of these heads (the head enters the site word, the key's position the feature).
  int64_t feature_offset = 0;

  TESSEL_HOST_DEVICE bool active() const { return p > 0.0f && samples != nullptr; }
  // Elements whose 32 random bits fall below this are dropped: P(drop) = threshold / 2^32.
  TESSEL_HOST_DEVICE uint32_t threshold() const {
    const double t = static_cast<double>(p) * 4294967296.0;
    return t >= 4294967295.0 ? 0xffffffffu : static_cast<uint32_t>(t);
  }
  TESSEL_HOST_DEVICE float keep_scale() const { return 1.0f / (1.0f - p); }
};

// Lane `lane` of the Philox-4x32-10 block of counter (c0, c1, c2, c3) under key (k0, k1).
TESSEL_HOST_DEVICE inline uint32_t philox4x32_lane(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                                   uint32_t k0, uint32_t k1, int lane) {
  philox4x32_rounds(c0, c1, c2, c3, k0, k1);
  return lane == 0 ? c0 : lane == 1 ? c1 : lane == 2 ? c2 : c3;
}

// The 32 random bits of element (sample, position, feature) at the site.
TESSEL_HOST_DEVICE inline uint32_t dropout_bits(uint64_t seed, uint32_t site, int32_t sample, int32_t position,
                                                int64_t feature) {
  return philox4x32_lane(static_cast<uint32_t>(feature >> 2), static_cast<uint32_t>(position),
                         static_cast<uint32_t>(sample), site, static_cast<uint32_t>(seed),
                         static_cast<uint32_t>(seed >> 32), static_cast<int>(feature & 3));
}

// The factor element (row, feature) of a residual site is multiplied by: 0 when dropped, else
// 1/(1 − p); feature counted from site.feature_offset.
TESSEL_HOST_DEVICE inline float dropout_factor(const DropoutSite& site, int64_t row, int64_t feature) {
  const uint32_t bits = dropout_bits(site.seed, site.site, site.samples[row], site.positions[row],
                                     site.feature_offset + feature);
  return bits < site.threshold() ? 0.0f : site.keep_scale();
}

// The factor of the attention probability of query row `row` (at global position q_position) of
// head h (counted from site.feature_offset) for the key at global position k_position.
TESSEL_HOST_DEVICE inline float attention_dropout_factor(const DropoutSite& site, int64_t row, int32_t q_position,
                                                         int64_t h, int32_t k_position) {
  const uint32_t head_site = site.site + static_cast<uint32_t>(site.feature_offset + h);
  const uint32_t bits = dropout_bits(site.seed, head_site, site.samples[row], q_position, k_position);
  return bits < site.threshold() ? 0.0f : site.keep_scale();
}

}  // namespace tessel
