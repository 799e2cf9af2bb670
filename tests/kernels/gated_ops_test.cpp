// Kernel cases: Qwen3-Next's element and row kernels — gated RMSNorm, l2norm, the attention
// output gate, the causal conv1d + SiLU (with packed documents) and Gated DeltaNet's gates —
// against gated_delta_reference.h in double and finite differences.
#include "kernels/gated_delta_reference.h"
#include "kernels/harness.h"

namespace tessel::testing {
namespace {

void gated_rmsnorm(const Kernels& k) {
  const int64_t N = 10, C = 24;  // tokens · heads rows of head_dim
  const float eps = 1e-6f;
  const Floats inp = random_floats(N * C, 40, 1.5f, 0.3f), gate = random_floats(N * C, 41, 2.0f);
  const Floats weight = random_floats(C, 42, 0.2f, 1.0f), w = random_floats(N * C, 43);
  const FloatBuffer d_inp(k, inp), d_gate(k, gate), d_weight(k, weight), d_w(k, w);
  const auto reference = [&](const std::vector<Vec>& in) {
    return gdn_ref::gated_rmsnorm(in[0], in[1], in[2], N, C, eps);
  };

  FloatBuffer out(k, N * C), rstd(k, N);
  k.gated_rmsnorm_forward(out.data(), rstd.data(), d_inp.data(), d_gate.data(), d_weight.data(), N,
                          C, eps);
  EXPECT_LT(relative_error(out.host(), reference({to_double(inp), to_double(gate),
                                                  to_double(weight)})),
            kForwardTolerance);
  check_backward(k, reference, {inp, gate, weight}, to_double(w),
                 [&](const std::vector<float*>& g) {
                   k.gated_rmsnorm_backward(g[0], g[1], g[2], d_w.data(), d_inp.data(),
                                            d_gate.data(), d_weight.data(), rstd.data(), N, C);
                 });
}

void l2norm(const Kernels& k) {
  const int64_t N = 5, heads = 3, D = 16, ld = heads * D + 5;  // a view inside wider rows
  const Floats inp = random_floats(N * ld, 50, 0.7f, 0.1f);
  Floats w = random_floats(N * ld, 51);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = heads * D; j < ld; ++j) w[n * ld + j] = 0.0f;  // dout lives in the heads
  const FloatBuffer d_w(k, w);
  const auto reference = [&](const std::vector<Vec>& in) {
    return gdn_ref::l2norm(in[0], N, heads, D, ld);
  };

  FloatBuffer out(k, inp), rstd(k, N * heads);  // in place, as the model runs it
  k.l2norm_forward(out.data(), rstd.data(), out.data(), N, heads, D, ld);
  Floats got = out.host();
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = heads * D; j < ld; ++j) {
      EXPECT_EQ(got[n * ld + j], inp[n * ld + j]);  // the rest of a row is untouched
      got[n * ld + j] = 0.0f;
    }
  }
  EXPECT_LT(relative_error(got, reference({to_double(inp)})), kForwardTolerance);
  check_backward(k, reference, {inp}, to_double(w), [&](const std::vector<float*>& g) {
    k.l2norm_backward(g[0], d_w.data(), out.data(), rstd.data(), N, heads, D, ld);
  });
}

// The gate read where q_proj leaves it, interleaved per head [q_h | g_h].
void output_gate(const Kernels& k) {
  const int64_t N = 4, H = 3, D = 5, gate_ld = 2 * H * D, stride = 2 * D;
  const Floats attn = random_floats(N * H * D, 60), q_and_gate = random_floats(N * gate_ld, 61, 2.0f);
  const Floats w = random_floats(N * H * D, 62);
  const FloatBuffer d_attn(k, attn), d_gate(k, q_and_gate), d_w(k, w);
  const auto reference = [&](const std::vector<Vec>& in) {
    return gdn_ref::output_gate(in[0], in[1], D, N, H, D, gate_ld, stride);
  };

  FloatBuffer out(k, N * H * D);
  k.output_gate_forward(out.data(), d_attn.data(), d_gate.data() + D, N, H, D, gate_ld, stride);
  EXPECT_LT(relative_error(out.host(), reference({to_double(attn), to_double(q_and_gate)})),
            kForwardTolerance);
  check_backward(k, reference, {attn, q_and_gate}, to_double(w),
                 [&](const std::vector<float*>& g) {
                   k.output_gate_backward(g[0], g[1] != nullptr ? g[1] + D : nullptr, d_w.data(),
                                          d_attn.data(), d_gate.data() + D, N, H, D, gate_ld,
                                          stride);
                 });
}

