// One harness for the CPU kernels (the idea of ggml's test-backend-ops): each kernel's float
// forward is compared with a double-precision reference (kernel_reference.h), and its backward
// with central finite differences of that reference, for the objective Σ out · w with a fixed
// random w (so dout = w). The same cases also check the conventions of kernels.h: backward adds
// into gradients, skips nullptr ones, and the in-place kernels overwrite.
#include "tessel/kernels/cpu/kernels.h"

#include <gtest/gtest.h>

#include "support/gradient_check.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/reference.h"
#include "tessel/core/error.h"
#include "tessel/core/philox.h"

namespace tessel::cpu {
namespace {

using ref::Vec;
using Floats = std::vector<float>;

constexpr uint64_t kSeed = 20240611;
constexpr double kForwardTolerance = 1e-5;
constexpr double kGradientTolerance = 1e-4;

// offset + scale · N(0, 1), element i of Philox stream `stream`.
Floats random_floats(int64_t n, uint64_t stream, float scale = 1.0f, float offset = 0.0f) {
  Floats x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = offset + scale * random_normal(kSeed, stream, i);
  return x;
}

std::vector<int32_t> random_indices(int64_t n, int32_t bound, uint64_t stream) {
  std::vector<int32_t> idx(n);
  for (int64_t i = 0; i < n; ++i)
    idx[i] = static_cast<int32_t>(random_bits(kSeed, stream, i) % bound);
  return idx;
}

Vec to_double(const Floats& x) { return Vec(x.begin(), x.end()); }

using tessel::testing::dot;
using tessel::testing::numerical_gradient;
using tessel::testing::Reference;
using tessel::testing::relative_error;

// Runs a kernel's backward with dout = w, writing into grads[k] for input k (nullptr: skip it).
using Backward = std::function<void(const std::vector<float*>& grads)>;

// Checks every gradient of an accumulating backward against finite differences, and that
// - two calls, starting from random nonzero buffers, add exactly twice the gradient to them;
// - with only one gradient requested (the others nullptr) that gradient is still right.
void check_backward(const Reference& f, const std::vector<Floats>& inputs, const Vec& w,
                    const Backward& backward) {
  std::vector<Vec> inputs64;
  for (const Floats& x : inputs) inputs64.push_back(to_double(x));
  std::vector<Vec> expected;
  for (size_t k = 0; k < inputs.size(); ++k) {
    expected.push_back(numerical_gradient(f, inputs64, k, w));
  }

  std::vector<Floats> base, grads;
  std::vector<float*> pointers;
  for (size_t k = 0; k < inputs.size(); ++k) {
    base.push_back(random_floats(static_cast<int64_t>(inputs[k].size()), 900 + k));
    grads.push_back(base[k]);
    pointers.push_back(grads[k].data());
  }
  backward(pointers);
  backward(pointers);
  for (size_t k = 0; k < inputs.size(); ++k) {
    Floats added(grads[k].size());
    for (size_t i = 0; i < added.size(); ++i) added[i] = (grads[k][i] - base[k][i]) / 2;
    EXPECT_LT(relative_error(added, expected[k]), kGradientTolerance)
        << "gradient " << k << ", accumulated twice";
  }

  for (size_t k = 0; k < inputs.size(); ++k) {
    Floats alone(inputs[k].size(), 0.0f);
    std::vector<float*> only(inputs.size(), nullptr);
    only[k] = alone.data();
    backward(only);
    EXPECT_LT(relative_error(alone, expected[k]), kGradientTolerance)
        << "gradient " << k << ", requested alone";
  }
}

// ---- embeddings ----------------------------------------------------------------------------

TEST(Kernels, Embedding) {
  const int64_t N = 9, C = 21, vocab = 5, max_pos = 7;  // few tokens: rows repeat
  const std::vector<int32_t> tokens = random_indices(N, vocab, 1);
  const std::vector<int32_t> positions = random_indices(N, max_pos, 2);
  const Floats wte = random_floats(vocab * C, 3), wpe = random_floats(max_pos * C, 4);
  const Floats w = random_floats(N * C, 5);

  Floats out(N * C);
  embedding_forward(out.data(), tokens.data(), positions.data(), wte.data(), wpe.data(), N, C);
  EXPECT_LT(
      relative_error(out, ref::embedding(to_double(wte), to_double(wpe), tokens, positions, C)),
      kForwardTolerance);
  check_backward(
      [&](const std::vector<Vec>& in) {
        return ref::embedding(in[0], in[1], tokens, positions, C);
      },
      {wte, wpe}, to_double(w),
      [&](const std::vector<float*>& g) {
        embedding_backward(g[0], g[1], w.data(), tokens.data(), positions.data(), N, C);
      });

  // Without learned positions (Llama): positions may be null.
  embedding_forward(out.data(), tokens.data(), nullptr, wte.data(), nullptr, N, C);
  EXPECT_LT(relative_error(out, ref::embedding(to_double(wte), {}, tokens, positions, C)),
            kForwardTolerance);
  check_backward(
      [&](const std::vector<Vec>& in) { return ref::embedding(in[0], {}, tokens, {}, C); }, {wte},
      to_double(w),
      [&](const std::vector<float*>& g) {
        embedding_backward(g[0], nullptr, w.data(), tokens.data(), nullptr, N, C);
      });
}

// ---- norms ---------------------------------------------------------------------------------

TEST(Kernels, LayerNorm) {
  const int64_t N = 7, C = 37;  // C not a multiple of the vector width
  const float eps = 1e-5f;
  const Floats inp = random_floats(N * C, 10, 2.0f, 0.5f);
  const Floats weight = random_floats(C, 11, 0.2f, 1.0f), bias = random_floats(C, 12, 0.2f);
  const Floats w = random_floats(N * C, 13);

  Floats out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N,
                    C, eps);
  const ref::NormResult want =
      ref::layernorm(to_double(inp), to_double(weight), to_double(bias), N, C, eps);
  EXPECT_LT(relative_error(out, want.out), kForwardTolerance);
  EXPECT_LT(relative_error(mean, want.mean), kForwardTolerance);
  EXPECT_LT(relative_error(rstd, want.rstd), kForwardTolerance);

