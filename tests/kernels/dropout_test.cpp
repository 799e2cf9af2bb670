// Dropout keyed by global coordinates (kernels/dropout.h): the generator against Random123's
// published vectors, the masks' statistics and their independence of how the rows and features
// are split, dropout_add's forward and backward on every backend (a kernel case), and attention
// dropout inside the CPU attention kernels against a plain reference.
#include <cmath>

#include "kernels/harness.h"
#include "tessel/core/philox.h"

namespace tessel::testing {
namespace {

// Philox-4x32-10's known answers (Random123's kat_vectors), every lane.
TEST(DropoutMask, PhiloxKnownAnswers) {
  struct Kat {
    PhiloxCounter counter;
    PhiloxKey key;
    PhiloxCounter want;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& kat : kats) {
    const auto& [c, key, want] = kat;
    for (int lane = 0; lane < 4; ++lane)
      EXPECT_EQ(philox4x32_lane(c[0], c[1], c[2], c[3], key[0], key[1], lane), want[lane]) << "lane " << lane;
    EXPECT_EQ(philox4x32(c, key), want);  // core's generator, the parameters' initialisation
  }
}

// The counter is (feature / 4, position, sample, site) under the key (seed), lane feature % 4.
TEST(DropoutMask, BitsAreTheCoordinatesCounter) {
  const uint64_t seed = 0x0000000500000007ull;
  const uint32_t site = dropout_site(3, DropoutKind::Mlp);
  EXPECT_EQ(site, (4u << 16) | (2u << 14));
  EXPECT_EQ(dropout_site(-1, DropoutKind::Embedding), 0u);
  const PhiloxCounter block = philox4x32({2, 17, 9, site}, {7, 5});
  for (int lane = 0; lane < 4; ++lane) EXPECT_EQ(dropout_bits(seed, site, 9, 17, 8 + lane), block[lane]);
}

// The dropped fraction is p, the kept elements are scaled by 1/(1 − p) so the mean factor is 1,
// and masks of different sites, samples and positions are not the same.
TEST(DropoutMask, StatisticsAndScale) {
  const int64_t rows = 256, C = 1024;
  Ints samples(rows), positions(rows);
  for (int64_t r = 0; r < rows; ++r) samples[r] = static_cast<int32_t>(r / 64), positions[r] = static_cast<int32_t>(r % 64);
  for (float p : {0.1f, 0.5f}) {
    const DropoutSite site{.p = p, .seed = 11, .site = dropout_site(0, DropoutKind::Mixer), .samples = samples.data(),
                           .positions = positions.data()};
    DropoutSite other = site;
    other.site = dropout_site(0, DropoutKind::Mlp);
    double dropped = 0, sum = 0, same = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        const float f = dropout_factor(site, r, c);
        EXPECT_TRUE(f == 0.0f || f == 1.0f / (1.0f - p));
        dropped += f == 0.0f;
        sum += f;
        same += (f == 0.0f) == (dropout_factor(other, r, c) == 0.0f);
      }
    }
    const double n = static_cast<double>(rows * C), sd = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(dropped / n, p, 5 * sd) << "p " << p;
    EXPECT_NEAR(sum / n, 1.0, 5 * sd / (1 - p)) << "p " << p;
    // Independent sites agree where both drop or both keep: p² + (1 − p)².
    EXPECT_NEAR(same / n, p * p + (1 - p) * (1 - p), 0.01) << "p " << p;
  }
}

// A shard — rows from `first_row`, features from `feature_offset` — draws exactly its part of the
// whole mask: what sequence, context and tensor parallelism rely on.
TEST(DropoutMask, AShardDrawsItsPartOfTheWholeMask) {
  const int64_t rows = 12, C = 10;
  Ints samples(rows), positions(rows);
  for (int64_t r = 0; r < rows; ++r) samples[r] = static_cast<int32_t>(100 + r / 4), positions[r] = static_cast<int32_t>(7 * r % 13);
  const DropoutSite whole{.p = 0.3f, .seed = 3, .site = 5, .samples = samples.data(), .positions = positions.data()};
  const int64_t first_row = 4, feature_offset = 6;
  const DropoutSite shard{.p = 0.3f, .seed = 3, .site = 5, .samples = samples.data() + first_row,
                          .positions = positions.data() + first_row, .feature_offset = feature_offset};
  for (int64_t r = 0; r < rows - first_row; ++r)
    for (int64_t c = 0; c < C - feature_offset; ++c)
      EXPECT_EQ(dropout_factor(shard, r, c), dropout_factor(whole, first_row + r, feature_offset + c));
}