// Two sequences, the second packed with documents from rows 0, 5, 6 (one row long) and 9; rows of
// a wider buffer (ld > C); and the same without packing.
void conv1d_case(const Kernels& k, bool packed) {
  const int64_t B = 2, T = 13, C = 7, K = 4, ld = 9;
  Ints key_start;
  if (packed) {
    key_start.assign(B * T, 0);
    for (int64_t t = 0; t < T; ++t) key_start[T + t] = t < 5 ? 0 : t < 6 ? 5 : t < 9 ? 6 : 9;
  }
  const IntBuffer d_key_start(k, packed ? key_start : Ints{0});
  const int32_t* ks = packed ? d_key_start.data() : nullptr;
  const Floats inp = random_floats(B * T * ld, 70), weight = random_floats(C * K, 71, 0.5f);
  const Floats w = random_floats(B * T * C, 72);
  const FloatBuffer d_inp(k, inp), d_weight(k, weight), d_w(k, w);
  const auto reference = [&](const std::vector<Vec>& in) {
    return gdn_ref::conv1d_silu(in[0], in[1], key_start, B, T, C, K, ld);
  };

  FloatBuffer out(k, B * T * C);
  k.causal_conv1d_silu_forward(out.data(), d_inp.data(), d_weight.data(), ks, B, T, C, K, ld);
  EXPECT_LT(relative_error(out.host(), reference({to_double(inp), to_double(weight)})),
            kForwardTolerance);
  check_backward(k, reference, {inp, weight}, to_double(w), [&](const std::vector<float*>& g) {
    k.causal_conv1d_silu_backward(g[0], g[1], d_w.data(), d_inp.data(), d_weight.data(), ks, B, T,
                                  C, K, ld);
  });
}
void conv1d(const Kernels& k) { conv1d_case(k, false); }
void conv1d_packed(const Kernels& k) { conv1d_case(k, true); }

// Some a + dt_bias above softplus's threshold of 20, where it is the identity.
void gdn_gates(const Kernels& k) {
  const int64_t N = 6, H = 3;
  const Floats b = random_floats(N * H, 80, 2.0f), A_log = random_floats(H, 82, 0.5f, 0.3f);
  Floats a = random_floats(N * H, 81, 2.0f);
  a[4] = 21.5f;
  const Floats dt_bias = random_floats(H, 83, 0.3f, 1.0f), w = random_floats(2 * N * H, 84);
  const FloatBuffer d_b(k, b), d_a(k, a), d_A_log(k, A_log), d_dt_bias(k, dt_bias);
  const FloatBuffer dbeta(k, Floats(w.begin(), w.begin() + N * H)),
      dg(k, Floats(w.begin() + N * H, w.end()));
  const auto reference = [&](const std::vector<Vec>& in) {
    return gdn_ref::gates(in[0], in[1], in[2], in[3], N, H);
  };

  FloatBuffer beta(k, N * H), g(k, N * H);
  k.gdn_gate_forward(beta.data(), g.data(), d_b.data(), d_a.data(), d_A_log.data(),
                     d_dt_bias.data(), N, H);
  Floats got = beta.host();
  for (float x : g.host()) got.push_back(x);
  EXPECT_LT(relative_error(got, reference({to_double(b), to_double(a), to_double(A_log),
                                           to_double(dt_bias)})),
            kForwardTolerance);
  check_backward(k, reference, {b, a, A_log, dt_bias}, to_double(w),
                 [&](const std::vector<float*>& grad) {
                   k.gdn_gate_backward(grad[0], grad[1], grad[2], grad[3], dbeta.data(), dg.data(),
                                       d_b.data(), d_a.data(), d_A_log.data(), d_dt_bias.data(), N,
                                       H);
                 });
}

const bool kRegistered = add_kernel_cases({
    {"gated_rmsnorm", {"gated_rmsnorm_forward", "gated_rmsnorm_backward"}, gated_rmsnorm},
    {"l2norm", {"l2norm_forward", "l2norm_backward"}, l2norm},
    {"output_gate", {"output_gate_forward", "output_gate_backward"}, output_gate},
    {"causal_conv1d_silu", {"causal_conv1d_silu_forward", "causal_conv1d_silu_backward"}, conv1d},
    {"causal_conv1d_silu_packed",
     {"causal_conv1d_silu_forward", "causal_conv1d_silu_backward"},
     conv1d_packed},
    {"gdn_gates", {"gdn_gate_forward", "gdn_gate_backward"}, gdn_gates},
});

}  // namespace
}  // namespace tessel::testing
