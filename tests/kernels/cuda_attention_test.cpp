// The CUDA attention kernels against the CPU reference (fp32, relative error ≤ 1e-5, gradients
// too): causal and full attention with grouped-query heads over a fused q/k/v buffer, the block
// interface of context parallelism (global positions, rows that see no key, unsorted keys) and
// the merge of partial results. Skipped without a device.
#include <numeric>

#include "cuda_twin.h"

namespace tessel::cuda_test {
namespace {

struct AttentionShape {
  int64_t B, Tq, Tk, H, G, D;
};

// q, k, v as views of one fused row (q heads, then k, then v), as the model's qkv projection.
void check_attention(std::mt19937& rng, AttentionShape s, bool causal, const std::string& name) {
  const int64_t ld = (s.H + 2 * s.G) * s.D + 8;  // wider than the heads: a fused buffer's stride
  const int64_t T = s.Tq;
  Floats qkv = random_floats(rng, s.B * T * ld, -2, 2), dqkv = random_floats(rng, s.B * T * ld);
  Floats out = poisoned(s.B * T * s.H * s.D), lse = poisoned(s.B * s.H * T);
  Floats dout = random_floats(rng, s.B * T * s.H * s.D);
  const int64_t k_off = s.H * s.D, v_off = (s.H + s.G) * s.D;
  run_both([&](const Kernels& k) {
    float* base = qkv.on(k);
    float* dbase = dqkv.on(k);
    k.attention_forward(out.on(k), lse.on(k), base, base + k_off, base + v_off, s.B, T, s.H, s.G,
                        s.D, ld, ld, ld, causal, tessel::DropoutSite{});
    k.attention_backward(dbase, dbase + k_off, dbase + v_off, dout.on(k), base, base + k_off,
                         base + v_off, out.on(k), lse.on(k), s.B, T, s.H, s.G, s.D, ld, ld, ld,
                         causal, tessel::DropoutSite{});
  });
  expect_close(out, name + " out");
  expect_close(lse, name + " lse");
  expect_close(dqkv, name + " dq, dk, dv");
}

TEST_F(CudaKernels, AttentionCausalAndFull) {
  check_attention(rng, {2, 77, 77, 4, 2, 32}, true, "causal GQA D32");
  check_attention(rng, {1, 100, 100, 3, 3, 64}, true, "causal MHA D64");
  check_attention(rng, {2, 45, 45, 4, 1, 16}, false, "full MQA D16");
  check_attention(rng, {1, 40, 40, 2, 2, 128}, true, "causal D128");
}

// Context parallelism's blocks: CP 2, rank 0 holds chunks 0 and 3 of 4 (positions 0..7, 24..31);
// its queries against the key blocks of either rank, and a key block in no sorted order. Queries
// 0..7 against rank 1's keys (8..23) see nothing: out 0, lse -inf, no gradient. Packed documents:
// each row also sees only keys from its document's first position (key_start, different per batch
// item), including documents that begin inside another rank's chunk.
TEST_F(CudaKernels, AttentionBlocks) {
  const int64_t B = 2, H = 4, G = 2, D = 32, Tq = 16, Tk = 16;
  std::vector<int32_t> rank0(Tq), rank1(Tk), shuffled(Tk);
  for (int32_t t = 0; t < 8; ++t)
    rank0[t] = t, rank0[8 + t] = 24 + t, rank1[t] = 8 + t, rank1[8 + t] = 16 + t;
  std::iota(shuffled.begin(), shuffled.end(), 0);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  for (int32_t& p : shuffled) p = rank0[p];
  Ints q_pos(rank0);
  std::vector<int32_t> starts(B * Tq);  // batch 0: documents from 0, 5, 20, 27; batch 1: 0, 12, 30
  for (int64_t t = 0; t < Tq; ++t) {
    const int32_t p = rank0[t];
    starts[t] = p >= 27 ? 27 : p >= 20 ? 20 : p >= 5 ? 5 : 0;
    starts[Tq + t] = p >= 30 ? 30 : p >= 12 ? 12 : 0;
  }
  Ints key_start(starts);
  struct Case {
    std::vector<int32_t> keys;
    const char* name;
    bool packed;
  };
  for (const Case& c : {Case{rank0, "own block", false}, Case{rank1, "other rank's block", false},
                        Case{shuffled, "unsorted keys", false}, Case{rank0, "own block packed", true},
                        Case{rank1, "other rank's block packed", true},
                        Case{shuffled, "unsorted keys packed", true}}) {
    Ints k_pos(c.keys);
    Floats q = random_floats(rng, B * Tq * H * D), k = random_floats(rng, B * Tk * G * D);
    Floats v = random_floats(rng, B * Tk * G * D), dout = random_floats(rng, B * Tq * H * D);
    Floats out = poisoned(B * Tq * H * D), lse = poisoned(B * H * Tq);
    Floats dq = random_floats(rng, B * Tq * H * D), dk = random_floats(rng, B * Tk * G * D);
    Floats dv = random_floats(rng, B * Tk * G * D), dv_only = random_floats(rng, B * Tk * G * D);
    run_both([&](const Kernels& kt) {
      const int32_t* starts_on = c.packed ? key_start.on(kt) : nullptr;
      kt.attention_block_forward(out.on(kt), lse.on(kt), q.on(kt), k.on(kt), v.on(kt), B, Tq, Tk, H,
                                 G, D, H * D, G * D, G * D, q_pos.on(kt), k_pos.on(kt),
                                  starts_on, tessel::DropoutSite{});
      kt.attention_block_backward(dq.on(kt), dk.on(kt), dv.on(kt), dout.on(kt), q.on(kt), k.on(kt),
                                  v.on(kt), out.on(kt), lse.on(kt), B, Tq, Tk, H, G, D, H * D,
                                  G * D, G * D, q_pos.on(kt), k_pos.on(kt),
                                  starts_on, tessel::DropoutSite{});
      kt.attention_block_backward(nullptr, nullptr, dv_only.on(kt), dout.on(kt), q.on(kt), k.on(kt),
                                  v.on(kt), out.on(kt), lse.on(kt), B, Tq, Tk, H, G, D, H * D,
                                  G * D, G * D, q_pos.on(kt), k_pos.on(kt),
                                  starts_on, tessel::DropoutSite{});
    });
    const std::string n = c.name;
    expect_close(out, n + " out");
    expect_close(lse, n + " lse");
    expect_close(dq, n + " dq");
    expect_close(dk, n + " dk");
    expect_close(dv, n + " dv");
    expect_close(dv_only, n + " dv alone");
  }
}

TEST_F(CudaKernels, AttentionMerge) {
  const int64_t B = 2, T = 33, H = 3, D = 40;
  Floats out = random_floats(rng, B * T * H * D), block_out = random_floats(rng, B * T * H * D);
  std::vector<float> lse = uniform(rng, B * H * T, -3, 3),
                     block_lse = uniform(rng, B * H * T, -3, 3);
  for (int64_t r = 0; r < B * H * T; r += 7) lse[r] = -INFINITY;         // no key seen so far
  for (int64_t r = 3; r < B * H * T; r += 11) block_lse[r] = -INFINITY;  // none in the block
  Floats lse_t(lse), block_lse_t(block_lse);
  run_both([&](const Kernels& k) {
    k.attention_merge(out.on(k), lse_t.on(k), block_out.on(k), block_lse_t.on(k), B, T, H, D);
  });
  expect_close(out, "attention_merge out");
  expect_close(lse_t, "attention_merge lse");
}

}  // namespace
}  // namespace tessel::cuda_test
