// Kernel cases: rotary position embedding (Hugging Face Llama's rotate-half), its tables and its
// in-place forward and backward.
#include <cmath>

#include "kernels/harness.h"
#include "support/reference.h"

namespace tessel::testing {
namespace {

void rope_tables(const Kernels& k) {
  const int64_t max_pos = 97, D = 12;
  const float base = 10000.0f;
  FloatBuffer d_cos(k, max_pos * D / 2), d_sin(k, max_pos * D / 2);
  k.rope_tables(d_cos.data(), d_sin.data(), max_pos, D, base);
  const Floats cos = d_cos.host(), sin = d_sin.host();
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

// Partial RoPE (Qwen3-Next): the first rot dims of each head rotate with angles over rot (Hugging
// Face's inv_freq = base^(-2i/rot)); the rest of the head passes through.
Vec partial_rope_reference(const Vec& x, const Ints& positions, int64_t heads, int64_t D,
                           int64_t rot, int64_t ld, float base) {
  Vec out = x;
  for (size_t n = 0; n < positions.size(); ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = n * ld + h * D;
      for (int64_t i = 0; i < rot / 2; ++i) {
        const double angle = ref::rope_angle(positions[n], i, rot, base);
        const double a = x[at + i], b = x[at + i + rot / 2];
        out[at + i] = a * std::cos(angle) - b * std::sin(angle);
        out[at + i + rot / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
  return out;
}

void rope_with_rot(const Kernels& k, int64_t D, int64_t rot) {
  const int64_t N = 6, heads = 3, ld = heads * D + 7, max_pos = 64;  // padded rows
  const float base = 500.0f;
  const Ints positions = {0, 63, 5, 17, 5, 42};
  const IntBuffer d_positions(k, positions);
  FloatBuffer cos(k, max_pos * rot / 2), sin(k, max_pos * rot / 2);
  k.rope_tables(cos.data(), sin.data(), max_pos, rot, base);
  const Floats x = random_floats(N * ld, 70), w = random_floats(N * ld, 71);
  const auto reference = [&](const std::vector<Vec>& in) {
    return rot == D ? ref::rope(in[0], positions, heads, D, ld, base)
                    : partial_rope_reference(in[0], positions, heads, D, rot, ld, base);
  };

  FloatBuffer rotated(k, x);  // in place; the padding after heads·D must come out unchanged
  k.rope_forward(rotated.data(), d_positions.data(), cos.data(), sin.data(), N, heads, D, rot, ld);
  const Floats got = rotated.host();
  EXPECT_LT(relative_error(got, reference({to_double(x)})), kForwardTolerance);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = heads * D; j < ld; ++j) EXPECT_EQ(got[n * ld + j], x[n * ld + j]);
    for (int64_t h = 0; h < heads; ++h) {  // the dims past rot pass through bit for bit
      for (int64_t j = rot; j < D; ++j) EXPECT_EQ(got[n * ld + h * D + j], x[n * ld + h * D + j]);
    }
  }

  // Backward turns d(x') = w into d(x), in place (it overwrites: no accumulation).
  FloatBuffer grad(k, w);
  k.rope_backward(grad.data(), d_positions.data(), cos.data(), sin.data(), N, heads, D, rot, ld);
  const Vec expected = numerical_gradient(reference, {to_double(x)}, 0, to_double(w));
  EXPECT_LT(relative_error(grad.host(), expected), kGradientTolerance);

  // A rotation and its transpose undo each other.
  k.rope_backward(rotated.data(), d_positions.data(), cos.data(), sin.data(), N, heads, D, rot,
                  ld);
  EXPECT_LT(relative_error(rotated.host(), to_double(x)), kForwardTolerance);
}

void rope(const Kernels& k) { rope_with_rot(k, 10, 10); }
// Qwen3-Next's shape in small: a quarter of the head rotates.
void partial_rope(const Kernels& k) { rope_with_rot(k, 16, 4); }

const bool kRegistered = add_kernel_cases({
    {"rope_tables", {"rope_tables"}, rope_tables},
    {"rope", {"rope_tables", "rope_forward", "rope_backward"}, rope},
    {"partial_rope", {"rope_tables", "rope_forward", "rope_backward"}, partial_rope},
});

}  // namespace
}  // namespace tessel::testing
