// The Mixture-of-Experts router's kernels, after Megatron-LM's TopKRouter (moe_utils.py): top-k
// selection with its score functions, the switch load-balancing loss, the z-loss and the
// capacity drop. Rows are tokens; E (experts) is small, so each row is one plain loop.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tessel/kernels/cpu/kernels.h"

namespace tessel::cpu {
namespace {

// Megatron adds this to sums it divides by (sigmoid scores), so an all-zero row stays finite.
constexpr float kNormEps = 1e-20f;

inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

inline float row_max(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// softmax(x) into out (n); out may equal x.
void softmax_row(float* out, const float* x, int64_t n) {
  const float m = row_max(x, n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::exp(x[i] - m);
    sum += out[i];
  }
  for (int64_t i = 0; i < n; ++i) out[i] /= sum;
}

// Inserts (value, index) into the descending list best_val/best_idx of `count` entries, keeping
// at most k. Strict comparisons: an equal value never passes one already there, and experts are
// offered in index order, so ties go to the lower index.
void offer(float* best_val, int32_t* best_idx, int64_t& count, int64_t k, float value,
           int32_t index) {
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

}  // namespace

void moe_topk_forward(int32_t* experts, float* probs, const float* logits, int64_t N, int64_t E,
                      int64_t k, RouterScore score, bool pre_softmax) {
  const bool full_softmax = score == RouterScore::Softmax && pre_softmax;
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits + n * E;
    float* p = probs + n * k;
    int32_t* idx = experts + n * k;
    // The softmax over all experts as scores, without storing the row: max and Σ exp first.
    float m = 0, sum = 1;
    if (full_softmax) {
      m = row_max(l, E);
      sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += std::exp(l[e] - m);
    }
    int64_t count = 0;
    for (int64_t e = 0; e < E; ++e) {
      float s = l[e];
      if (full_softmax) s = std::exp(l[e] - m) / sum;
      if (score == RouterScore::Sigmoid) s = sigmoidf(l[e]);
      offer(p, idx, count, k, s, static_cast<int32_t>(e));
    }
    if (score == RouterScore::Softmax && !pre_softmax) {
      softmax_row(p, p, k);  // over the k selected logits
    } else if (score == RouterScore::Sigmoid && k > 1) {
      float total = 0;
      for (int64_t j = 0; j < k; ++j) total += p[j];
      for (int64_t j = 0; j < k; ++j) p[j] /= total + kNormEps;
    }
  }
}

void moe_topk_backward(float* dlogits, const float* dprobs, const float* logits,
                       const int32_t* experts, const float* probs, int64_t N, int64_t E, int64_t k,
                       RouterScore score, bool pre_softmax) {
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits + n * E;
    const float* g = dprobs + n * k;
    const float* p = probs + n * k;
    const int32_t* idx = experts + n * k;
    float* dl = dlogits + n * E;
    float pg = 0;  // Σ_j p_j · g_j
    for (int64_t j = 0; j < k; ++j) pg += p[j] * g[j];
    if (score == RouterScore::Softmax && !pre_softmax) {
      // p = softmax of the selected logits: d l_j = p_j (g_j - Σ p g).
      for (int64_t j = 0; j < k; ++j) dl[idx[j]] += p[j] * (g[j] - pg);
    } else if (score == RouterScore::Softmax) {
      // p_j = s[idx_j], s = softmax over all E: d l_e = s_e (G_e - Σ_j p_j g_j), G the scatter of
      // g.
      const float m = row_max(l, E);
      float sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += std::exp(l[e] - m);
      for (int64_t e = 0; e < E; ++e) dl[e] -= std::exp(l[e] - m) / sum * pg;
      for (int64_t j = 0; j < k; ++j) dl[idx[j]] += p[j] * g[j];
    } else if (k == 1) {
      dl[idx[0]] += g[0] * p[0] * (1.0f - p[0]);  // p = sigmoid(l)
    } else {
      // p_j = σ_j / S, S = Σ_j σ_j + ε: d σ_j = (g_j - Σ p g) / S,
      // d l_j = d σ_j · σ_j (1 - σ_j).
      float total = kNormEps;
      for (int64_t j = 0; j < k; ++j) total += sigmoidf(l[idx[j]]);
      for (int64_t j = 0; j < k; ++j) {
        const float s = sigmoidf(l[idx[j]]);
        dl[idx[j]] += (g[j] - pg) / total * s * (1.0f - s);
      }
    }
  }
}

void moe_aux_scores_forward(float* scores, const float* logits, int64_t N, int64_t E,
                            RouterScore score) {
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits + n * E;
    float* s = scores + n * E;
    if (score == RouterScore::Softmax) {
      softmax_row(s, l, E);
    } else {
      float total = 0;
      for (int64_t e = 0; e < E; ++e) {
        s[e] = sigmoidf(l[e]);
        total += s[e];
      }
      for (int64_t e = 0; e < E; ++e) s[e] /= total + kNormEps;
    }
  }
}