  check_backward(
      [&](const std::vector<Vec>& in) {
        return ref::layernorm(in[0], in[1], in[2], N, C, eps).out;
      },
      {inp, weight, bias}, to_double(w),
      [&](const std::vector<float*>& g) {
        layernorm_backward(g[0], g[1], g[2], w.data(), inp.data(), weight.data(), mean.data(),
                           rstd.data(), N, C);
      });
}

TEST(Kernels, RmsNorm) {
  const int64_t N = 7, C = 37;
  const float eps = 1e-6f;
  const Floats inp = random_floats(N * C, 20, 2.0f, 0.5f);
  const Floats weight = random_floats(C, 21, 0.2f, 1.0f);
  const Floats w = random_floats(N * C, 22);

  Floats out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps);
  const ref::NormResult want = ref::rmsnorm(to_double(inp), to_double(weight), N, C, eps);
  EXPECT_LT(relative_error(out, want.out), kForwardTolerance);
  EXPECT_LT(relative_error(rstd, want.rstd), kForwardTolerance);

  check_backward(
      [&](const std::vector<Vec>& in) { return ref::rmsnorm(in[0], in[1], N, C, eps).out; },
      {inp, weight}, to_double(w),
      [&](const std::vector<float*>& g) {
        rmsnorm_backward(g[0], g[1], w.data(), inp.data(), weight.data(), rstd.data(), N, C);
      });
}

// dweight/dbias sum over rows split among threads: the result must not change between runs.
TEST(Kernels, NormBackwardIsDeterministic) {
  const int64_t N = 301, C = 96;
  const Floats inp = random_floats(N * C, 30), w = random_floats(N * C, 31);
  const Floats weight = random_floats(C, 32, 0.2f, 1.0f), bias = random_floats(C, 33);
  Floats out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N,
                    C, 1e-5f);
  Floats first_dweight(C, 0.0f), first_dbias(C, 0.0f);
  layernorm_backward(nullptr, first_dweight.data(), first_dbias.data(), w.data(), inp.data(),
                     weight.data(), mean.data(), rstd.data(), N, C);
  for (int run = 0; run < 5; ++run) {
    Floats dweight(C, 0.0f), dbias(C, 0.0f);
    layernorm_backward(nullptr, dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(),
                       mean.data(), rstd.data(), N, C);
    EXPECT_EQ(dweight, first_dweight);
    EXPECT_EQ(dbias, first_dbias);
  }
}

// ---- activations ---------------------------------------------------------------------------

