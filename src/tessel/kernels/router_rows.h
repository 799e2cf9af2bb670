// The Mixture-of-Experts router's math for one token's row (Megatron-LM's TopKRouter,
// moe_utils.py), shared by the backends: the CPU's kernels (cpu/router.cpp) loop over the rows,
// the CUDA kernels (cuda/router.cu) run one row per thread. E (experts) is small, so each row is
// a plain loop, and both backends do the same operations in the same order.
#pragma once

#include <cmath>
#include <cstdint>

#include "tessel/core/host_device.h"
#include "tessel/kernels/dropout.h"
#include "tessel/kernels/types.h"

namespace tessel::router_rows {

// Megatron adds this to sums it divides by (sigmoid scores), so an all-zero row stays finite.
constexpr float kNormEps = 1e-20f;

TESSEL_HOST_DEVICE inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

TESSEL_HOST_DEVICE inline float row_max(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = m < x[i] ? x[i] : m;
  return m;
}

// softmax(x) into out (n); out may equal x.
TESSEL_HOST_DEVICE inline void softmax(float* out, const float* x, int64_t n) {
  const float m = row_max(x, n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = expf(x[i] - m);
    sum += out[i];
  }
  for (int64_t i = 0; i < n; ++i) out[i] /= sum;
}

// Inserts (value, index) into the descending list best_val/best_idx of `count` entries, keeping
// at most k. Strict comparisons: an equal value never passes one already there, and experts are
// offered in index order, so ties go to the lower index.
TESSEL_HOST_DEVICE inline void offer(float* best_val, int32_t* best_idx, int64_t& count, int64_t k,
                                     float value, int32_t index) {
  if (count == k && !(value > best_val[k - 1])) return;
  int64_t pos = count < k ? count : k - 1;
  while (pos > 0 && value > best_val[pos - 1]) {
    best_val[pos] = best_val[pos - 1];
    best_idx[pos] = best_idx[pos - 1];
    --pos;
  }
  best_val[pos] = value;
  best_idx[pos] = index;
  if (count < k) ++count;
}

// One row of moe_topk_forward (cpu/kernels.h): experts (k), probs (k) from logits (E).
TESSEL_HOST_DEVICE inline void topk_forward(int32_t* idx, float* p, const float* l, int64_t E,
                                            int64_t k, RouterScore score, bool pre_softmax) {
  const bool full_softmax = score == RouterScore::Softmax && pre_softmax;
  // The softmax over all experts as scores, without storing the row: max and Σ exp first.
  float m = 0, sum = 1;
  if (full_softmax) {
    m = row_max(l, E);
    sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += expf(l[e] - m);
  }
  int64_t count = 0;
  for (int64_t e = 0; e < E; ++e) {
    float s = l[e];
    if (full_softmax) s = expf(l[e] - m) / sum;
    if (score == RouterScore::Sigmoid) s = sigmoid(l[e]);
    offer(p, idx, count, k, s, static_cast<int32_t>(e));
  }
  if (score == RouterScore::Softmax && !pre_softmax) {
    softmax(p, p, k);  // over the k selected logits
  } else if (score == RouterScore::Sigmoid && k > 1) {
    float total = 0;
    for (int64_t j = 0; j < k; ++j) total += p[j];
    for (int64_t j = 0; j < k; ++j) p[j] /= total + kNormEps;
  }
}

// One row of moe_topk_backward: dl (E) += d(probs)/d(logits) applied to g (k).
TESSEL_HOST_DEVICE inline void topk_backward(float* dl, const float* g, const float* l,
                                             const int32_t* idx, const float* p, int64_t E,
                                             int64_t k, RouterScore score, bool pre_softmax) {
  float pg = 0;  // Σ_j p_j · g_j
  for (int64_t j = 0; j < k; ++j) pg += p[j] * g[j];
  if (score == RouterScore::Softmax && !pre_softmax) {
    // p = softmax of the selected logits: d l_j = p_j (g_j - Σ p g).
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += p[j] * (g[j] - pg);
  } else if (score == RouterScore::Softmax) {
    // p_j = s[idx_j], s = softmax over all E: d l_e = s_e (G_e - Σ_j p_j g_j), G the scatter of g.
    const float m = row_max(l, E);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += expf(l[e] - m);
    for (int64_t e = 0; e < E; ++e) dl[e] -= expf(l[e] - m) / sum * pg;
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += p[j] * g[j];
  } else if (k == 1) {
    dl[idx[0]] += g[0] * p[0] * (1.0f - p[0]);  // p = sigmoid(l)
  } else {
    // p_j = σ_j / S, S = Σ_j σ_j + ε: d σ_j = (g_j - Σ p g) / S, d l_j = d σ_j · σ_j (1 - σ_j).
    float total = kNormEps;
    for (int64_t j = 0; j < k; ++j) total += sigmoid(l[idx[j]]);
    for (int64_t j = 0; j < k; ++j) {
      const float s = sigmoid(l[idx[j]]);
      dl[idx[j]] += (g[j] - pg) / total * s * (1.0f - s);
    }
  }
}

// One row of moe_aux_scores_forward: s (E) from l (E).
TESSEL_HOST_DEVICE inline void aux_scores(float* s, const float* l, int64_t E, RouterScore score) {
  if (score == RouterScore::Softmax) {
    softmax(s, l, E);
    return;
  }
  float total = 0;
  for (int64_t e = 0; e < E; ++e) {
    s[e] = sigmoid(l[e]);
    total += s[e];
  }
  for (int64_t e = 0; e < E; ++e) s[e] /= total + kNormEps;
}

// One row of moe_aux_loss_backward; c = grad_scale · coeff · E / (k · T²) in double, so that
// d(loss)/d(scores[n, e]) = c · counts[e] for every row.
TESSEL_HOST_DEVICE inline void aux_loss_backward(float* dl, const float* l, const float* s,
                                                 const float* counts, int64_t E, double c,
                                                 RouterScore score) {
  float sg = 0;  // Σ_e s_e · g_e
  for (int64_t e = 0; e < E; ++e) sg += s[e] * static_cast<float>(c * counts[e]);
  if (score == RouterScore::Softmax) {
    for (int64_t e = 0; e < E; ++e) dl[e] += s[e] * (static_cast<float>(c * counts[e]) - sg);
    return;
  }
  // s = σ / (Σσ + ε): d σ_e = (g_e - Σ s g) / (Σσ + ε), then through the sigmoid.
  float total = kNormEps;
  for (int64_t e = 0; e < E; ++e) total += sigmoid(l[e]);
  for (int64_t e = 0; e < E; ++e) {
    const float sig = sigmoid(l[e]);
    dl[e] += (static_cast<float>(c * counts[e]) - sg) / total * sig * (1.0f - sig);
  }
}

// log Σ_e exp(l[e]) (the z-loss's lse of one row).
TESSEL_HOST_DEVICE inline float log_sum_exp(const float* l, int64_t E) {
  const float m = row_max(l, E);
  float sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += expf(l[e] - m);
  return m + logf(sum);
}

// One row of moe_z_loss_backward: dl (E) += scale · softmax(l), scale = grad_scale · coeff ·
// 2 · lse / N.
TESSEL_HOST_DEVICE inline void z_loss_backward(float* dl, const float* l, float lse, int64_t E,
                                               float scale) {
  for (int64_t e = 0; e < E; ++e) dl[e] += scale * expf(l[e] - lse);
}

// ---- forced load balancing (--moe-router-force-load-balancing) ------------------------------------
// The site word of layer `layer`'s random logits: its MLP dropout site with index 1, where the
// residual sites' masks use index 0 (kernels/dropout.h), so the logits read no mask's bits.
TESSEL_HOST_DEVICE inline uint32_t random_logits_site(int layer) {
  return dropout_site(layer, DropoutKind::Mlp, 1);
}

// Expert e's logit for the token at (sample, position): a standard normal value by Box-Muller
// on lanes 0 and 1 of the Philox-4x32-10 block of counter (e, position, sample, site) under the
// key (seed), in double as core/philox.cpp's random_normal. Keyed by global coordinates only,
// so every layout draws the values one process draws (Megatron's come from its expert-parallel
// RNG tracker, and change with the layout).
TESSEL_HOST_DEVICE inline float random_logit(uint64_t seed, uint32_t site, int32_t sample, int32_t position,
                                             int64_t e) {
  uint32_t c0 = static_cast<uint32_t>(e), c1 = static_cast<uint32_t>(position), c2 = static_cast<uint32_t>(sample),
           c3 = site;
  philox4x32_rounds(c0, c1, c2, c3, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const double u1 = (static_cast<double>(c0) + 1.0) / 4294967296.0;  // (0, 1]: log(u1) is finite
  const double u2 = static_cast<double>(c1) / 4294967296.0;          // [0, 1)
  constexpr double kTwoPi = 6.283185307179586;
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(kTwoPi * u2));
}

}  // namespace tessel::router_rows
