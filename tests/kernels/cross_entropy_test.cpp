// Kernel cases: the cross-entropy loss, whole or with the vocabulary split over shards (partial
// statistics, rescaled to the global maximum and finished into lse and the summed loss), against
// log-softmax in double.
#include <algorithm>
#include <cmath>

#include "kernels/harness.h"
#include "support/reference.h"

namespace tessel::testing {
namespace {

void cross_entropy(const Kernels& k) {
  const int64_t N = 5, V = 77;
  const float grad_scale = 0.37f;
  Floats logits = random_floats(N * V, 80, 4.0f);
  for (int64_t v = 0; v < V; ++v) logits[2 * V + v] += 1000.0f;  // exp overflows without the max
  for (int64_t v = 0; v < V; ++v) logits[3 * V + v] -= 1000.0f;
  const Ints targets = random_indices(N, V, 81);
  const FloatBuffer d_logits(k, logits);
  const IntBuffer d_targets(k, targets);

  FloatBuffer row_max(k, N), row_sumexp(k, N), target_logit(k, N);
  k.cross_entropy_partial_forward(row_max.data(), row_sumexp.data(), target_logit.data(),
                                  d_logits.data(), d_targets.data(), 0, N, V, V);
  const Floats rm = row_max.host(), rs = row_sumexp.host(), tl = target_logit.host();
  Floats losses(N), lse(N);
  for (int64_t n = 0; n < N; ++n) {
    lse[n] = rm[n] + std::log(rs[n]);
    losses[n] = lse[n] - tl[n];
  }
  const ref::CrossEntropyResult want = ref::cross_entropy(to_double(logits), targets, V);
  EXPECT_LT(relative_error(losses, want.losses), kForwardTolerance);
  EXPECT_LT(relative_error(lse, want.lse), kForwardTolerance);

  // dlogits = d(grad_scale · Σ losses) / dlogits; the rows offset by ±1000 are left out of the
  // finite differences, where h = 1e-6 is lost next to 1000 in double.
  const int64_t rows = 2;
  const Ints head_targets(targets.begin(), targets.begin() + rows);
  const Floats head(logits.begin(), logits.begin() + rows * V);
  const Vec expected = numerical_gradient(
      [&](const std::vector<Vec>& in) { return ref::cross_entropy(in[0], head_targets, V).losses; },
      {to_double(head)}, 0, Vec(rows, grad_scale));

  const FloatBuffer d_lse(k, lse);
  FloatBuffer d_dlogits(k, N * V, 123.0f);  // overwritten, whatever it held
  k.cross_entropy_backward(d_dlogits.data(), d_logits.data(), d_lse.data(), d_targets.data(), 0,
                           grad_scale, N, V, V);
  const Floats dlogits = d_dlogits.host();
  EXPECT_LT(relative_error(Floats(dlogits.begin(), dlogits.begin() + rows * V), expected),
            kGradientTolerance);
  // All rows, the offset ones included, against softmax - onehot in double. (Their float lse
  // near ±1000 is off by up to half an ulp, 3e-5, which scales their softmax.)
  Vec softmax_minus_onehot(N * V);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < V; ++v) {
      softmax_minus_onehot[n * V + v] =
          grad_scale * (std::exp(logits[n * V + v] - want.lse[n]) - (v == targets[n] ? 1 : 0));
    }
  }
  EXPECT_LT(relative_error(dlogits, softmax_minus_onehot), kGradientTolerance);

  FloatBuffer in_place(k, logits);
  k.cross_entropy_backward(in_place.data(), in_place.data(), d_lse.data(), d_targets.data(), 0,
                           grad_scale, N, V, V);
  EXPECT_EQ(in_place.host(), dlogits);
}

