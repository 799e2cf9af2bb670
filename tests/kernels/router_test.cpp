// Kernel cases: the Mixture-of-Experts router (Megatron-LM's TopKRouter: top-k selection by
// softmax, pre-softmax or sigmoid scores, the load-balancing and z losses, the "probs" capacity
// drop) against the double reference of support/reference.h, gradients against central finite
// differences of it.
#include <algorithm>
#include <cmath>

#include "kernels/harness.h"
#include "support/reference.h"

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

const bool kRegistered = add_kernel_cases({
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
