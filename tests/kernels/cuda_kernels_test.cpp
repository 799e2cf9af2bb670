// Every CUDA kernel against the CPU reference on random inputs (fp32: relative error ≤ 1e-5,
// gradients too), part 1: memory, elementwise, embeddings, norms, activations, linear and gemm,
// RoPE, cross-entropy and AdamW. Attention and the MoE / CP kernels: cuda_attention_test.cpp,
// cuda_moe_test.cpp. Skipped without a device.
#include "cuda_twin.h"

namespace tessel::cuda_test {
namespace {

std::string precision_name(Precision precision) {
  return precision == Precision::BF16 ? "bf16 " : precision == Precision::FP16 ? "fp16 " : "fp32 ";
}

TEST_F(CudaKernels, MemoryIsZeroFilledAndRoundTrips) {
  const DeviceMemory& m = cuda_memory();
  const int64_t n = 1000;
  float* p = static_cast<float*>(m.alloc(n * 4));
  float* q = static_cast<float*>(m.alloc(n * 4));
  std::vector<float> back(n, 1.0f), values = uniform(rng, n);
  m.to_host(back.data(), p, n * 4);
  EXPECT_EQ(back, std::vector<float>(n, 0.0f));
  m.from_host(p, values.data(), n * 4);
  m.copy(q, p, n * 4);
  m.to_host(back.data(), q, n * 4);
  EXPECT_EQ(back, values);
  m.zero(q + 10, 20 * 4);
  m.to_host(back.data(), q, n * 4);
  EXPECT_EQ(back[9], values[9]);
  EXPECT_EQ(back[10], 0.0f);
  EXPECT_EQ(back[29], 0.0f);
  EXPECT_EQ(back[30], values[30]);
  m.release(p);
  m.release(q);
  EXPECT_TRUE(cuda_is_device_pointer(cuda_kernels().zeros({4}).data()));
  EXPECT_FALSE(cuda_is_device_pointer(values.data()));
}

TEST_F(CudaKernels, Elementwise) {
  const int64_t n = 300001;  // several reduction blocks and a ragged end
  Floats x = random_floats(rng, n), a = random_floats(rng, n), out = poisoned(n);
  run_both([&](const Kernels& k) {
    k.scale(x.on(k), 0.37f, n);
    k.residual_forward(out.on(k), x.on(k), a.on(k), n);
    k.residual_forward(a.on(k), a.on(k), x.on(k), n);  // out = a: an accumulation
  });
  expect_close(x, "scale");
  expect_close(out, "residual_forward");
  expect_close(a, "residual_forward in place");
  auto [cpu, cuda] = both_results([&](const Kernels& k) { return k.sum_squares(x.on(k), n, 2.5); });
  expect_close(cuda, cpu, "sum_squares", 1e-9);
  Ints ids = random_ints(rng, n, 0, 50);
  auto none =
      both_results([&](const Kernels& k) { return k.find_out_of_range(ids.on(k), n, 0, 50); });
  EXPECT_EQ(none.second, -1);
  auto first =
      both_results([&](const Kernels& k) { return k.find_out_of_range(ids.on(k), n, 3, 47); });
  EXPECT_EQ(first.second, first.first);
}

TEST_F(CudaKernels, Embedding) {
  const int64_t N = 300, C = 72, V = 40, P = 64;
  Floats wte = random_floats(rng, V * C), wpe = random_floats(rng, P * C);
  Ints tokens = random_ints(rng, N, -1, V), positions = random_ints(rng, N, 0, P);
  Floats out = poisoned(N * C), out_no_pos = poisoned(N * C), dout = random_floats(rng, N * C);
  Floats dwte = random_floats(rng, V * C), dwpe = random_floats(rng, P * C);
  Ints local = Ints(std::vector<int32_t>(N, 7));
  run_both([&](const Kernels& k) {
    k.embedding_forward(out.on(k), tokens.on(k), positions.on(k), wte.on(k), wpe.on(k), N, C);
    k.embedding_forward(out_no_pos.on(k), tokens.on(k), nullptr, wte.on(k), nullptr, N, C);
    k.embedding_backward(dwte.on(k), dwpe.on(k), dout.on(k), tokens.on(k), positions.on(k), N, C);
    k.embedding_shard_ids(local.on(k), tokens.on(k), N, 10, 20);
  });
  expect_close(out, "embedding_forward");
  expect_close(out_no_pos, "embedding_forward without positions");
  expect_close(dwte, "embedding_backward dwte");
  expect_close(dwpe, "embedding_backward dwpe");
  expect_equal(local, "embedding_shard_ids");
}

TEST_F(CudaKernels, Norms) {
  const int64_t N = 517, C = 200;  // more rows than one column chunk, C not a multiple of 32
  Floats inp = random_floats(rng, N * C, -2, 3), w = random_floats(rng, C),
         bias = random_floats(rng, C);
  Floats out = poisoned(N * C), mean = poisoned(N), rstd = poisoned(N),
         dout = random_floats(rng, N * C);
  Floats dinp = random_floats(rng, N * C), dw = random_floats(rng, C), db = random_floats(rng, C);
  Floats rms_out = poisoned(N * C), rms_rstd = poisoned(N), rms_dinp = random_floats(rng, N * C);
  Floats rms_dw = random_floats(rng, C), dw_only = random_floats(rng, C);
  run_both([&](const Kernels& k) {
    k.layernorm_forward(out.on(k), mean.on(k), rstd.on(k), inp.on(k), w.on(k), bias.on(k), N, C,
                        1e-5f);
    k.layernorm_backward(dinp.on(k), dw.on(k), db.on(k), dout.on(k), inp.on(k), w.on(k), mean.on(k),
                         rstd.on(k), N, C);
    k.layernorm_backward(nullptr, dw_only.on(k), nullptr, dout.on(k), inp.on(k), w.on(k),
                         mean.on(k), rstd.on(k), N, C);
    k.rmsnorm_forward(rms_out.on(k), rms_rstd.on(k), inp.on(k), w.on(k), N, C, 1e-6f, 0.0f);
    k.rmsnorm_backward(rms_dinp.on(k), rms_dw.on(k), dout.on(k), inp.on(k), w.on(k), rms_rstd.on(k),
                       N, C, 0.0f);
  });
  expect_close(out, "layernorm out");
  expect_close(mean, "layernorm mean");
  expect_close(rstd, "layernorm rstd");
  expect_close(dinp, "layernorm dinp");
  expect_close(dw, "layernorm dweight");
  expect_close(db, "layernorm dbias");
  expect_close(dw_only, "layernorm dweight alone");
  expect_close(rms_out, "rmsnorm out");
  expect_close(rms_rstd, "rmsnorm rstd");
  expect_close(rms_dinp, "rmsnorm dinp");
  expect_close(rms_dw, "rmsnorm dweight");
}

TEST_F(CudaKernels, Activations) {
  const int64_t N = 123, C = 97, n = N * C;
  Floats x = random_floats(rng, n, -4, 4), up = random_floats(rng, n), dout = random_floats(rng, n);
  Floats gelu = poisoned(n), dgelu = random_floats(rng, n), swiglu = poisoned(n);
  Floats gelu_erf = poisoned(n), dgelu_erf = random_floats(rng, n);
  Floats dgate = random_floats(rng, n), dup = random_floats(rng, n),
         dgate_only = random_floats(rng, n);
  Floats gate = random_floats(rng, N, -3, 3), gated = random_floats(rng, n);
  Floats dy = poisoned(n), dlogit = poisoned(N);
  run_both([&](const Kernels& k) {
    k.gelu_forward(gelu.on(k), x.on(k), n);
    k.gelu_backward(dgelu.on(k), dout.on(k), x.on(k), n);
    k.gelu_erf_forward(gelu_erf.on(k), x.on(k), n);
    k.gelu_erf_backward(dgelu_erf.on(k), dout.on(k), x.on(k), n);
    k.swiglu_forward(swiglu.on(k), x.on(k), up.on(k), n);
    k.swiglu_backward(dgate.on(k), dup.on(k), dout.on(k), x.on(k), up.on(k), n);
    k.swiglu_backward(dgate_only.on(k), nullptr, dout.on(k), x.on(k), up.on(k), n);
    k.sigmoid_gate_forward(gated.on(k), gate.on(k), up.on(k), N, C);
    k.sigmoid_gate_backward(dy.on(k), dlogit.on(k), dout.on(k), up.on(k), gate.on(k), N, C);
  });
  expect_close(gelu, "gelu_forward");
  expect_close(dgelu, "gelu_backward");
  expect_close(gelu_erf, "gelu_erf_forward");
  expect_close(dgelu_erf, "gelu_erf_backward");
  expect_close(swiglu, "swiglu_forward");
  expect_close(dgate, "swiglu_backward dgate");
  expect_close(dup, "swiglu_backward dup");
  expect_close(dgate_only, "swiglu_backward dgate alone");
  expect_close(gate, "sigmoid_gate_forward gate");
  expect_close(gated, "sigmoid_gate_forward out");
  expect_close(dy, "sigmoid_gate_backward dy");
  expect_close(dlogit, "sigmoid_gate_backward dlogit");
}

// fp32, bf16 and fp16 (both sides round the same operands: only the fp32 sums' order differs).
TEST_F(CudaKernels, LinearBothLayouts) {
  const int64_t N = 130, IC = 96, OC = 72;
  for (Precision precision : {Precision::FP32, Precision::BF16, Precision::FP16}) {
    for (WeightLayout layout : {WeightLayout::InOut, WeightLayout::OutIn}) {
      Floats inp = random_floats(rng, N * IC), w = random_floats(rng, IC * OC),
             b = random_floats(rng, OC);
      Floats out = poisoned(N * OC), dout = random_floats(rng, N * OC);
      Floats dinp = random_floats(rng, N * IC), dw = random_floats(rng, IC * OC),
             db = random_floats(rng, OC);
      Floats dw_only = random_floats(rng, IC * OC);
      run_both([&](const Kernels& k) {
        k.linear_forward(out.on(k), inp.on(k), w.on(k), b.on(k), N, IC, OC, layout);
        k.linear_backward(dinp.on(k), dw.on(k), db.on(k), dout.on(k), inp.on(k), w.on(k), N, IC,
                          OC, layout);
        k.linear_backward(nullptr, dw_only.on(k), nullptr, dout.on(k), inp.on(k), w.on(k), N, IC,
                          OC, layout);
        k.bias_forward(out.on(k), b.on(k), N, OC);
        k.bias_backward(db.on(k), dout.on(k), N, OC);
      }, precision);
      const std::string name = precision_name(precision) +
                               (layout == WeightLayout::InOut ? "InOut " : "OutIn ");
      expect_close(out, name + "linear_forward + bias_forward");
      expect_close(dinp, name + "dinp");
      expect_close(dw, name + "dweight");
      expect_close(db, name + "dbias");
      expect_close(dw_only, name + "dweight alone");
    }
  }
}

// Transposes, strides wider than the rows, an operand at an odd offset (cuBLASLt's alignment),
// alpha and beta, and K = 0 (C = beta · C); fp32, and bf16 and fp16 against the CPU's emulation.
TEST_F(CudaKernels, GemmShapes) {
  const int64_t M = 67, N = 45, K = 33, ld = 80;
  for (Precision precision : {Precision::FP32, Precision::BF16, Precision::FP16}) {
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      Floats A = random_floats(rng, ld * 80 + 1), B = random_floats(rng, ld * 80),
             C = random_floats(rng, M * ld);
      run_both([&](const Kernels& k) {
        k.gemm(ta, tb, M, N, K, 0.5f, A.on(k) + 1, ld, B.on(k), ld, 0.25f, C.on(k), ld);
        k.gemm(ta, tb, M, 30, 0, 0.5f, A.on(k), ld, B.on(k), ld, 2.0f, C.on(k) + N, ld);
      }, precision);
      expect_close(C, precision_name(precision) +
                          "gemm trans_a " + std::to_string(ta) + " trans_b " + std::to_string(tb));
    }
  }
  const GemmStats before = cuda_kernels().gemm_stats();
  cuda_kernels().gemm_stats_reset();
  cuda_kernels().gemm_stats_enable(true);
  Floats A = random_floats(rng, M * K), B = random_floats(rng, K * N), C = poisoned(M * N);
  cuda_kernels().gemm(false, false, M, N, K, 1.0f, A.on(cuda_kernels()), K, B.on(cuda_kernels()), N,
                      0.0f, C.on(cuda_kernels()), N);
  cuda_kernels().gemm_stats_enable(false);
  const GemmStats stats = cuda_kernels().gemm_stats();
  EXPECT_EQ(stats.calls, 1) << "before: " << before.calls;
  EXPECT_EQ(stats.flops, 2.0 * M * N * K);
  EXPECT_GT(stats.seconds, 0.0);
}

TEST_F(CudaKernels, Rope) {
  const int64_t P = 300, D = 48, N = 257, heads = 3, ld = 5 * D;
  Floats cos = poisoned(P * D / 2), sin = poisoned(P * D / 2);
  Floats x = random_floats(rng, N * ld), dx = random_floats(rng, N * ld);
  Ints positions = random_ints(rng, N, 0, P);
  run_both([&](const Kernels& k) {
    k.rope_tables(cos.on(k), sin.on(k), P, D, 10000.0f);
    k.rope_forward(x.on(k) + D, positions.on(k), cos.on(k), sin.on(k), N, heads, D, D, ld);
    k.rope_backward(dx.on(k), positions.on(k), cos.on(k), sin.on(k), N, heads, D, D, ld);
  });
  expect_close(cos, "rope cos");
  expect_close(sin, "rope sin");
  expect_close(x, "rope_forward");
  expect_close(dx, "rope_backward");
}

// A vocabulary shard: columns [100, 100 + V) of which V_valid are real; targets in and out of it,
// and ignored ones (-1: no loss, no gradient).
TEST_F(CudaKernels, CrossEntropyShard) {
  const int64_t N = 70, V = 1300, V_valid = 1234, start = 100;
  Floats logits = random_floats(rng, N * V, -6, 6);
  std::vector<int32_t> target_values = random_ints(rng, N, 0, 1600).cpu();
  for (int64_t n = 0; n < N; n += 9) target_values[n] = -1;
  Ints targets(target_values);
  Floats row_max = poisoned(N), row_sumexp = poisoned(N), target_logit = poisoned(N);
  Floats global_max = random_floats(rng, N, 6, 7), lse = poisoned(N), dlogits = poisoned(N * V);
  run_both([&](const Kernels& k) {
    k.cross_entropy_partial_forward(row_max.on(k), row_sumexp.on(k), target_logit.on(k),
                                    logits.on(k), targets.on(k), start, N, V, V_valid);
  });
  expect_close(row_max, "row_max");
  expect_close(row_sumexp, "row_sumexp");
  expect_close(target_logit, "target_logit");
  run_both([&](const Kernels& k) {
    k.cross_entropy_rescale(row_sumexp.on(k), row_max.on(k), global_max.on(k), N);
  });
  expect_close(row_sumexp, "cross_entropy_rescale");
  auto [cpu, cuda] = both_results([&](const Kernels& k) {
    return k.cross_entropy_finish(lse.on(k), global_max.on(k), row_sumexp.on(k), target_logit.on(k),
                                  targets.on(k), N);
  });
  expect_close(cuda, cpu, "cross_entropy_finish");
  expect_close(lse, "lse");
  run_both([&](const Kernels& k) {
    k.cross_entropy_backward(dlogits.on(k), logits.on(k), lse.on(k), targets.on(k), start, 0.01f, N,
                             V, V_valid);
    k.cross_entropy_backward(logits.on(k), logits.on(k), lse.on(k), targets.on(k), start, 0.01f, N,
                             V,
                             V_valid);  // in place
  });
  expect_close(dlogits, "cross_entropy_backward");
  expect_close(logits, "cross_entropy_backward in place");
}

TEST_F(CudaKernels, AdamW) {
  const int64_t n = 100003;
  Floats param = random_floats(rng, n), grad = random_floats(rng, n),
         m = random_floats(rng, n, -0.1f, 0.1f);
  Floats v = random_floats(rng, n, 0.0f, 0.01f);
  run_both([&](const Kernels& k) {
    for (int64_t step = 1; step <= 3; ++step)
      k.adamw_update(param.on(k), grad.on(k), m.on(k), v.on(k), n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                     step);
  });
  expect_close(param, "adamw param");
  expect_close(m, "adamw m");
  expect_close(v, "adamw v");
}

}  // namespace
}  // namespace tessel::cuda_test
