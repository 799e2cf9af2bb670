// Kernel cases: GELU (tanh and exact forms), SwiGLU and the shared expert's sigmoid gate.
#include <cmath>

#include "kernels/harness.h"
#include "support/reference.h"

namespace tessel::testing {
namespace {

void gelu_cases(const Kernels& k, decltype(Kernels::gelu_forward) forward,
                decltype(Kernels::gelu_backward) backward, Vec (*reference)(const Vec&)) {
  const int64_t n = 203;
  Floats inp = random_floats(n, 40, 3.0f);
  inp[0] = 12.0f;  // saturated tails and the origin
  inp[1] = -12.0f;
  inp[2] = 0.0f;
  inp[3] = 1e-4f;
  const Floats w = random_floats(n, 41);
  const FloatBuffer d_inp(k, inp), d_w(k, w);

  FloatBuffer out(k, n);
  forward(out.data(), d_inp.data(), n);
  EXPECT_LT(relative_error(out.host(), reference(to_double(inp))), kForwardTolerance);
  check_backward(
      k, [&](const std::vector<Vec>& in) { return reference(in[0]); }, {inp}, to_double(w),
      [&](const std::vector<float*>& g) { backward(g[0], d_w.data(), d_inp.data(), n); });
}

void gelu(const Kernels& k) { gelu_cases(k, k.gelu_forward, k.gelu_backward, ref::gelu); }
void gelu_erf(const Kernels& k) { gelu_cases(k, k.gelu_erf_forward, k.gelu_erf_backward, ref::gelu_erf); }

// The exact GELU on a dense grid of [-8, 8] against double: the CPU computes erf by its own
// vectorisable approximation (vec_math.h, absolute error below 1.3e-7), so each element is held to
// 1.5e-7·|x| (that error through 0.5·x·erf, near the cancellation of 1 + erf for negative x as
// much as any float erf) plus 2⁻²² of the value; NaN stays NaN.
void gelu_erf_dense(const Kernels& k) {
  const int64_t n = 160001;
  Floats inp(n);
  for (int64_t i = 0; i < n; ++i) inp[i] = -8.0f + 16.0f * static_cast<float>(i) / static_cast<float>(n - 1);
  inp[n / 2] = NAN;
  const FloatBuffer d_inp(k, inp);
  FloatBuffer out(k, n);
  k.gelu_erf_forward(out.data(), d_inp.data(), n);
  const Floats got = out.host();
  const Vec want = ref::gelu_erf(to_double(inp));
  int64_t outside = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i == n / 2) continue;
    outside += std::abs(got[i] - want[i]) > 1.5e-7 * std::abs(inp[i]) + 0x1p-22 * std::abs(want[i]);
  }
  EXPECT_EQ(outside, 0);
  EXPECT_TRUE(std::isnan(got[n / 2]));
}

void swiglu(const Kernels& k) {
  const int64_t n = 203;
  Floats gate = random_floats(n, 50, 3.0f);
  gate[0] = 30.0f;
  gate[1] = -30.0f;
  const Floats up = random_floats(n, 51), w = random_floats(n, 52);
  const FloatBuffer d_gate(k, gate), d_up(k, up), d_w(k, w);

  FloatBuffer out(k, n);
  k.swiglu_forward(out.data(), d_gate.data(), d_up.data(), n);
  EXPECT_LT(relative_error(out.host(), ref::swiglu(to_double(gate), to_double(up))),
            kForwardTolerance);
  check_backward(k, [&](const std::vector<Vec>& in) { return ref::swiglu(in[0], in[1]); },
                 {gate, up}, to_double(w),
                 [&](const std::vector<float*>& g) {
                   k.swiglu_backward(g[0], g[1], d_w.data(), d_gate.data(), d_up.data(), n);
                 });
}

// out (N, C) += sigmoid(logit[n]) · y[n], the gate turned from logits into sigmoids in place; the
// backward overwrites dy and dlogit (whatever they held) with the gradients of Σ out · w.
void sigmoid_gate(const Kernels& k) {
  const int64_t N = 9, C = 13;
  Floats logits = random_floats(N, 60, 2.0f);
  logits[0] = 20.0f;  // saturated
  logits[1] = -20.0f;
  const Floats y = random_floats(N * C, 61), out0 = random_floats(N * C, 62);
  const Floats w = random_floats(N * C, 63);
  const auto reference = [&](const std::vector<Vec>& in) {  // in: logits, y
    Vec out = to_double(out0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) out[n * C + c] += ref::sigmoid(in[0][n]) * in[1][n * C + c];
    return out;
  };
  FloatBuffer out(k, out0), gate(k, logits);
  const FloatBuffer d_y(k, y), d_w(k, w);
  k.sigmoid_gate_forward(out.data(), gate.data(), d_y.data(), N, C);
  EXPECT_LT(relative_error(out.host(), reference({to_double(logits), to_double(y)})),
            kForwardTolerance);
  Vec sigmoids(N);
  for (int64_t n = 0; n < N; ++n) sigmoids[n] = ref::sigmoid(logits[n]);
  EXPECT_LT(relative_error(gate.host(), sigmoids), kForwardTolerance);

  FloatBuffer dy(k, N * C, 123.0f), dlogit(k, N, 123.0f);
  k.sigmoid_gate_backward(dy.data(), dlogit.data(), d_w.data(), d_y.data(), gate.data(), N, C);
  const std::vector<Vec> inputs = {to_double(logits), to_double(y)};
  EXPECT_LT(relative_error(dlogit.host(), numerical_gradient(reference, inputs, 0, to_double(w))),
            kGradientTolerance);
  EXPECT_LT(relative_error(dy.host(), numerical_gradient(reference, inputs, 1, to_double(w))),
            kGradientTolerance);
}

const bool kRegistered = add_kernel_cases({
    {"gelu", {"gelu_forward", "gelu_backward"}, gelu},
    {"gelu_erf", {"gelu_erf_forward", "gelu_erf_backward"}, gelu_erf},
    {"gelu_erf_dense", {"gelu_erf_forward"}, gelu_erf_dense},
    {"swiglu", {"swiglu_forward", "swiglu_backward"}, swiglu},
    {"sigmoid_gate", {"sigmoid_gate_forward", "sigmoid_gate_backward"}, sigmoid_gate},
});

}  // namespace
}  // namespace tessel::testing
