// The Mixture-of-Experts router's kernels, after Megatron-LM's TopKRouter (moe_utils.py): top-k
// selection with its score functions, the switch load-balancing loss, the z-loss and the
// capacity drop. Rows are tokens; each row's math is router_rows.h's, which the CUDA kernels run
// too.
#include <algorithm>
#include <vector>

#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/router_rows.h"

namespace tessel::cpu {

void moe_topk_forward(int32_t* experts, float* probs, const float* logits, int64_t N, int64_t E,
                      int64_t k, RouterScore score, bool pre_softmax) {
  for (int64_t n = 0; n < N; ++n)
    router_rows::topk_forward(experts + n * k, probs + n * k, logits + n * E, E, k, score,
                              pre_softmax);
}

void moe_topk_backward(float* dlogits, const float* dprobs, const float* logits,
                       const int32_t* experts, const float* probs, int64_t N, int64_t E, int64_t k,
                       RouterScore score, bool pre_softmax) {
  for (int64_t n = 0; n < N; ++n)
    router_rows::topk_backward(dlogits + n * E, dprobs + n * k, logits + n * E, experts + n * k,
                               probs + n * k, E, k, score, pre_softmax);
}

void moe_aux_scores_forward(float* scores, const float* logits, int64_t N, int64_t E,
                            RouterScore score) {
  for (int64_t n = 0; n < N; ++n) router_rows::aux_scores(scores + n * E, logits + n * E, E, score);
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
  const double c = static_cast<double>(grad_scale) * coeff * E / (static_cast<double>(k) * T * T);
  for (int64_t n = 0; n < N; ++n)
    router_rows::aux_loss_backward(dlogits + n * E, logits + n * E, scores + n * E, counts, E, c,
                                   score);
}

double moe_z_loss_forward(float* lse, const float* logits, int64_t N, int64_t E, float coeff) {
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    lse[n] = router_rows::log_sum_exp(logits + n * E, E);
    total += static_cast<double>(lse[n]) * lse[n];
  }
  return N > 0 ? total * coeff / N : 0.0;
}

void moe_z_loss_backward(float* dlogits, const float* logits, const float* lse, int64_t N,
                         int64_t E, float coeff, float grad_scale) {
  for (int64_t n = 0; n < N; ++n) {
    const float scale = grad_scale * coeff * 2.0f * lse[n] / static_cast<float>(N);
    router_rows::z_loss_backward(dlogits + n * E, logits + n * E, lse[n], E, scale);
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

void moe_random_logits(float* logits, const int32_t* samples, const int32_t* positions, int64_t N, int64_t E,
                       uint64_t seed, uint32_t site) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e)
      logits[n * E + e] = router_rows::random_logit(seed, site, samples[n], positions[n], e);
}

}  // namespace tessel::cpu
