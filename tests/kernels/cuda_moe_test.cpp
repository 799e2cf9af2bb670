// The CUDA Mixture-of-Experts and context-parallel row kernels against the CPU reference: the
// router's top-k with each score function, its losses and the capacity drop; counting, slotting,
// permuting and combining the routed rows; the CP row movement. Skipped without a device.
#include <numeric>

#include "cuda_twin.h"

namespace tessel::cuda_test {
namespace {

constexpr int64_t N = 1500, E = 8, K = 2;  // more assignments than one block of the slot scan

TEST_F(CudaKernels, RouterTopk) {
  const struct {
    RouterScore score;
    bool pre_softmax;
    const char* name;
  } modes[] = {{RouterScore::Softmax, false, "softmax"},
               {RouterScore::Softmax, true, "softmax, pre_softmax"},
               {RouterScore::Sigmoid, false, "sigmoid"}};
  for (const auto& m : modes) {
    for (int64_t k : {int64_t{1}, K}) {
      Floats logits = random_floats(rng, N * E, -3, 3), probs = poisoned(N * k);
      Ints experts(std::vector<int32_t>(N * k, -7));
      Floats dprobs = random_floats(rng, N * k), dlogits = random_floats(rng, N * E);
      run_both([&](const Kernels& kt) {
        kt.moe_topk_forward(experts.on(kt), probs.on(kt), logits.on(kt), N, E, k, m.score,
                            m.pre_softmax);
        kt.moe_topk_backward(dlogits.on(kt), dprobs.on(kt), logits.on(kt), experts.on(kt),
                             probs.on(kt), N, E, k, m.score, m.pre_softmax);
      });
      const std::string name = std::string(m.name) + " k=" + std::to_string(k);
      expect_equal(experts, name + " experts");
      expect_close(probs, name + " probs");
      expect_close(dlogits, name + " dlogits");
    }
  }
}

TEST_F(CudaKernels, RouterLosses) {
  for (RouterScore score : {RouterScore::Softmax, RouterScore::Sigmoid}) {
    Floats logits = random_floats(rng, N * E, -3, 3), scores = poisoned(N * E);
    Floats counts = random_floats(rng, E, 0, 500), dlogits = random_floats(rng, N * E),
           lse = poisoned(N);
    Floats saved_lse = random_floats(rng, N, 1, 3);
    run_both([&](const Kernels& k) {
      k.moe_aux_scores_forward(scores.on(k), logits.on(k), N, E, score);
      k.moe_aux_loss_backward(dlogits.on(k), logits.on(k), scores.on(k), counts.on(k), N, E, K,
                              2 * N, 0.01f, 0.5f, score);
      k.moe_z_loss_backward(dlogits.on(k), logits.on(k), saved_lse.on(k), N, E, 0.001f, 0.5f);
    });
    expect_close(scores, "aux scores");
    expect_close(dlogits, "aux and z loss backward");
    auto aux = both_results([&](const Kernels& k) {
      return k.moe_aux_loss_forward(scores.on(k), counts.on(k), N, E, K, 2 * N, 0.01f);
    });
    expect_close(aux.second, aux.first, "moe_aux_loss_forward");
    auto z = both_results([&](const Kernels& k) {
      return k.moe_z_loss_forward(lse.on(k), logits.on(k), N, E, 0.001f);
    });
    expect_close(z.second, z.first, "moe_z_loss_forward");
    expect_close(lse, "z loss lse");
  }
}

// Probabilities with ties (a few values only), so the tie rule (lower index first) decides.
TEST_F(CudaKernels, CapacityDropCountAndSlots) {
  Ints experts = random_ints(rng, N * K, 0, E);
  std::vector<float> tied(N * K);
  std::uniform_int_distribution<int> level(0, 5);
  for (float& p : tied) p = 0.1f * level(rng);
  Floats probs(tied), counts = poisoned(E), kept_counts = poisoned(E);
  Ints keep(std::vector<int32_t>(N * K, 5)), slot_row(std::vector<int32_t>(N * K, -9));
  std::vector<int32_t> first(E);
  for (int64_t e = 0; e < E; ++e) first[e] = static_cast<int32_t>(e * 1000);
  Ints cursor(first);
  auto dropped = both_results([&](const Kernels& k) {
    return k.moe_capacity_drop(keep.on(k), experts.on(k), probs.on(k), N, E, K, N * K / E / 2);
  });
  EXPECT_EQ(dropped.second, dropped.first);
  EXPECT_GT(dropped.first, 0);
  expect_equal(keep, "capacity keep");
  run_both([&](const Kernels& k) {
    k.moe_count_assignments(counts.on(k), experts.on(k), nullptr, N * K, E);
    k.moe_count_assignments(kept_counts.on(k), experts.on(k), keep.on(k), N * K, E);
    k.moe_assign_slots(slot_row.on(k), cursor.on(k), experts.on(k), keep.on(k), N * K);
  });
  expect_close(counts, "counts", 0.0);
  expect_close(kept_counts, "kept counts", 0.0);
  expect_equal(slot_row, "slot_row");
  expect_equal(cursor, "cursor");
}

TEST_F(CudaKernels, PermuteAndCombine) {
  const int64_t C = 100;
  // A slot per kept assignment, in a scrambled order; every 5th dropped.
  std::vector<int32_t> slots(N * K);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  for (int64_t a = 0; a < N * K; a += 5) slots[a] = -1;
  Ints slot_row(slots);
  const int64_t rows = N * K;
  Floats x = random_floats(rng, N * C), send = random_floats(rng, rows * C),
         dx = random_floats(rng, N * C);
  Floats combined = random_floats(rng, rows * C), probs = random_floats(rng, N * K, 0, 1);
  Floats out = poisoned(N * C), dout = random_floats(rng, N * C), d_probs = poisoned(N * K);
  Floats d_combined = random_floats(rng, rows * C), d_send = random_floats(rng, rows * C);
  run_both([&](const Kernels& k) {
    k.moe_permute_forward(send.on(k), x.on(k), slot_row.on(k), N, K, C);
    k.moe_permute_backward(dx.on(k), d_send.on(k), slot_row.on(k), N, K, C);
    k.moe_unpermute_forward(out.on(k), combined.on(k), probs.on(k), slot_row.on(k), N, K, C);
    k.moe_unpermute_backward(d_probs.on(k), d_combined.on(k), dout.on(k), combined.on(k),
                             probs.on(k), slot_row.on(k), N, K, C);
  });
  expect_close(send, "moe_permute_forward");
  expect_close(dx, "moe_permute_backward");
  expect_close(out, "moe_unpermute_forward");
  expect_close(d_probs, "moe_unpermute_backward d_probs");
  expect_close(d_combined, "moe_unpermute_backward d_combined");

  const int64_t G = 3, n = N * K;
  Ints experts = random_ints(rng, n, 0, E);
  Floats choices = poisoned(2 * n), gathered = random_floats(rng, G * 2 * n, 0, 1);
  std::vector<float> g = gathered.cpu();
  for (int64_t r = 0; r < G; ++r)
    for (int64_t a = 0; a < n; ++a)
      g[2 * n * r + a] = static_cast<float>((a + r) % E);  // expert ids
  Floats gathered_ids(g), unpacked_probs = poisoned(G * n);
  Ints unpacked(std::vector<int32_t>(G * n, -1));
  run_both([&](const Kernels& k) {
    k.moe_pack_choices(choices.on(k), experts.on(k), probs.on(k), n);
    k.moe_unpack_choices(unpacked.on(k), unpacked_probs.on(k), gathered_ids.on(k), G, n);
  });
  expect_close(choices, "moe_pack_choices");
  expect_equal(unpacked, "moe_unpack_choices experts");
  expect_close(unpacked_probs, "moe_unpack_choices probs");
}

// CP 2 over T = 16: rank 1 holds positions 4..7 and 8..11.
TEST_F(CudaKernels, ContextParallelRows) {
  const int64_t B = 3, T = 16, T_l = 8, width = 24, CP = 2, ld = 40;
  std::vector<int32_t> all(CP * T_l);
  for (int64_t r = 0; r < CP; ++r)
    for (int64_t t = 0; t < T_l / 2; ++t) {
      all[r * T_l + t] = static_cast<int32_t>(r * T_l / 2 + t);
      all[r * T_l + T_l / 2 + t] = static_cast<int32_t>(T - (r + 1) * T_l / 2 + t);
    }
  Ints positions(all), tokens = random_ints(rng, B * T * 2, 0, 1000),
                       taken(std::vector<int32_t>(B * T_l * 2, -1));
  const int64_t rows = B * T_l;
  Floats k = random_floats(rng, rows * ld), v = random_floats(rng, rows * ld),
         kv = poisoned(2 * rows * width);
  Floats dk = random_floats(rng, rows * ld), dv = random_floats(rng, rows * ld),
         kv_grad = random_floats(rng, 2 * rows * width);
  // Destinations with columns a call leaves alone start random, not poisoned.
  const int64_t col_ld = CP * width + 3;
  Floats rank_major = random_floats(rng, CP * rows * width), global = random_floats(rng, B * T * ld);
  Floats back = poisoned(CP * rows * width), columns = random_floats(rng, rows * col_ld),
         column_blocks = poisoned(CP * rows * width), columns_back = random_floats(rng, rows * col_ld);
  run_both([&](const Kernels& kt) {
    kt.cp_take_rows(taken.on(kt), tokens.on(kt), positions.on(kt) + T_l, B, T, T_l, 2);
    kt.cp_pack_kv(kv.on(kt), k.on(kt), v.on(kt), rows, width, ld, ld);
    kt.cp_unpack_add_kv(dk.on(kt), dv.on(kt), kv_grad.on(kt), rows, width, ld, ld);
    kt.cp_rows_to_global(global.on(kt), ld, rank_major.on(kt), rows * width, positions.on(kt), CP, B, T_l, width);
    kt.cp_rows_from_global(back.on(kt), rows * width, global.on(kt), ld, positions.on(kt), CP, B, T_l, width);
    kt.cp_columns_to_ranks(column_blocks.on(kt), rows * width, columns.on(kt), col_ld, rows, CP, width);
    kt.cp_columns_from_ranks(columns_back.on(kt), col_ld, column_blocks.on(kt), rows * width, rows, CP, width);
  });
  expect_equal(taken, "cp_take_rows");
  expect_close(kv, "cp_pack_kv");
  expect_close(dk, "cp_unpack_add_kv dk");
  expect_close(dv, "cp_unpack_add_kv dv");
  expect_close(global, "cp_rows_to_global");
  expect_close(back, "cp_rows_from_global");
  expect_close(column_blocks, "cp_columns_to_ranks");
  expect_close(columns_back, "cp_columns_from_ranks");
}

}  // namespace
}  // namespace tessel::cuda_test
