// Kernel cases: the Mixture-of-Experts token movement around the experts — counting and slotting
// the routed assignments, the permutation into dispatch order and the weighted combination back
// (gradients against finite differences of the double reference), and the choices packed for the
// capacity drop over a group of ranks.
#include <algorithm>

#include "kernels/harness.h"

namespace tessel::testing {
namespace {

// N tokens' k choices of E experts, some dropped (keep 0), and each kept assignment's row in
// dispatch order: experts in turn, assignments in order within an expert.
struct Routed {
  static constexpr int64_t N = 7, k = 2, E = 4, C = 5;
  Ints experts = random_indices(N * k, E, 200);
  Ints keep = Ints(N * k);
  Ints counts = Ints(E, 0);  // kept assignments per expert
  Ints first_row = Ints(E, 0);
  Ints slot_row = Ints(N * k, -1);
  int64_t kept = 0;

  Routed() {
    const Ints draw = random_indices(N * k, 4, 201);
    for (int64_t a = 0; a < N * k; ++a) keep[a] = draw[a] != 0;
    for (int64_t a = 0; a < N * k; ++a) counts[experts[a]] += keep[a];
    for (int64_t e = 1; e < E; ++e) first_row[e] = first_row[e - 1] + counts[e - 1];
    Ints cursor = first_row;
    for (int64_t a = 0; a < N * k; ++a)
      if (keep[a]) slot_row[a] = cursor[experts[a]]++;
    kept = std::count(keep.begin(), keep.end(), 1);
  }
};

void moe_count_assignments(const Kernels& kn) {
  const Routed r;
  ASSERT_GT(r.kept, 0);
  ASSERT_LT(r.kept, Routed::N * Routed::k);  // some assignments dropped
  const IntBuffer experts(kn, r.experts), keep(kn, r.keep);
  FloatBuffer counts(kn, Routed::E, 99.0f);  // overwritten
  kn.moe_count_assignments(counts.data(), experts.data(), keep.data(), Routed::N * Routed::k,
                           Routed::E);
  EXPECT_EQ(counts.host(), Floats(r.counts.begin(), r.counts.end()));
  kn.moe_count_assignments(counts.data(), experts.data(), nullptr, Routed::N * Routed::k,
                           Routed::E);
  Floats all(Routed::E, 0.0f);
  for (int32_t e : r.experts) all[e] += 1;
  EXPECT_EQ(counts.host(), all);
}

void moe_assign_slots(const Kernels& kn) {
  const Routed r;
  const IntBuffer experts(kn, r.experts), keep(kn, r.keep);
  IntBuffer cursor(kn, r.first_row), slot_row(kn, Routed::N * Routed::k, 77);
  kn.moe_assign_slots(slot_row.data(), cursor.data(), experts.data(), keep.data(),
                      Routed::N * Routed::k);
  EXPECT_EQ(slot_row.host(), r.slot_row);
  Ints end(Routed::E);
  for (int64_t e = 0; e < Routed::E; ++e) end[e] = r.first_row[e] + r.counts[e];
  EXPECT_EQ(cursor.host(), end);
}

// send row slot_row[a] = x row a/k for every kept assignment; the rows no assignment names (two
// spare ones here) keep what they held. The backward adds each row back to its token.
void moe_permute(const Kernels& kn) {
  constexpr int64_t N = Routed::N, k = Routed::k, C = Routed::C;
  const Routed r;
  const int64_t rows = r.kept + 2;
  const Floats x = random_floats(N * C, 202), before = random_floats(rows * C, 203);
  const auto reference = [&](const std::vector<Vec>& in) {  // in: x
    Vec send = to_double(before);
    for (int64_t a = 0; a < N * k; ++a)
      if (r.slot_row[a] >= 0)
        std::copy_n(in[0].begin() + a / k * C, C, send.begin() + r.slot_row[a] * C);
    return send;
  };
  const IntBuffer slot_row(kn, r.slot_row);
  const FloatBuffer d_x(kn, x);
  FloatBuffer send(kn, before);
  kn.moe_permute_forward(send.data(), d_x.data(), slot_row.data(), N, k, C);
  EXPECT_LT(relative_error(send.host(), reference({to_double(x)})), kForwardTolerance);

  const Floats w = random_floats(rows * C, 204);
  const FloatBuffer d_w(kn, w);
  check_backward(kn, reference, {x}, to_double(w), [&](const std::vector<float*>& g) {
    kn.moe_permute_backward(g[0], d_w.data(), slot_row.data(), N, k, C);
  });
}

// out row n = Σ_j probs[n, j] · combined row slot_row[n·k + j] over the kept choices (out is
// overwritten). The backward overwrites d_probs (0 for dropped choices) and the combined rows the
// kept assignments name; the spare rows keep what they held.
void moe_unpermute(const Kernels& kn) {
  constexpr int64_t N = Routed::N, k = Routed::k, C = Routed::C;
  const Routed r;
  const int64_t rows = r.kept + 2;
  const Floats combined = random_floats(rows * C, 205);
  const Floats probs = random_floats(N * k, 206, 0.3f, 0.5f);
  const auto reference = [&](const std::vector<Vec>& in) {  // in: combined, probs
    Vec out(N * C, 0.0);
    for (int64_t a = 0; a < N * k; ++a)
      if (r.slot_row[a] >= 0)
        for (int64_t c = 0; c < C; ++c)
          out[a / k * C + c] += in[1][a] * in[0][r.slot_row[a] * C + c];
    return out;
  };
  const std::vector<Vec> inputs = {to_double(combined), to_double(probs)};
  const IntBuffer slot_row(kn, r.slot_row);
  const FloatBuffer d_combined(kn, combined), d_probs(kn, probs);
  FloatBuffer out(kn, N * C, 123.0f);
  kn.moe_unpermute_forward(out.data(), d_combined.data(), d_probs.data(), slot_row.data(), N, k, C);
  EXPECT_LT(relative_error(out.host(), reference(inputs)), kForwardTolerance);

  const Floats w = random_floats(N * C, 207);
  const FloatBuffer d_w(kn, w);
  FloatBuffer dprobs(kn, N * k, 123.0f), dcombined(kn, rows * C, 123.0f);
  kn.moe_unpermute_backward(dprobs.data(), dcombined.data(), d_w.data(), d_combined.data(),
                            d_probs.data(), slot_row.data(), N, k, C);
  EXPECT_LT(relative_error(dprobs.host(), numerical_gradient(reference, inputs, 1, to_double(w))),
            kGradientTolerance);
  const Floats got = dcombined.host();
  const Vec want = numerical_gradient(reference, inputs, 0, to_double(w));
  EXPECT_LT(relative_error(Floats(got.begin(), got.begin() + r.kept * C),
                           Vec(want.begin(), want.begin() + r.kept * C)),
            kGradientTolerance);
  for (int64_t i = r.kept * C; i < rows * C; ++i) EXPECT_EQ(got[i], 123.0f) << "spare row";
}

// Each of G ranks packs its n choices as (2, n) = [experts as floats | probs]; the G packed
// blocks side by side (an all-gather) unpack into every rank's experts and probs in rank order.
void moe_pack_and_unpack_choices(const Kernels& kn) {
  const int64_t G = 3, n = 10;
  Floats packed;
  Ints all_experts;
  Floats all_probs;
  for (int64_t rank = 0; rank < G; ++rank) {
    const Ints experts = random_indices(n, 64, 210 + rank);
    const Floats probs = random_floats(n, 220 + rank);
    const IntBuffer d_experts(kn, experts);
    const FloatBuffer d_probs(kn, probs);
    FloatBuffer choices(kn, 2 * n);
    kn.moe_pack_choices(choices.data(), d_experts.data(), d_probs.data(), n);
    Floats want(experts.begin(), experts.end());
    want.insert(want.end(), probs.begin(), probs.end());
    const Floats got = choices.host();
    EXPECT_EQ(got, want) << "rank " << rank;
    packed.insert(packed.end(), got.begin(), got.end());
    all_experts.insert(all_experts.end(), experts.begin(), experts.end());
    all_probs.insert(all_probs.end(), probs.begin(), probs.end());
  }
  const FloatBuffer gathered(kn, packed);
  IntBuffer experts(kn, G * n, -5);
  FloatBuffer probs(kn, G * n);
  kn.moe_unpack_choices(experts.data(), probs.data(), gathered.data(), G, n);
  EXPECT_EQ(experts.host(), all_experts);
  EXPECT_EQ(probs.host(), all_probs);
}

const bool kRegistered = add_kernel_cases({
    {"moe_count_assignments", {"moe_count_assignments"}, moe_count_assignments},
    {"moe_assign_slots", {"moe_assign_slots"}, moe_assign_slots},
    {"moe_permute", {"moe_permute_forward", "moe_permute_backward"}, moe_permute},
    {"moe_unpermute", {"moe_unpermute_forward", "moe_unpermute_backward"}, moe_unpermute},
    {"moe_pack_and_unpack_choices", {"moe_pack_choices", "moe_unpack_choices"},
     moe_pack_and_unpack_choices},
});

}  // namespace
}  // namespace tessel::testing
