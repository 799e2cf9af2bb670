// Kernel cases: the Mixture-of-Experts router (Megatron-LM's TopKRouter: top-k selection by
// softmax, pre-softmax or sigmoid scores, the load-balancing and z losses, the "probs" capacity
// drop) against the double reference of support/reference.h, gradients against central finite
// differences of it.
#include <algorithm>
#include <cmath>

#include "kernels/harness.h"
#include "support/reference.h"
#include "tessel/kernels/router_rows.h"

namespace tessel::testing {
namespace {

constexpr uint64_t kRouterSeed = 77001;

Floats router_floats(int64_t n, uint64_t stream, float scale = 1.0f) {
  return random_floats(n, stream, scale, 0.0f, kRouterSeed);
}

struct RouterCase {
  const char* name;
  RouterScore score;
  bool pre_softmax;
  int64_t k;
};

const RouterCase kRouterCases[] = {{"softmax top-3", RouterScore::Softmax, false, 3},
                                   {"pre-softmax top-2", RouterScore::Softmax, true, 2},
                                   {"pre-softmax top-1", RouterScore::Softmax, true, 1},
                                   {"sigmoid top-3", RouterScore::Sigmoid, false, 3},
                                   {"sigmoid top-1", RouterScore::Sigmoid, false, 1}};

ref::Router ref_router(const RouterCase& c, int64_t E) {
  return {
      .E = E, .k = c.k, .sigmoid = c.score == RouterScore::Sigmoid, .pre_softmax = c.pre_softmax};
}

void topk_matches_reference(const Kernels& k) {
  const int64_t N = 13, E = 7;
  const Floats logits = router_floats(N * E, 1, 2.0f);
  const FloatBuffer d_logits(k, logits);
  for (const RouterCase& c : kRouterCases) {
    IntBuffer experts(k, N * c.k);
    FloatBuffer probs(k, N * c.k);
    k.moe_topk_forward(experts.data(), probs.data(), d_logits.data(), N, E, c.k, c.score,
                       c.pre_softmax);
    const ref::Routing want = ref::topk(ref_router(c, E), to_double(logits), N);
    EXPECT_EQ(experts.host(), want.experts) << c.name;
    EXPECT_LT(relative_error(probs.host(), want.probs), kForwardTolerance) << c.name;
  }
}

void topk_backward_matches_finite_differences(const Kernels& k) {
  const int64_t N = 9, E = 6;
  const Floats logits = router_floats(N * E, 2, 2.0f);
  const FloatBuffer d_logits(k, logits);
  for (const RouterCase& c : kRouterCases) {
    const ref::Router r = ref_router(c, E);
    const Floats w = router_floats(N * c.k, 3);
    const FloatBuffer d_w(k, w);
    IntBuffer experts(k, N * c.k);
    FloatBuffer probs(k, N * c.k);
    k.moe_topk_forward(experts.data(), probs.data(), d_logits.data(), N, E, c.k, c.score,
                       c.pre_softmax);
    // Starts from nonzero values: the kernel adds to them.
    const Floats before = router_floats(N * E, 4);
    FloatBuffer d_dlogits(k, before);
    k.moe_topk_backward(d_dlogits.data(), d_w.data(), d_logits.data(), experts.data(),
                        probs.data(), N, E, c.k, c.score, c.pre_softmax);
    Floats dlogits = d_dlogits.host();
    for (size_t i = 0; i < dlogits.size(); ++i) dlogits[i] -= before[i];
    const Vec want =
        numerical_gradient([&](const std::vector<Vec>& in) { return ref::topk(r, in[0], N).probs; },
                           {to_double(logits)}, 0, to_double(w));
    EXPECT_LT(relative_error(dlogits, want), kGradientTolerance) << c.name;
  }
}

void ties_go_to_the_lower_expert_index(const Kernels& k) {
  const FloatBuffer logits(k, {1.0f, 3.0f, 3.0f, 2.0f, 3.0f});
  for (const RouterCase& c : kRouterCases) {
    IntBuffer experts(k, c.k);
    FloatBuffer probs(k, c.k);
    k.moe_topk_forward(experts.data(), probs.data(), logits.data(), 1, 5, c.k, c.score,
                       c.pre_softmax);
    const Ints want = {1, 2, 4};
    EXPECT_EQ(experts.host(), Ints(want.begin(), want.begin() + c.k)) << c.name;
  }
}

void aux_loss_and_gradient_match_reference(const Kernels& k) {
  const int64_t N = 8, E = 5, topk = 2, T = 20;  // T > N: other ranks hold the rest of the sequence
  const float coeff = 0.37f, grad_scale = 1.7f;
  const Floats logits = router_floats(N * E, 5, 1.5f);
  const Floats counts = {7, 0, 12, 9, 12};  // Σ = T · k
  const FloatBuffer d_logits(k, logits), d_counts(k, counts);
  for (RouterScore score : {RouterScore::Softmax, RouterScore::Sigmoid}) {
    const bool sig = score == RouterScore::Sigmoid;
    FloatBuffer scores(k, N * E);
    k.moe_aux_scores_forward(scores.data(), d_logits.data(), N, E, score);
    const Vec want_scores = ref::aux_scores(to_double(logits), N, E, sig);
    EXPECT_LT(relative_error(scores.host(), want_scores), kForwardTolerance);
    const double loss =
        k.moe_aux_loss_forward(scores.data(), d_counts.data(), N, E, topk, T, coeff);
    const double want = ref::aux_loss(want_scores, to_double(counts), N, E, topk, T, coeff);
    EXPECT_NEAR(loss, want, 1e-6 * std::abs(want));

    FloatBuffer d_dlogits(k, N * E, 0.5f);
    k.moe_aux_loss_backward(d_dlogits.data(), d_logits.data(), scores.data(), d_counts.data(), N,
                            E, topk, T, coeff, grad_scale, score);
    Floats dlogits = d_dlogits.host();
    for (float& d : dlogits) d -= 0.5f;
    const Vec fd = numerical_gradient(
        [&](const std::vector<Vec>& in) {
          return Vec{ref::aux_loss(ref::aux_scores(in[0], N, E, sig), to_double(counts), N, E,
                                   topk, T, coeff)};
        },
        {to_double(logits)}, 0, Vec{grad_scale});
    EXPECT_LT(relative_error(dlogits, fd), kGradientTolerance) << (sig ? "sigmoid" : "softmax");
  }
}

void z_loss_and_gradient_match_reference(const Kernels& k) {
  const int64_t N = 7, E = 6;
  const float coeff = 0.01f, grad_scale = 3.0f;
  const Floats logits = router_floats(N * E, 6, 3.0f);
  const FloatBuffer d_logits(k, logits);
  FloatBuffer lse(k, N);
  const double loss = k.moe_z_loss_forward(lse.data(), d_logits.data(), N, E, coeff);
  const double want = ref::z_loss(to_double(logits), N, E, coeff);
  EXPECT_NEAR(loss, want, 1e-6 * want);
  FloatBuffer dlogits(k, N * E);
  k.moe_z_loss_backward(dlogits.data(), d_logits.data(), lse.data(), N, E, coeff, grad_scale);
  const Vec fd = numerical_gradient(
      [&](const std::vector<Vec>& in) { return Vec{ref::z_loss(in[0], N, E, coeff)}; },
      {to_double(logits)}, 0, Vec{grad_scale});
  EXPECT_LT(relative_error(dlogits.host(), fd), kGradientTolerance);
}

// Quantised probs make ties common, so the token-order tie-break is exercised too.
void capacity_drop_matches_brute_force(const Kernels& k) {
  const int64_t N = 40, E = 6, topk = 2;
  const FloatBuffer logits(k, router_floats(N * E, 7, 1.5f));
  IntBuffer experts(k, N * topk);
  FloatBuffer d_probs(k, N * topk);
  k.moe_topk_forward(experts.data(), d_probs.data(), logits.data(), N, E, topk,
                     RouterScore::Softmax, false);
  Floats probs = d_probs.host();
  for (float& p : probs) p = std::round(p * 8.0f) / 8.0f;
  d_probs.set(probs);
  for (int64_t capacity : {0, 1, 3, 7, 13, 40}) {
    IntBuffer keep(k, N * topk, 7);
    const int64_t dropped = k.moe_capacity_drop(keep.data(), experts.data(), d_probs.data(), N, E,
                                                topk, capacity);
    const Ints want = ref::capacity_keep(experts.host(), probs, capacity);
    EXPECT_EQ(keep.host(), want) << "capacity " << capacity;
    EXPECT_EQ(dropped, std::count(want.begin(), want.end(), 0)) << "capacity " << capacity;
  }
}

// --moe-router-force-load-balancing's logits: exactly the row math's values (the CUDA threads run
// it as the CPU does), which are Box-Muller on the Philox block of counter (expert, position,
// sample, site) under the seed; standard normal in mean, variance and the mass within one
// standard deviation; the same for the same coordinates wherever the row sits, and others for
// another layer's site or another seed.
void random_logits_are_keyed_standard_normals(const Kernels& k) {
  const int64_t N = 512, E = 16;
  const uint64_t seed = 0x0000000900000011ull;
  const uint32_t site = router_rows::random_logits_site(2);
  EXPECT_EQ(site, (3u << 16) | (2u << 14) | 1u);  // layer 2's MLP site, index 1 (dropout's: 0)
  Ints samples(N), positions(N);
  for (int64_t n = 0; n < N; ++n) samples[n] = static_cast<int32_t>(7 + n / 64), positions[n] = static_cast<int32_t>(n % 64);
  const IntBuffer d_samples(k, samples), d_positions(k, positions);
  FloatBuffer logits(k, N * E);
  k.moe_random_logits(logits.data(), d_samples.data(), d_positions.data(), N, E, seed, site);
  const Floats got = logits.host();

  const PhiloxCounter block = philox4x32({5, 17, 7, site}, {0x11, 0x9});
  const double u1 = (block[0] + 1.0) / 4294967296.0, u2 = block[1] / 4294967296.0;
  EXPECT_FLOAT_EQ(got[17 * E + 5], static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2)));
  double sum = 0, squares = 0, within_one = 0, same_other_layer = 0, same_other_seed = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e) {
      const float v = got[n * E + e];
      EXPECT_EQ(v, router_rows::random_logit(seed, site, samples[n], positions[n], e)) << n << ", " << e;
      sum += v, squares += static_cast<double>(v) * v, within_one += std::abs(v) < 1.0f;
      same_other_layer += v == router_rows::random_logit(seed, router_rows::random_logits_site(3), samples[n],
                                                         positions[n], e);
      same_other_seed += v == router_rows::random_logit(seed + 1, site, samples[n], positions[n], e);
    }
  const double count = static_cast<double>(N * E), mean = sum / count;
  EXPECT_LT(std::abs(mean), 0.05);  // 6 standard errors of 8192 draws' mean
  EXPECT_NEAR(squares / count - mean * mean, 1.0, 0.1);
  EXPECT_NEAR(within_one / count, 0.6827, 0.03);
  EXPECT_EQ(same_other_layer, 0);
  EXPECT_EQ(same_other_seed, 0);

  // Row 3's coordinates given as row 0's: row 0 draws row 3's values.
  const IntBuffer moved_samples(k, {samples[3]}), moved_positions(k, {positions[3]});
  FloatBuffer one_row(k, E);
  k.moe_random_logits(one_row.data(), moved_samples.data(), moved_positions.data(), 1, E, seed, site);
  EXPECT_EQ(one_row.host(), Floats(got.begin() + 3 * E, got.begin() + 4 * E));
}

const bool kRegistered = add_kernel_cases({
    {"moe_random_logits_are_keyed_standard_normals", {"moe_random_logits"},
     random_logits_are_keyed_standard_normals},
    {"moe_topk_matches_reference", {"moe_topk_forward"}, topk_matches_reference},
    {"moe_topk_backward_matches_finite_differences", {"moe_topk_forward", "moe_topk_backward"},
     topk_backward_matches_finite_differences},
    {"moe_topk_ties_go_to_the_lower_expert_index", {"moe_topk_forward"},
     ties_go_to_the_lower_expert_index},
    {"moe_aux_loss_and_gradient_match_reference",
     {"moe_aux_scores_forward", "moe_aux_loss_forward", "moe_aux_loss_backward"},
     aux_loss_and_gradient_match_reference},
    {"moe_z_loss_and_gradient_match_reference", {"moe_z_loss_forward", "moe_z_loss_backward"},
     z_loss_and_gradient_match_reference},
    {"moe_capacity_drop_matches_brute_force", {"moe_topk_forward", "moe_capacity_drop"},
     capacity_drop_matches_brute_force},
});

}  // namespace
}  // namespace tessel::testing
