// ---- seed example 11 (十七): context parallel --------------------------------------------------
// A sequence of 8 positions over CP 2. Causal attention makes later positions costlier (position t
// attends to t + 1 keys), so Megatron cuts the sequence into 2·CP = 4 chunks and gives rank r the
// chunks r and 3 − r: rank 0 positions 0, 1, 6, 7, rank 1 positions 2, 3, 4, 5, the same share of
// the causal triangle each (the seed's simple split, 0–3 and 4–7, would not be). Each rank holds
// Q, K and V of its own positions only; the K/V blocks travel around the CP ring, and at each step
// a rank attends its queries to the block it holds — a partial result with its log-sum-exp (lse)
// — and merges it into what it has by lse. This is tessel's own ring (ContextParallel, p2p), run
// with its step hook on. The check: full causal attention over the whole sequence in one process.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "demo_output.h"
#include "demo_runs.h"
#include "tessel/core/philox.h"
#include "tessel/kernels/kernels.h"
#include "tessel/parallel/context_parallel.h"

namespace tessel {

namespace {

constexpr int64_t kHeads = 1, kHeadDim = 2;  // one head of 2 dimensions: short lines to read
constexpr int64_t kWidth = kHeads * kHeadDim;

// "[[a, b], [c, d]]": `rows` rows of kWidth values.
std::string rows_text(const float* values, int64_t rows) {
  std::vector<std::string> each;
  for (int64_t r = 0; r < rows; ++r) each.push_back(list_text(values + r * kWidth, kWidth));
  return fmt::format("[{}]", fmt::join(each, ", "));
}

// The query-key pairs causal attention computes for these query positions.
int64_t causal_pairs(const std::vector<int32_t>& positions) {
  int64_t pairs = 0;
  for (int32_t p : positions) pairs += p + 1;
  return pairs;
}

}  // namespace

void demo_cp(ProcessGroups& groups, int64_t T, uint64_t seed) {
  Comm& world = groups.world();
  ContextParallel cp(groups.cp(), CpCommType::P2P, cpu_kernels());
  const int rank = cp.rank(), ranks = cp.size();
  const int64_t T_l = T / ranks, chunks = 2 * ranks, chunk = T / chunks;

  // Q, K, V of the whole sequence (T, H·D), alike on every rank; each rank keeps its own rows.
  std::vector<float> q(T * kWidth), k(T * kWidth), v(T * kWidth);
  for (int64_t i = 0; i < T * kWidth; ++i) {
    q[i] = random_normal(seed, 0, i);
    k[i] = random_normal(seed, 1, i);
    v[i] = random_normal(seed, 2, i);
  }
  const std::vector<int32_t> positions = cp.local_positions(T);
  std::vector<float> q_l(T_l * kWidth), k_l(T_l * kWidth), v_l(T_l * kWidth);  // (T_l, H·D)
  for (int64_t t = 0; t < T_l; ++t)
    for (int64_t c = 0; c < kWidth; ++c) {
      q_l[t * kWidth + c] = q[positions[t] * kWidth + c];
      k_l[t * kWidth + c] = k[positions[t] * kWidth + c];
      v_l[t * kWidth + c] = v[positions[t] * kWidth + c];
    }

  // Each step of the ring, as this rank saw it (printed below, step by step for both ranks).
  std::vector<std::string> steps(ranks);
  cp.on_ring_step = [&](const ContextParallel::RingStep& s) {
    const std::vector<int32_t> kv = context_parallel_positions(T, ranks, s.kv_rank);
    std::string& text = steps[s.step];
    text = fmt::format("rank {} step {}: K/V of positions {} ({}) → partial lse {}, out {}\n", rank,
                       s.step, fmt::join(kv, ", "),
                       s.kv_rank == rank ? "its own" : fmt::format("from rank {}", s.kv_rank),
                       list_text(s.block_lse, kHeads * T_l), rows_text(s.block_out, T_l));
    if (s.step > 0)
      text += fmt::format("rank {} merged by lse: lse {}, out {}\n", rank,
                          list_text(s.lse, kHeads * T_l), rows_text(s.out, T_l));
  };
  std::vector<float> out(T_l * kWidth), lse(kHeads * T_l);  // (1, T_l, H·D), (1, H, T_l)
  cp.attention_forward(out.data(), lse.data(), q_l.data(), k_l.data(), v_l.data(), 1, T_l, kHeads,
                       kHeads, kHeadDim, kWidth, kWidth, kWidth);

  // The check: causal attention over all T positions in one process, at this rank's positions.
  std::vector<float> ref_out(T * kWidth), ref_lse(kHeads * T);
  cpu_kernels().attention_forward(ref_out.data(), ref_lse.data(), q.data(), k.data(), v.data(), 1,
                                  T, kHeads, kHeads, kHeadDim, kWidth, kWidth, kWidth, true, {});
  std::vector<float> ref_mine_out(T_l * kWidth), ref_mine_lse(kHeads * T_l);
  for (int64_t t = 0; t < T_l; ++t) {
    std::copy_n(ref_out.begin() + positions[t] * kWidth, kWidth, ref_mine_out.begin() + t * kWidth);
    for (int64_t h = 0; h < kHeads; ++h) ref_mine_lse[h * T_l + t] = ref_lse[h * T + positions[t]];
  }
  const float diff = std::max(max_abs_difference(out.data(), ref_mine_out.data(), T_l * kWidth),
                              max_abs_difference(lse.data(), ref_mine_lse.data(), kHeads * T_l));

  print_from_rank0(
      world, fmt::format("seed example 11: a sequence of {} positions over CP {}, causal attention "
                         "({} head of {} dims)\nposition t attends to t + 1 keys, so later "
                         "positions cost more: {} chunks of {}, rank r holds chunks r and {} − r, "
                         "the same share of the {} query-key pairs each\n",
                         T, ranks, kHeads, kHeadDim, chunks, chunk, chunks - 1, T * (T + 1) / 2));
  std::vector<int32_t> simple(T_l);
  for (int64_t t = 0; t < T_l; ++t) simple[t] = static_cast<int32_t>(rank * T_l + t);
  print_by_rank(world, fmt::format("rank {} holds positions {} (chunks {} and {}): {} pairs; "
                                   "the simple split's positions {}–{} would be {}\n",
                                   rank, fmt::join(positions, ", "), rank, chunks - 1 - rank,
                                   causal_pairs(positions), simple.front(), simple.back(),
                                   causal_pairs(simple)));
  for (const std::string& step : steps) print_by_rank(world, step);
  print_by_rank(world, fmt::format("rank {} full attention in one process at positions {}: lse {}, "
                                   "out {}; max difference {:.1e}\n",
                                   rank, fmt::join(positions, ", "),
                                   list_text(ref_mine_lse.data(), kHeads * T_l),
                                   rows_text(ref_mine_out.data(), T_l), diff));
  check_against_one_process(groups.world(), diff, "demo cp: the ring's attention");
}

}  // namespace tessel