// The vectorised exp inside the loss, element by element: with lse = 0 and grad_scale = 1,
// dlogits = exp(logits) - onehot, and the argument of exp is exact.
void cross_entropy_exp_is_accurate(const Kernels& k) {
  const int64_t V = 4001;
  Floats logits(V);
  for (int64_t v = 0; v < V; ++v) logits[v] = -87.0f + 175.0f * v / (V - 1);  // the finite range
  const FloatBuffer d_logits(k, logits), lse(k, {0.0f});
  const IntBuffer targets(k, {0});
  FloatBuffer d_dlogits(k, V);
  k.cross_entropy_backward(d_dlogits.data(), d_logits.data(), lse.data(), targets.data(), 0, 1.0f,
                           1, V, V);
  const Floats dlogits = d_dlogits.host();
  double worst = 0;
  for (int64_t v = 1; v < V; ++v) {
    const double want = std::exp(static_cast<double>(logits[v]));
    worst = std::max(worst, std::abs(dlogits[v] - want) / want);
  }
  EXPECT_LT(worst, 3e-7);  // a few float ulps

  const FloatBuffer far(k, {-200.0f, -88.0f, 0.0f});  // below the float range: 0, not garbage
  FloatBuffer d_far(k, 3);
  k.cross_entropy_backward(d_far.data(), far.data(), lse.data(), targets.data(), 0, 1.0f, 1, 3, 3);
  const Floats dfar = d_far.host();
  EXPECT_EQ(dfar[0], -1.0f);
  EXPECT_LT(dfar[1], 1e-37f);
  EXPECT_EQ(dfar[2], 1.0f);
}

// Logits (N, V) as two vocabulary shards, the second padded with garbage that must not count:
// shard 0 holds columns 0..V0-1, shard 1 columns V0..V-1 and `pad` more.
struct Shards {
  static constexpr int64_t N = 4, V = 13, V0 = 7, pad = 3, V1 = V - V0 + pad;
  Floats logits = random_floats(N * V, 91, 3.0f);
  Ints targets = {0, 6, 7, 12};
  Floats s0 = Floats(N * V0), s1 = Floats(N * V1, 1e4f);

  // boost: added to row 1's logit in column V0 + 2, which lifts that row's maximum into shard 1.
  explicit Shards(float boost = 0.0f) {
    logits[1 * V + V0 + 2] += boost;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t v = 0; v < V0; ++v) s0[n * V0 + v] = logits[n * V + v];
      for (int64_t v = V0; v < V; ++v) s1[n * V1 + v - V0] = logits[n * V + v];
    }
  }
};

