// The Mixture-of-Experts layer in double from Megatron-LM's definitions (the router's pieces in
// support/reference.h; get_capacity and Qwen2-MoE's shared expert here): what the layer tests
// hold the layer's outputs to and differentiate by central differences.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/gradient_check.h"
#include "support/reference.h"
#include "tessel/model/config.h"

namespace tessel::testing {

// --moe-router-force-load-balancing's logits as a function the reference can differentiate:
// values + x·Wᵀ − gate, gate the gate's output at the point differentiated (x·Wᵀ there), so
// the logits equal the random values there while their gradient reaches x and W straight through,
// as Megatron's RandomSTE passes it.
struct ForcedLogits {
  Vec values;  // (N, E) the random logits
  Vec gate;    // (N, E) x·Wᵀ at the point
};

// The layer's objective in double: out (N, C) flattened, then T · grad_scale · (aux + z) as one
// more element (so w = [dout, 1] weighs it as backward does). inputs: x, then the router's weight,
// each expert's gate, up and down projections, the shared expert's and its gate's. keep_out, when
// given, receives the capacity decisions; forced, when given, the logits in the gate's place.
inline Vec ref_layer(const MoeConfig& moe, int64_t N, int64_t C, int64_t F, double grad_scale,
                     const std::vector<Vec>& in, std::vector<int32_t>* keep_out = nullptr,
                     const ForcedLogits* forced = nullptr) {
  const int64_t E = moe.num_experts, k = moe.topk, Fs = moe.shared_expert_size;
  const Vec& x = in[0];
  Vec logits = ref::linear(x, in[1], {}, N, C, E, false);
  if (forced != nullptr)
    for (int64_t i = 0; i < N * E; ++i) logits[i] += forced->values[i] - forced->gate[i];
  const ref::Router r{
      .E = E, .k = k, .sigmoid = moe.score_sigmoid, .pre_softmax = moe.pre_softmax};
  const ref::Routing routing = ref::topk(r, logits, N);
  double aux = 0, z = 0;
  if (moe.aux_loss_coeff > 0) {
    Vec counts(E, 0.0);
    for (int32_t e : routing.experts) counts[e] += 1;
    aux = ref::aux_loss(ref::aux_scores(logits, N, E, moe.score_sigmoid), counts, N, E, k, N,
                       moe.aux_loss_coeff);
  }
  if (moe.z_loss_coeff > 0) z = ref::z_loss(logits, N, E, moe.z_loss_coeff);
  std::vector<int32_t> keep(N * k, 1);
  if (moe.capacity_factor > 0) {
    const int64_t capacity = std::min<int64_t>(
        N, static_cast<int64_t>(std::ceil(static_cast<double>(N * k) / E * moe.capacity_factor)));
    keep = ref::capacity_keep(routing.experts, Floats(routing.probs.begin(), routing.probs.end()),
                             capacity);
  }
  if (keep_out != nullptr) *keep_out = keep;
  Vec out(N * C + 1, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const Vec row(x.begin() + n * C, x.begin() + (n + 1) * C);
    for (int64_t j = 0; j < k; ++j) {
      if (!keep[n * k + j]) continue;
      const int64_t e = routing.experts[n * k + j];
      const Vec& g = in[2 + 3 * e];
      const Vec& u = in[3 + 3 * e];
      const Vec& d = in[4 + 3 * e];
      const Vec y = ref::linear(ref::swiglu(ref::linear(row, g, {}, 1, C, F, false),
                                            ref::linear(row, u, {}, 1, C, F, false)),
                                d, {}, 1, F, C, false);
      for (int64_t c = 0; c < C; ++c) out[n * C + c] += routing.probs[n * k + j] * y[c];
    }
    if (Fs > 0) {
      const size_t s = 2 + 3 * E;
      const Vec y = ref::linear(ref::swiglu(ref::linear(row, in[s], {}, 1, C, Fs, false),
                                            ref::linear(row, in[s + 1], {}, 1, C, Fs, false)),
                                in[s + 2], {}, 1, Fs, C, false);
      const double gate =
          moe.shared_expert_gate ? ref::sigmoid(ref::linear(row, in[s + 3], {}, 1, C, 1, false)[0]) : 1.0;
      for (int64_t c = 0; c < C; ++c) out[n * C + c] += gate * y[c];
    }
  }
  out[N * C] = static_cast<double>(N) * grad_scale * (aux + z);
  return out;
}

}  // namespace tessel::testing