double moe_aux_loss_forward(const float* scores, const float* counts, int64_t N, int64_t E,
                            int64_t k, int64_t T, float coeff) {
  if (T == 0) return 0.0;
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t e = 0; e < E; ++e) total += static_cast<double>(scores[n * E + e]) * counts[e];
  }
  return total * coeff * E / (static_cast<double>(k) * T * T);
}

void moe_aux_loss_backward(float* dlogits, const float* logits, const float* scores,
                           const float* counts, int64_t N, int64_t E, int64_t k, int64_t T,
                           float coeff, float grad_scale, RouterScore score) {
  // d(loss)/d(scores[n, e]) = c · counts[e], the same for every row.
  const double c = static_cast<double>(grad_scale) * coeff * E / (static_cast<double>(k) * T * T);
  for (int64_t n = 0; n < N; ++n) {
    const float* s = scores + n * E;
    float* dl = dlogits + n * E;
    float sg = 0;  // Σ_e s_e · g_e
    for (int64_t e = 0; e < E; ++e) sg += s[e] * static_cast<float>(c * counts[e]);
    if (score == RouterScore::Softmax) {
      for (int64_t e = 0; e < E; ++e) dl[e] += s[e] * (static_cast<float>(c * counts[e]) - sg);
    } else {
      // s = σ / (Σσ + ε): d σ_e = (g_e - Σ s g) / (Σσ + ε), then through the sigmoid.
      const float* l = logits + n * E;
      float total = kNormEps;
      for (int64_t e = 0; e < E; ++e) total += sigmoidf(l[e]);
      for (int64_t e = 0; e < E; ++e) {
        const float sig = sigmoidf(l[e]);
        dl[e] += (static_cast<float>(c * counts[e]) - sg) / total * sig * (1.0f - sig);
      }
    }
  }
}

double moe_z_loss_forward(float* lse, const float* logits, int64_t N, int64_t E, float coeff) {
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits + n * E;
    const float m = row_max(l, E);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(l[e] - m);
    lse[n] = m + std::log(sum);
    total += static_cast<double>(lse[n]) * lse[n];
  }
  return N > 0 ? total * coeff / N : 0.0;
}

void moe_z_loss_backward(float* dlogits, const float* logits, const float* lse, int64_t N,
                         int64_t E, float coeff, float grad_scale) {
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits + n * E;
    float* dl = dlogits + n * E;
    const float scale = grad_scale * coeff * 2.0f * lse[n] / static_cast<float>(N);
    for (int64_t e = 0; e < E; ++e) dl[e] += scale * std::exp(l[e] - lse[n]);
  }
}

int64_t moe_capacity_drop(int32_t* keep, const int32_t* experts, const float* probs, int64_t N,
                          int64_t E, int64_t k, int64_t capacity) {
  const int64_t A = N * k;  // assignments, a = n·k + j
  std::fill(keep, keep + A, 1);
  // Counting sort of the assignments by expert (stable, so each expert's are in token order).
  thread_local std::vector<int64_t> order, start;
  order.resize(A);
  start.assign(E + 1, 0);
  for (int64_t a = 0; a < A; ++a) ++start[experts[a] + 1];
  for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
  for (int64_t a = 0; a < A; ++a) order[start[experts[a]]++] = a;
  for (int64_t e = E; e > 0; --e) start[e] = start[e - 1];
  start[0] = 0;

  int64_t dropped = 0;
  for (int64_t e = 0; e < E; ++e) {
    int64_t* first = order.data() + start[e];
    int64_t* last = order.data() + start[e + 1];
    if (last - first <= capacity) continue;
    // Highest prob first; equal probs keep token order (assignment index order).
    std::sort(first, last, [&](int64_t a, int64_t b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    });
    for (int64_t* a = first + capacity; a < last; ++a) keep[*a] = 0;
    dropped += (last - first) - capacity;
  }
  return dropped;
}

}  // namespace tessel::cpu