TEST(Kernels, Gelu) {
  const int64_t n = 203;
  Floats inp = random_floats(n, 40, 3.0f);
  inp[0] = 12.0f;  // saturated tails and the origin
  inp[1] = -12.0f;
  inp[2] = 0.0f;
  inp[3] = 1e-4f;
  const Floats w = random_floats(n, 41);

  Floats out(n);
  gelu_forward(out.data(), inp.data(), n);
  EXPECT_LT(relative_error(out, ref::gelu(to_double(inp))), kForwardTolerance);
  check_backward(
      [&](const std::vector<Vec>& in) { return ref::gelu(in[0]); }, {inp}, to_double(w),
      [&](const std::vector<float*>& g) { gelu_backward(g[0], w.data(), inp.data(), n); });
}

TEST(Kernels, SwiGlu) {
  const int64_t n = 203;
  Floats gate = random_floats(n, 50, 3.0f);
  gate[0] = 30.0f;
  gate[1] = -30.0f;
  const Floats up = random_floats(n, 51), w = random_floats(n, 52);

  Floats out(n);
  swiglu_forward(out.data(), gate.data(), up.data(), n);
  EXPECT_LT(relative_error(out, ref::swiglu(to_double(gate), to_double(up))), kForwardTolerance);
  check_backward([&](const std::vector<Vec>& in) { return ref::swiglu(in[0], in[1]); }, {gate, up},
                 to_double(w),
                 [&](const std::vector<float*>& g) {
                   swiglu_backward(g[0], g[1], w.data(), gate.data(), up.data(), n);
                 });
}

// ---- linear --------------------------------------------------------------------------------

TEST(Kernels, Linear) {
  const int64_t N = 5, IC = 19, OC = 23;
  const Floats inp = random_floats(N * IC, 60), weight = random_floats(IC * OC, 61, 0.3f);
  const Floats bias = random_floats(OC, 62), w = random_floats(N * OC, 63);
  for (WeightLayout layout : {WeightLayout::InOut, WeightLayout::OutIn}) {
    const bool in_out = layout == WeightLayout::InOut;
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(in_out ? "InOut" : "OutIn") + (with_bias ? ", bias" : ", no bias"));
      Floats out(N * OC, 7.0f);  // forward overwrites
      linear_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N,
                     IC, OC, layout);
      const Vec bias64 = with_bias ? to_double(bias) : Vec();
      EXPECT_LT(relative_error(
                    out, ref::linear(to_double(inp), to_double(weight), bias64, N, IC, OC, in_out)),
                kForwardTolerance);

      std::vector<Floats> inputs = {inp, weight};
      if (with_bias) inputs.push_back(bias);
      check_backward(
          [&](const std::vector<Vec>& in) {
            return ref::linear(in[0], in[1], with_bias ? in[2] : Vec(), N, IC, OC, in_out);
          },
          inputs, to_double(w),
          [&](const std::vector<float*>& g) {
            linear_backward(g[0], g[1], with_bias ? g[2] : nullptr, w.data(), inp.data(),
                            weight.data(), N, IC, OC, layout);
          });
    }
  }
}

// ---- rotary position embedding -------------------------------------------------------------

TEST(Kernels, RopeTables) {
  const int64_t max_pos = 97, D = 12;
  const float base = 10000.0f;
  Floats cos(max_pos * D / 2), sin(max_pos * D / 2);
  rope_tables(cos.data(), sin.data(), max_pos, D, base);
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < D / 2; ++i) {
      // Hugging Face's float angle, up to float rounding of cos and sin ...
      const double angle = ref::rope_angle(p, i, D, base);
      EXPECT_NEAR(cos[p * D / 2 + i], std::cos(angle), 2e-7);
      EXPECT_NEAR(sin[p * D / 2 + i], std::sin(angle), 2e-7);
      // ... which is p · base^(-2i/D) up to float rounding of the angle.
      const double exact = p * std::pow(static_cast<double>(base), -2.0 * i / D);
      EXPECT_NEAR(sin[p * D / 2 + i], std::sin(exact), 1e-7 * (p + 1));
    }
  }
}