// out = a + b ∘ m, m the site's factors; out may be a or b; a nullptr: out = b ∘ m; without an
// active site m = 1. The backward adds dout ∘ m.
void dropout_add_case(const Kernels& k, int64_t R, int64_t C, int64_t feature_offset) {
  const int64_t n = R * C;
  const Floats a = random_floats(n, 110), b = random_floats(n, 111), dout = random_floats(n, 112);
  Ints samples(R), positions(R);
  for (int64_t r = 0; r < R; ++r) samples[r] = static_cast<int32_t>(1000 + r / 5), positions[r] = static_cast<int32_t>(r % 5 + 60);
  const IntBuffer d_samples(k, samples), d_positions(k, positions);
  const float p = 0.25f;
  DropoutSite host{.p = p, .seed = 99, .site = dropout_site(2, DropoutKind::Mixer), .samples = samples.data(),
                   .positions = positions.data(), .feature_offset = feature_offset};
  DropoutSite site = host;
  site.samples = d_samples.data();
  site.positions = d_positions.data();
  Vec want(n), want_b(n), want_db(n);
  int64_t dropped = 0;
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      const uint32_t bits = dropout_bits(99, host.site, samples[r], positions[r], feature_offset + c);
      const double m = bits < host.threshold() ? 0.0 : 1.0 / (1.0 - p);
      dropped += m == 0.0;
      want[i] = a[i] + b[i] * m;
      want_b[i] = b[i] * m;
      want_db[i] = 0.5 + dout[i] * m;
    }
  }
  EXPECT_GT(dropped, 0);
  const FloatBuffer d_b(k, b), d_dout(k, dout);
  FloatBuffer d_a(k, a), out(k, n, 5.0f);
  k.dropout_add_forward(out.data(), d_a.data(), d_b.data(), R, C, site);
  EXPECT_LT(max_relative_error(out.host(), want), kForwardTolerance);
  k.dropout_add_forward(d_a.data(), d_a.data(), d_b.data(), R, C, site);  // onto the stream in place
  EXPECT_EQ(d_a.host(), out.host());
  k.dropout_add_forward(out.data(), nullptr, d_b.data(), R, C, site);
  EXPECT_LT(max_relative_error(out.host(), want_b), kForwardTolerance);
  FloatBuffer db(k, n, 0.5f);
  k.dropout_add_backward(db.data(), d_dout.data(), R, C, site);
  EXPECT_LT(max_relative_error(db.host(), want_db), kForwardTolerance);
  // p = 0, or no samples (evaluation): the plain sum.
  for (DropoutSite none : {DropoutSite{}, DropoutSite{.p = p, .seed = 99, .site = 0}}) {
    k.dropout_add_forward(out.data(), d_b.data(), d_dout.data(), R, C, none);
    Vec sum(n);
    for (int64_t i = 0; i < n; ++i) sum[i] = double{b[i]} + dout[i];
    EXPECT_LT(max_relative_error(out.host(), sum), kForwardTolerance);
  }
}

// Short rows at a whole block of features; long rows (the CPU draws 256 features at a time,
// sixteen Philox blocks of four) starting mid-block, so that runs begin and end anywhere.
void dropout_add(const Kernels& k) {
  dropout_add_case(k, 37, 29, 64);
  dropout_add_case(k, 5, 613, 6);
}

const bool kRegistered = add_kernel_cases({
    {"dropout_add", {"dropout_add_forward", "dropout_add_backward"}, dropout_add},
});

// Attention dropout against a plain reference, in double: P = softmax(scale · q kᵀ) over the
// visible keys, P' = P ∘ F (F the factors by query position, head and key position), out = P' v;
// the backward dv = P'ᵀ dout, dP' = dout vᵀ, dS = P ∘ (F ∘ dP' − Σ_s P' ∘ dP'), dq = scale · dS k,
// dk = scale · dSᵀ q. One batch item of T rows, causal, H = G heads of D.
struct AttentionReference {
  Vec out, dq, dk, dv;
};

AttentionReference attention_reference(const Floats& q, const Floats& k, const Floats& v, const Floats& dout,
                                       int64_t T, int64_t H, int64_t D, const DropoutSite& site) {
  AttentionReference r{Vec(T * H * D), Vec(T * H * D), Vec(T * H * D), Vec(T * H * D)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> p(t + 1), f(t + 1), dp(t + 1);
      double max = -INFINITY, sum = 0;
      for (int64_t s = 0; s <= t; ++s) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double{q[(t * H + h) * D + d]} * k[(s * H + h) * D + d];
        p[s] = scale * dot;
        max = std::max(max, p[s]);
      }
      for (int64_t s = 0; s <= t; ++s) sum += p[s] = std::exp(p[s] - max);
      double row_d = 0;
      for (int64_t s = 0; s <= t; ++s) {
        p[s] /= sum;
        f[s] = site.active() ? attention_dropout_factor(site, t, static_cast<int32_t>(t), h, static_cast<int32_t>(s)) : 1.0;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) {
          r.out[(t * H + h) * D + d] += p[s] * f[s] * v[(s * H + h) * D + d];
          r.dv[(s * H + h) * D + d] += p[s] * f[s] * dout[(t * H + h) * D + d];
          dot += double{dout[(t * H + h) * D + d]} * v[(s * H + h) * D + d];
        }
        dp[s] = dot;
        row_d += p[s] * f[s] * dot;
      }
      for (int64_t s = 0; s <= t; ++s) {
        const double ds = p[s] * (f[s] * dp[s] - row_d);
        for (int64_t d = 0; d < D; ++d) {
          r.dq[(t * H + h) * D + d] += scale * ds * k[(s * H + h) * D + d];
          r.dk[(s * H + h) * D + d] += scale * ds * q[(t * H + h) * D + d];
        }
      }
    }
  }
  return r;
}

