// The CUDA kernels of Qwen3-Next (Gated DeltaNet, gated attention) against the CPU reference on
// random inputs at the model's shapes (fp32: relative error ≤ 1e-5, gradients too): the
// zero-centred RMSNorm, partial RoPE, the gated RMSNorm, l2norm, the output gate, the conv, the
// gates, the chunked delta rule (packed documents, r = 2, 4 chunks with padding, an initial state
// and a final-state gradient) and its decoding step. Skipped without a device.
#include <cmath>

#include "cuda_twin.h"

namespace tessel::cuda_test {
namespace {

TEST_F(CudaKernels, ZeroCentredRmsnormAndPartialRope) {
  const int64_t N = 300, C = 256;
  Floats inp = random_floats(rng, N * C, -2.0f, 2.0f), w = random_floats(rng, C, -0.2f, 0.2f);
  Floats out = poisoned(N * C), rstd = poisoned(N), dout = random_floats(rng, N * C);
  Floats dinp = random_floats(rng, N * C), dw = random_floats(rng, C);
  const int64_t P = 100, D = 256, rot = 64, heads = 2, ld = heads * D;  // Qwen3-Next's 64 of 256
  Floats cos = poisoned(P * rot / 2), sin = poisoned(P * rot / 2);
  Floats x = random_floats(rng, N * ld), dx = random_floats(rng, N * ld);
  Ints positions = random_ints(rng, N, 0, P);
  run_both([&](const Kernels& k) {
    k.rmsnorm_forward(out.on(k), rstd.on(k), inp.on(k), w.on(k), N, C, 1e-6f, 1.0f);
    k.rmsnorm_backward(dinp.on(k), dw.on(k), dout.on(k), inp.on(k), w.on(k), rstd.on(k), N, C,
                       1.0f);
    k.rope_tables(cos.on(k), sin.on(k), P, rot, 10000000.0f);
    k.rope_forward(x.on(k), positions.on(k), cos.on(k), sin.on(k), N, heads, D, rot, ld);
    k.rope_backward(dx.on(k), positions.on(k), cos.on(k), sin.on(k), N, heads, D, rot, ld);
  });
  expect_close(out, "zero-centred rmsnorm out");
  expect_close(rstd, "zero-centred rmsnorm rstd");
  expect_close(dinp, "zero-centred rmsnorm dinp");
  expect_close(dw, "zero-centred rmsnorm dweight");
  expect_close(cos, "partial rope cos");
  expect_close(sin, "partial rope sin");
  expect_close(x, "partial rope forward");
  expect_close(dx, "partial rope backward");
}

TEST_F(CudaKernels, GatedNormL2normOutputGate) {
  const int64_t N = 700, C = 128;  // tokens · heads rows of dv
  Floats inp = random_floats(rng, N * C, -2.0f, 2.0f), z = random_floats(rng, N * C, -3.0f, 3.0f);
  Floats w = random_floats(rng, C, 0.5f, 1.5f), out = poisoned(N * C), rstd = poisoned(N);
  Floats dout = random_floats(rng, N * C), dinp = random_floats(rng, N * C);
  Floats dz = random_floats(rng, N * C), dw = random_floats(rng, C);
  const int64_t T = 300, heads = 4, D = 128, ld = heads * D + 96;
  Floats x = random_floats(rng, T * ld), y = poisoned(T * ld), l2_rstd = poisoned(T * heads);
  Floats dy = random_floats(rng, T * ld), dx = random_floats(rng, T * ld);
  const int64_t H = 8, HD = 32, gate_ld = 2 * H * HD;
  Floats attn = random_floats(rng, T * H * HD), qg = random_floats(rng, T * gate_ld, -4.0f, 4.0f);
  Floats gated = poisoned(T * H * HD), dgated = random_floats(rng, T * H * HD);
  Floats dattn = random_floats(rng, T * H * HD), dqg = random_floats(rng, T * gate_ld);
  run_both([&](const Kernels& k) {
    k.gated_rmsnorm_forward(out.on(k), rstd.on(k), inp.on(k), z.on(k), w.on(k), N, C, 1e-6f);
    k.gated_rmsnorm_backward(dinp.on(k), dz.on(k), dw.on(k), dout.on(k), inp.on(k), z.on(k),
                             w.on(k), rstd.on(k), N, C);
    k.l2norm_forward(y.on(k), l2_rstd.on(k), x.on(k), T, heads, D, ld);
    k.l2norm_backward(dx.on(k), dy.on(k), y.on(k), l2_rstd.on(k), T, heads, D, ld);
    k.output_gate_forward(gated.on(k), attn.on(k), qg.on(k) + HD, T, H, HD, gate_ld, 2 * HD);
    k.output_gate_backward(dattn.on(k), dqg.on(k) + HD, dgated.on(k), attn.on(k), qg.on(k) + HD,
                           T, H, HD, gate_ld, 2 * HD);
  });
  expect_close(out, "gated rmsnorm out");
  expect_close(rstd, "gated rmsnorm rstd");
  expect_close(dinp, "gated rmsnorm dinp");
  expect_close(dz, "gated rmsnorm dgate");
  expect_close(dw, "gated rmsnorm dweight");
  // y: the heads are written, the rest of each row stays NaN on both sides; compare the heads.
  std::vector<float> cpu_y = y.cpu(), cuda_y = y.cuda();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < heads * D; ++i)
      ASSERT_NEAR(cuda_y[t * ld + i], cpu_y[t * ld + i], 1e-6f) << "l2norm out " << t << ", " << i;
  expect_close(l2_rstd, "l2norm rstd");
  expect_close(dx, "l2norm dinp");
  expect_close(gated, "output gate out");
  expect_close(dattn, "output gate dattn");
  expect_close(dqg, "output gate dgate");
}

TEST_F(CudaKernels, ConvAndGates) {
  const int64_t B = 2, T = 300, C = 200, K = 4, ld = C + 56, N = B * T, H = 32;
  std::vector<int32_t> starts(B * T, 0);
  for (int64_t t = 0; t < T; ++t) starts[T + t] = t < 77 ? 0 : t < 78 ? 77 : t < 150 ? 78 : 150;
  Ints key_start(starts);
  Floats x = random_floats(rng, B * T * ld), w = random_floats(rng, C * K), out = poisoned(B * T * C);
  Floats dout = random_floats(rng, B * T * C), dx = random_floats(rng, B * T * ld);
  Floats dw = random_floats(rng, C * K);
  Floats b = random_floats(rng, N * H, -3.0f, 3.0f), a = random_floats(rng, N * H, -5.0f, 25.0f);
  Floats A_log = random_floats(rng, H, 0.0f, 2.7f), dt_bias = random_floats(rng, H, 0.5f, 1.5f);
  Floats beta = poisoned(N * H), g = poisoned(N * H), dbeta = random_floats(rng, N * H);
  Floats dg = random_floats(rng, N * H), db = random_floats(rng, N * H), da = random_floats(rng, N * H);
  Floats dA_log = random_floats(rng, H), ddt_bias = random_floats(rng, H);
  run_both([&](const Kernels& k) {
    k.causal_conv1d_silu_forward(out.on(k), x.on(k), w.on(k), key_start.on(k), B, T, C, K, ld);
    k.causal_conv1d_silu_backward(dx.on(k), dw.on(k), dout.on(k), x.on(k), w.on(k),
                                  key_start.on(k), B, T, C, K, ld);
    k.gdn_gate_forward(beta.on(k), g.on(k), b.on(k), a.on(k), A_log.on(k), dt_bias.on(k), N, H);
    k.gdn_gate_backward(db.on(k), da.on(k), dA_log.on(k), ddt_bias.on(k), dbeta.on(k), dg.on(k),
                        b.on(k), a.on(k), A_log.on(k), dt_bias.on(k), N, H);
  });
  expect_close(out, "conv out");
  expect_close(dx, "conv dinp");
  expect_close(dw, "conv dweight");
  expect_close(beta, "beta");
  expect_close(g, "g");
  expect_close(db, "db");
  expect_close(da, "da");
  expect_close(dA_log, "dA_log");
  expect_close(ddt_bias, "ddt_bias");
}

TEST_F(CudaKernels, GatedDeltaRule) {
  const int64_t B = 2, T = 230, Hk = 2, Hv = 4, Dk = 64, Dv = 48;  // 4 chunks, the last padded
  const int64_t ld = 2 * Hk * Dk + Hv * Dv, chunks = delta_rule_chunks(T);
  std::vector<int32_t> starts(B * T, 0);
  for (int64_t t = 0; t < T; ++t) starts[T + t] = t < 64 ? 0 : t < 65 ? 64 : t < 100 ? 65 : 100;
  Ints key_start(starts);
  std::vector<float> qkv_values = uniform(rng, B * T * ld, -0.2f, 0.2f);
  Floats qkv(qkv_values);
  std::vector<float> beta_values = uniform(rng, B * T * Hv, 0.0f, 1.0f);
  Floats beta(beta_values), g = random_floats(rng, B * T * Hv, -0.2f, 0.0f);
  Floats initial = random_floats(rng, B * Hv * Dk * Dv, -0.5f, 0.5f);
  Floats out = poisoned(B * T * Hv * Dv), final_state = poisoned(B * Hv * Dk * Dv);
  Floats Ainv = poisoned(B * Hv * chunks * kDeltaChunk * kDeltaChunk);
  Floats dout = random_floats(rng, B * T * Hv * Dv), dfinal = random_floats(rng, B * Hv * Dk * Dv);
  Floats dqkv = random_floats(rng, B * T * ld), dbeta = random_floats(rng, B * T * Hv);
  Floats dg = random_floats(rng, B * T * Hv), dinitial = random_floats(rng, B * Hv * Dk * Dv);
  const int64_t k_at = Hk * Dk, v_at = 2 * Hk * Dk;
  run_both([&](const Kernels& k) {
    float* p = qkv.on(k);
    float* dp = dqkv.on(k);
    k.gated_delta_rule_forward(out.on(k), final_state.on(k), Ainv.on(k), p, p + k_at, p + v_at,
                               beta.on(k), g.on(k), initial.on(k), key_start.on(k), B, T, Hk, Hv,
                               Dk, Dv, ld, ld);
    k.gated_delta_rule_backward(dp, dp + k_at, dp + v_at, dbeta.on(k), dg.on(k), dinitial.on(k),
                                dout.on(k), dfinal.on(k), Ainv.on(k), p, p + k_at, p + v_at,
                                beta.on(k), g.on(k), initial.on(k), key_start.on(k), B, T, Hk,
                                Hv, Dk, Dv, ld, ld);
  });
  expect_close(out, "delta rule out");
  expect_close(final_state, "delta rule final state");
  expect_close(Ainv, "delta rule Ainv");
  expect_close(dqkv, "delta rule dq, dk, dv");
  expect_close(dbeta, "delta rule dbeta");
  expect_close(dg, "delta rule dg");
  expect_close(dinitial, "delta rule dinitial_state");

  // The decoding step from the final state, one token.
  Floats state(final_state.cpu()), step_out = poisoned(B * Hv * Dv);
  Floats row = random_floats(rng, B * ld, -0.2f, 0.2f), row_beta = random_floats(rng, B * Hv, 0.0f, 1.0f);
  Floats row_g = random_floats(rng, B * Hv, -0.3f, 0.0f);
  run_both([&](const Kernels& k) {
    float* p = row.on(k);
    k.gated_delta_rule_step(step_out.on(k), state.on(k), p, p + k_at, p + v_at, row_beta.on(k),
                            row_g.on(k), B, Hk, Hv, Dk, Dv, ld, ld);
  });
  expect_close(step_out, "delta rule step out");
  expect_close(state, "delta rule step state");
}

}  // namespace
}  // namespace tessel::cuda_test