TEST(Kernels, Rope) {
  const int64_t N = 6, heads = 3, D = 10, ld = heads * D + 7, max_pos = 64;  // padded rows
  const float base = 500.0f;
  const std::vector<int32_t> positions = {0, 63, 5, 17, 5, 42};
  Floats cos(max_pos * D / 2), sin(max_pos * D / 2);
  rope_tables(cos.data(), sin.data(), max_pos, D, base);
  const Floats x = random_floats(N * ld, 70), w = random_floats(N * ld, 71);
  const auto reference = [&](const std::vector<Vec>& in) {
    return ref::rope(in[0], positions, heads, D, ld, base);
  };

  Floats rotated = x;  // in place; the padding after heads·D must come out unchanged
  rope_forward(rotated.data(), positions.data(), cos.data(), sin.data(), N, heads, D, ld);
  EXPECT_LT(relative_error(rotated, reference({to_double(x)})), kForwardTolerance);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = heads * D; j < ld; ++j) EXPECT_EQ(rotated[n * ld + j], x[n * ld + j]);
  }

  // Backward turns d(x') = w into d(x), in place (it overwrites: no accumulation).
  Floats grad = w;
  rope_backward(grad.data(), positions.data(), cos.data(), sin.data(), N, heads, D, ld);
  const Vec expected = numerical_gradient(reference, {to_double(x)}, 0, to_double(w));
  EXPECT_LT(relative_error(grad, expected), kGradientTolerance);

  // A rotation and its transpose undo each other.
  rope_backward(rotated.data(), positions.data(), cos.data(), sin.data(), N, heads, D, ld);
  EXPECT_LT(relative_error(rotated, to_double(x)), kForwardTolerance);
}

// ---- loss ----------------------------------------------------------------------------------

TEST(Kernels, CrossEntropy) {
  const int64_t N = 5, V = 77;
  const float grad_scale = 0.37f;
  Floats logits = random_floats(N * V, 80, 4.0f);
  for (int64_t v = 0; v < V; ++v) logits[2 * V + v] += 1000.0f;  // exp overflows without the max
  for (int64_t v = 0; v < V; ++v) logits[3 * V + v] -= 1000.0f;
  const std::vector<int32_t> targets = random_indices(N, V, 81);

  Floats losses(N), lse(N), row_max(N), row_sumexp(N), target_logit(N);
  cross_entropy_partial_forward(row_max.data(), row_sumexp.data(), target_logit.data(),
                                logits.data(), targets.data(), 0, N, V, V);
  for (int64_t n = 0; n < N; ++n) {
    lse[n] = row_max[n] + std::log(row_sumexp[n]);
    losses[n] = lse[n] - target_logit[n];
  }
  const ref::CrossEntropyResult want = ref::cross_entropy(to_double(logits), targets, V);
  EXPECT_LT(relative_error(losses, want.losses), kForwardTolerance);
  EXPECT_LT(relative_error(lse, want.lse), kForwardTolerance);

  // dlogits = d(grad_scale · Σ losses) / dlogits; the rows offset by ±1000 are left out of the
  // finite differences, where h = 1e-6 is lost next to 1000 in double.
  const int64_t rows = 2;
  const std::vector<int32_t> head_targets(targets.begin(), targets.begin() + rows);
  const Floats head(logits.begin(), logits.begin() + rows * V);
  const Vec expected = numerical_gradient(
      [&](const std::vector<Vec>& in) { return ref::cross_entropy(in[0], head_targets, V).losses; },
      {to_double(head)}, 0, Vec(rows, grad_scale));

  Floats dlogits(N * V, 123.0f);  // overwritten, whatever it held
  cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), 0, grad_scale,
                         N, V, V);
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

  Floats in_place = logits;
  cross_entropy_backward(in_place.data(), in_place.data(), lse.data(), targets.data(), 0,
                         grad_scale, N, V, V);
  EXPECT_EQ(in_place, dlogits);
}

// The vectorised exp inside the loss, element by element: with lse = 0 and grad_scale = 1,
// dlogits = exp(logits) - onehot, and the argument of exp is exact.
TEST(Kernels, CrossEntropyExpIsAccurate) {
  const int64_t V = 4001;
  Floats logits(V);
  for (int64_t v = 0; v < V; ++v) logits[v] = -87.0f + 175.0f * v / (V - 1);  // the finite range
  const std::vector<int32_t> targets = {0};
  const Floats lse = {0.0f};
  Floats dlogits(V);
  cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), 0, 1.0f, 1, V,
                         V);
  double worst = 0;
  for (int64_t v = 1; v < V; ++v) {
    const double want = std::exp(static_cast<double>(logits[v]));
    worst = std::max(worst, std::abs(dlogits[v] - want) / want);
  }
  EXPECT_LT(worst, 3e-7);  // a few float ulps

  const Floats far = {-200.0f, -88.0f, 0.0f};  // below the float range: 0, not garbage
  Floats dfar(3);
  cross_entropy_backward(dfar.data(), far.data(), lse.data(), targets.data(), 0, 1.0f, 1, 3, 3);
  EXPECT_EQ(dfar[0], -1.0f);
  EXPECT_LT(dfar[1], 1e-37f);
  EXPECT_EQ(dfar[2], 1.0f);
}