TEST(AttentionDropout, MatchesThePlainReferenceForwardAndBackward) {
  const Kernels& kt = cpu_kernels();
  const int64_t T = 70, H = 2, D = 8, n = T * H * D;  // 70 rows: two query blocks
  const Floats q = random_floats(n, 120), k = random_floats(n, 121), v = random_floats(n, 122),
               dout = random_floats(n, 123);
  Ints samples(T, 41);
  const DropoutSite site{.p = 0.2f, .seed = 5, .site = dropout_site(1, DropoutKind::AttentionProbs),
                         .samples = samples.data(), .positions = nullptr, .feature_offset = 2};
  for (const DropoutSite& s : {DropoutSite{}, site}) {
    const AttentionReference want = attention_reference(q, k, v, dout, T, H, D, s);
    Floats out(n), lse(H * T), dq(n, 0.0f), dk(n, 0.0f), dv(n, 0.0f);
    kt.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), 1, T, H, H, D, H * D, H * D, H * D,
                         true, s);
    EXPECT_LT(max_relative_error(out, want.out), kForwardTolerance) << "p " << s.p;
    kt.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                          lse.data(), 1, T, H, H, D, H * D, H * D, H * D, true, s);
    EXPECT_LT(max_relative_error(dq, want.dq), kGradientTolerance) << "p " << s.p;
    EXPECT_LT(max_relative_error(dk, want.dk), kGradientTolerance) << "p " << s.p;
    EXPECT_LT(max_relative_error(dv, want.dv), kGradientTolerance) << "p " << s.p;
  }
  // Dropout changes the output: the test above can fail.
  const AttentionReference plain = attention_reference(q, k, v, dout, T, H, D, {});
  const AttentionReference dropped = attention_reference(q, k, v, dout, T, H, D, site);
  EXPECT_GT(max_relative_error(Floats(plain.out.begin(), plain.out.end()), dropped.out), 1e-2);
}

// Context parallelism's pieces: the keys in two blocks (positions 0..T/2−1 and T/2..T−1),
// merged by lse, give the whole attention's output with dropout, and the blocks' backward shares
// add up to its gradients: the factors are keyed by global positions, never by the block.
TEST(AttentionDropout, KeyBlocksMergeToTheWholeAttention) {
  const Kernels& kt = cpu_kernels();
  const int64_t T = 40, H = 2, D = 8, n = T * H * D, half = T / 2;
  const Floats q = random_floats(n, 130), k = random_floats(n, 131), v = random_floats(n, 132),
               dout = random_floats(n, 133);
  Ints samples(T, 7), positions(T);
  for (int64_t t = 0; t < T; ++t) positions[t] = static_cast<int32_t>(t);
  const DropoutSite site{.p = 0.3f, .seed = 9, .site = dropout_site(0, DropoutKind::AttentionProbs),
                         .samples = samples.data(), .positions = nullptr, .feature_offset = 0};
  Floats out(n), lse(H * T);
  kt.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), 1, T, H, H, D, H * D, H * D, H * D,
                       true, site);
  Floats merged(n), merged_lse(H * T), block(n), block_lse(H * T);
  kt.attention_block_forward(merged.data(), merged_lse.data(), q.data(), k.data(), v.data(), 1, T, half, H, H, D,
                             H * D, H * D, H * D, positions.data(), positions.data(), nullptr, site);
  kt.attention_block_forward(block.data(), block_lse.data(), q.data(), k.data() + half * H * D,
                             v.data() + half * H * D, 1, T, half, H, H, D, H * D, H * D, H * D, positions.data(),
                             positions.data() + half, nullptr, site);
  kt.attention_merge(merged.data(), merged_lse.data(), block.data(), block_lse.data(), 1, T, H, D);
  EXPECT_LT(max_relative_error(merged, to_double(out)), kForwardTolerance);

  Floats dq(n, 0.0f), dk(n, 0.0f), dv(n, 0.0f), bq(n, 0.0f), bk(n, 0.0f), bv(n, 0.0f);
  kt.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                        lse.data(), 1, T, H, H, D, H * D, H * D, H * D, true, site);
  for (int64_t first : {int64_t{0}, half})
    kt.attention_block_backward(bq.data(), bk.data() + first * H * D, bv.data() + first * H * D, dout.data(),
                                q.data(), k.data() + first * H * D, v.data() + first * H * D, out.data(), lse.data(),
                                1, T, half, H, H, D, H * D, H * D, H * D, positions.data(), positions.data() + first,
                                nullptr, site);
  EXPECT_LT(max_relative_error(bq, to_double(dq)), kGradientTolerance);
  EXPECT_LT(max_relative_error(bk, to_double(dk)), kGradientTolerance);
  EXPECT_LT(max_relative_error(bv, to_double(dv)), kGradientTolerance);
}

}  // namespace
}  // namespace tessel::testing