// Combining the shards' statistics (max, then rescaled sums) gives the whole row's lse and loss,
// and the shards' gradients are the whole row's gradient; padding columns neither count nor get
// a gradient.
void cross_entropy_over_vocabulary_shards(const Kernels& k) {
  const Shards s;
  constexpr int64_t N = Shards::N, V = Shards::V, V0 = Shards::V0, V1 = Shards::V1;
  const FloatBuffer logits(k, s.logits), s0(k, s.s0), s1(k, s.s1);
  const IntBuffer targets(k, s.targets);
  FloatBuffer rm(k, N), rs(k, N), tl(k, N);
  k.cross_entropy_partial_forward(rm.data(), rs.data(), tl.data(), logits.data(), targets.data(),
                                  0, N, V, V);
  const Floats row_max = rm.host(), row_sumexp = rs.host(), target_logit = tl.host();
  Floats lse(N);
  for (int64_t n = 0; n < N; ++n) lse[n] = row_max[n] + std::log(row_sumexp[n]);
  const FloatBuffer d_lse(k, lse);
  FloatBuffer d_whole(k, N * V);
  k.cross_entropy_backward(d_whole.data(), logits.data(), d_lse.data(), targets.data(), 0, 0.5f, N,
                           V, V);

  FloatBuffer m0(k, N), e0(k, N), t0(k, N), m1(k, N), e1(k, N), t1(k, N);
  k.cross_entropy_partial_forward(m0.data(), e0.data(), t0.data(), s0.data(), targets.data(), 0, N,
                                  V0, V0);
  k.cross_entropy_partial_forward(m1.data(), e1.data(), t1.data(), s1.data(), targets.data(), V0,
                                  N, V1, V - V0);
  const Floats max0 = m0.host(), sum0 = e0.host(), target0 = t0.host();
  const Floats max1 = m1.host(), sum1 = e1.host(), target1 = t1.host();
  Floats shard_lse(N);
  for (int64_t n = 0; n < N; ++n) {
    const float m = std::max(max0[n], max1[n]);
    shard_lse[n] = m + std::log(sum0[n] * std::exp(max0[n] - m) + sum1[n] * std::exp(max1[n] - m));
    EXPECT_NEAR(shard_lse[n], lse[n], 1e-5f * std::abs(lse[n]) + 1e-6f);
    EXPECT_EQ(target0[n] + target1[n], target_logit[n]);  // exactly one shard holds the target
  }
  const FloatBuffer d_shard_lse(k, shard_lse);
  FloatBuffer d0(k, N * V0), d1(k, N * V1);
  k.cross_entropy_backward(d0.data(), s0.data(), d_shard_lse.data(), targets.data(), 0, 0.5f, N,
                           V0, V0);
  k.cross_entropy_backward(d1.data(), s1.data(), d_shard_lse.data(), targets.data(), V0, 0.5f, N,
                           V1, V - V0);
  const Floats whole = d_whole.host(), g0 = d0.host(), g1 = d1.host();
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < V0; ++v) EXPECT_NEAR(g0[n * V0 + v], whole[n * V + v], 1e-6f);
    for (int64_t v = V0; v < V; ++v) EXPECT_NEAR(g1[n * V1 + v - V0], whole[n * V + v], 1e-6f);
    for (int64_t v = V - V0; v < V1; ++v) EXPECT_EQ(g1[n * V1 + v], 0.0f);
  }
}

// vocab_parallel_cross_entropy's combination through the kernels: each shard's sum of exps
// rescaled to the global maximum, the sums and target logits added over shards, then finished
// into lse (N) and Σ_n lse − target logit, against log-softmax over the whole row in double.
void cross_entropy_rescale_and_finish(const Kernels& k) {
  const Shards s(10.0f);
  constexpr int64_t N = Shards::N, V = Shards::V, V0 = Shards::V0, V1 = Shards::V1;
  const FloatBuffer s0(k, s.s0), s1(k, s.s1);
  const IntBuffer targets(k, s.targets);
  FloatBuffer m0(k, N), e0(k, N), t0(k, N), m1(k, N), e1(k, N), t1(k, N);
  k.cross_entropy_partial_forward(m0.data(), e0.data(), t0.data(), s0.data(), targets.data(), 0, N,
                                  V0, V0);
  k.cross_entropy_partial_forward(m1.data(), e1.data(), t1.data(), s1.data(), targets.data(), V0,
                                  N, V1, V - V0);
  const Floats max0 = m0.host(), max1 = m1.host(), target0 = t0.host(), target1 = t1.host();
  Floats global_max(N), target_logit(N);
  for (int64_t n = 0; n < N; ++n) {
    global_max[n] = std::max(max0[n], max1[n]);
    target_logit[n] = target0[n] + target1[n];
  }
  const FloatBuffer d_global_max(k, global_max), d_target_logit(k, target_logit);
  k.cross_entropy_rescale(e0.data(), m0.data(), d_global_max.data(), N);
  k.cross_entropy_rescale(e1.data(), m1.data(), d_global_max.data(), N);
  const Floats sum0 = e0.host(), sum1 = e1.host();
  Floats sumexp(N);
  for (int64_t n = 0; n < N; ++n) sumexp[n] = sum0[n] + sum1[n];
  const FloatBuffer d_sumexp(k, sumexp);
  FloatBuffer lse(k, N, 7.0f);
  const double loss_sum = k.cross_entropy_finish(lse.data(), d_global_max.data(), d_sumexp.data(),
                                                 d_target_logit.data(), targets.data(), N);

  const ref::CrossEntropyResult want = ref::cross_entropy(to_double(s.logits), s.targets, V);
  EXPECT_LT(relative_error(lse.host(), want.lse), kForwardTolerance);
  double want_sum = 0;
  for (double loss : want.losses) want_sum += loss;
  EXPECT_NEAR(loss_sum, want_sum, kForwardTolerance * want_sum);
  // The maximum of some rows lies in shard 0, of others in shard 1: both rescale paths ran.
  int from_shard_1 = 0;
  for (int64_t n = 0; n < N; ++n) from_shard_1 += max1[n] > max0[n];
  EXPECT_GT(from_shard_1, 0);
  EXPECT_LT(from_shard_1, N);
}