// The vocabulary split over two shards, the second padded: combining the shards' statistics
// (max, then rescaled sums) gives the whole row's lse and loss, and the shards' gradients are the
// whole row's gradient; padding columns neither count nor get a gradient.
TEST(Kernels, CrossEntropyOverVocabularyShards) {
  const int64_t N = 4, V = 13, V0 = 7, pad = 3;  // shard 0: columns 0..6; shard 1: 7..12 + 3 pad
  const Floats logits = random_floats(N * V, 91, 3.0f);
  const std::vector<int32_t> targets = {0, 6, 7, 12};
  Floats rm(N), rs(N), tl(N), lse(N);
  cross_entropy_partial_forward(rm.data(), rs.data(), tl.data(), logits.data(), targets.data(), 0,
                                N, V, V);
  for (int64_t n = 0; n < N; ++n) lse[n] = rm[n] + std::log(rs[n]);
  Floats whole(N * V);
  cross_entropy_backward(whole.data(), logits.data(), lse.data(), targets.data(), 0, 0.5f, N, V, V);

  const int64_t V1 = V - V0 + pad;
  Floats s0(N * V0), s1(N * V1, 1e4f);  // padding holds garbage that must not count
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < V0; ++v) s0[n * V0 + v] = logits[n * V + v];
    for (int64_t v = V0; v < V; ++v) s1[n * V1 + v - V0] = logits[n * V + v];
  }
  Floats m0(N), e0(N), t0(N), m1(N), e1(N), t1(N);
  cross_entropy_partial_forward(m0.data(), e0.data(), t0.data(), s0.data(), targets.data(), 0, N,
                                V0, V0);
  cross_entropy_partial_forward(m1.data(), e1.data(), t1.data(), s1.data(), targets.data(), V0, N,
                                V1, V - V0);
  Floats shard_lse(N);
  for (int64_t n = 0; n < N; ++n) {
    const float m = std::max(m0[n], m1[n]);
    shard_lse[n] = m + std::log(e0[n] * std::exp(m0[n] - m) + e1[n] * std::exp(m1[n] - m));
    EXPECT_NEAR(shard_lse[n], lse[n], 1e-5f * std::abs(lse[n]) + 1e-6f);
    EXPECT_EQ(t0[n] + t1[n], tl[n]);  // exactly one shard holds the target
  }
  Floats d0(N * V0), d1(N * V1);
  cross_entropy_backward(d0.data(), s0.data(), shard_lse.data(), targets.data(), 0, 0.5f, N, V0, V0);
  cross_entropy_backward(d1.data(), s1.data(), shard_lse.data(), targets.data(), V0, 0.5f, N, V1,
                         V - V0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < V0; ++v) EXPECT_NEAR(d0[n * V0 + v], whole[n * V + v], 1e-6f);
    for (int64_t v = V0; v < V; ++v) EXPECT_NEAR(d1[n * V1 + v - V0], whole[n * V + v], 1e-6f);
    for (int64_t v = V - V0; v < V1; ++v) EXPECT_EQ(d1[n * V1 + v], 0.0f);
  }
}

// A token id of -1 belongs to another tensor-parallel rank: a zero row, no gradient.
TEST(Kernels, EmbeddingSkipsOtherRanksTokens) {
  const int64_t C = 3;
  const Floats wte = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> tokens = {1, -1, 0};
  Floats out(3 * C, 9.0f), dwte(2 * C, 0.0f);
  embedding_forward(out.data(), tokens.data(), nullptr, wte.data(), nullptr, 3, C);
  EXPECT_EQ(out, (Floats{4, 5, 6, 0, 0, 0, 1, 2, 3}));
  const Floats dout = {1, 1, 1, 7, 7, 7, 2, 2, 2};
  embedding_backward(dwte.data(), nullptr, dout.data(), tokens.data(), nullptr, 3, C);
  EXPECT_EQ(dwte, (Floats{2, 2, 2, 1, 1, 1}));
}

}  // namespace
}  // namespace tessel::cpu