// A target of -1 leaves its row out of the loss: no loss in the sum, a zero gradient row; the
// other rows as without it.
void cross_entropy_ignores_masked_targets(const Kernels& k) {
  constexpr int64_t N = 5, V = 7;
  const Floats logits = random_floats(N * V, 17, 3.0f);
  std::vector<int32_t> targets = {3, -1, 0, 6, -1};
  const FloatBuffer d_logits(k, logits);
  const IntBuffer d_targets(k, targets);
  FloatBuffer row_max(k, N), sumexp(k, N), target_logit(k, N), lse(k, N);
  k.cross_entropy_partial_forward(row_max.data(), sumexp.data(), target_logit.data(), d_logits.data(),
                                  d_targets.data(), 0, N, V, V);
  const double loss_sum = k.cross_entropy_finish(lse.data(), row_max.data(), sumexp.data(),
                                                 target_logit.data(), d_targets.data(), N);
  FloatBuffer dlogits(k, N * V, 9.0f);
  k.cross_entropy_backward(dlogits.data(), d_logits.data(), lse.data(), d_targets.data(), 0, 0.5f,
                           N, V, V);
  std::vector<int32_t> kept_targets = targets;
  for (int32_t& t : kept_targets) t = t < 0 ? 0 : t;
  const ref::CrossEntropyResult want = ref::cross_entropy(to_double(logits), kept_targets, V);
  double want_sum = 0;
  for (int64_t n = 0; n < N; ++n) want_sum += targets[n] < 0 ? 0.0 : want.losses[n];
  EXPECT_NEAR(loss_sum, want_sum, kForwardTolerance * want_sum);
  const Floats d = dlogits.host();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) {
      if (targets[n] < 0) {
        EXPECT_EQ(d[n * V + v], 0.0f) << "row " << n;
        continue;
      }
      const double p = std::exp(logits[n * V + v] - want.lse[n]);
      EXPECT_NEAR(d[n * V + v], 0.5 * (p - (v == targets[n])), 1e-6) << "row " << n;
    }
}

const bool kRegistered = add_kernel_cases({
    {"cross_entropy_ignores_masked_targets",
     {"cross_entropy_partial_forward", "cross_entropy_finish", "cross_entropy_backward"},
     cross_entropy_ignores_masked_targets},
    {"cross_entropy", {"cross_entropy_partial_forward", "cross_entropy_backward"}, cross_entropy},
    {"cross_entropy_exp_is_accurate", {"cross_entropy_backward"}, cross_entropy_exp_is_accurate},
    {"cross_entropy_over_vocabulary_shards",
     {"cross_entropy_partial_forward", "cross_entropy_backward"},
     cross_entropy_over_vocabulary_shards},
    {"cross_entropy_rescale_and_finish",
     {"cross_entropy_partial_forward", "cross_entropy_rescale", "cross_entropy_finish"},
     cross_entropy_rescale_and_finish},
});

}  // namespace
}  // namespace tessel::testing
