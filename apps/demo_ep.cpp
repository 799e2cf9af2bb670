// ---- seed example 10 (十六): expert parallel ---------------------------------------------------
// An MoE layer of 8 experts over EP 2: rank 0 holds experts 0–3, rank 1 experts 4–7. Each token's
// router (logits = x·W_gate, Megatron's default top-k then softmax over the k) picks its experts;
// an all-to-all over EP takes the token to the ranks holding them, each rank runs its experts'
// FFN (C → F → C, GELU) on the rows it received, a second all-to-all brings the outputs back, and
// the token's output is their sum weighted by the router. (The layer's own dispatcher, with
// capacity, padding and expert tensor parallelism: model/moe/dispatch.h.) The seed's tokens A, B,
// C go to experts 1, 6, 3: A and B start on rank 0, C on rank 1, and each token's input leans
// towards the expert the seed names, so that the router — which really computes — picks it first.
// The check: the same tokens through the same router and experts, all in one process.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "demo_output.h"
#include "demo_runs.h"
#include "tessel/core/error.h"
#include "tessel/core/philox.h"
#include "tessel/kernels/kernels.h"

namespace tessel {

namespace {

constexpr int64_t kExperts = kDemoExperts, kHidden = 8, kFfn = 16;
// A row sent to an expert: the token's hidden vector, then the expert and the token's index (small
// whole numbers travel exactly as floats), so the receiver knows what it computes for whom.
constexpr int64_t kRowWidth = kHidden + 2;

char token_name(int64_t token) { return static_cast<char>('A' + token); }

// The whole layer's weights, alike on every rank (each uses its own experts' in the EP run).
struct MoeWeights {
  std::vector<float> gate;      // (C, E)
  std::vector<float> fc, proj;  // (E, C, F), (E, F, C)

  explicit MoeWeights(uint64_t seed)
      : gate(kHidden * kExperts), fc(kExperts * kHidden * kFfn), proj(kExperts * kFfn * kHidden) {
    // The gate is near the identity, so a token's largest hidden entry names its first expert.
    for (int64_t i = 0; i < kHidden * kExperts; ++i)
      gate[i] = (i / kExperts == i % kExperts ? 1.0f : 0.0f) + 0.1f * random_normal(seed, 2, i);
    for (size_t i = 0; i < fc.size(); ++i)
      fc[i] = random_normal(seed, 3, i) / std::sqrt(static_cast<float>(kHidden));
    for (size_t i = 0; i < proj.size(); ++i)
      proj[i] = random_normal(seed, 4, i) / std::sqrt(static_cast<float>(kFfn));
  }
};

// out (C) = expert e's FFN of x (C); fc (C, F) and proj (F, C) are expert e's weights.
void expert_ffn(float* out, const float* x, const float* fc, const float* proj) {
  const Kernels& k = cpu_kernels();
  float hidden[kFfn], act[kFfn];
  k.linear_forward(hidden, x, fc, nullptr, 1, kHidden, kFfn, WeightLayout::InOut);
  k.gelu_forward(act, hidden, kFfn);
  k.linear_forward(out, act, proj, nullptr, 1, kFfn, kHidden, WeightLayout::InOut);
}

// The router's choice for N tokens x (N, C): experts (N, k), weights (N, k).
void route(std::vector<int32_t>& experts, std::vector<float>& weights, const float* x, int64_t N,
           int top_k, const MoeWeights& w) {
  const Kernels& k = cpu_kernels();
  std::vector<float> logits(N * kExperts);
  k.linear_forward(logits.data(), x, w.gate.data(), nullptr, N, kHidden, kExperts,
                   WeightLayout::InOut);
  experts.resize(N * top_k);
  weights.resize(N * top_k);
  k.moe_topk_forward(experts.data(), weights.data(), logits.data(), N, kExperts, top_k,
                     RouterScore::Softmax, /*pre_softmax=*/false);
}

// counts (one per rank) to element offsets.
std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  return offsets;
}

}  // namespace

void demo_ep(ProcessGroups& groups, const std::vector<int>& best_experts, int top_k,
             uint64_t seed) {
  Comm& ep = groups.ep();
  Comm& world = groups.world();
  const int rank = ep.rank(), ranks = ep.size();
  const int64_t per_rank = kExperts / ranks, first_expert = rank * per_rank;
  const MoeWeights w(seed);

  // This rank's tokens: the first half (rounded up) on rank 0, the rest on rank 1.
  const int64_t tokens = static_cast<int64_t>(best_experts.size());
  const int64_t first_token = rank == 0 ? 0 : (tokens + 1) / 2;
  const int64_t N = rank == 0 ? (tokens + 1) / 2 : tokens - first_token;
  std::vector<float> x(N * kHidden);  // (N, C)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < kHidden; ++c)
      x[n * kHidden + c] = 0.3f * random_normal(seed, 5, (first_token + n) * kHidden + c) +
                           (c == best_experts[first_token + n] ? 2.0f : 0.0f);

  std::vector<int32_t> experts;
  std::vector<float> weights;
  route(experts, weights, x.data(), N, top_k, w);

  // Dispatch: every (token, choice) to its expert's rank, grouped by rank, in token order.
  std::vector<int64_t> sent;  // the assignments n·k + j, in the order they leave
  std::vector<int64_t> send_rows(ranks, 0);
  std::vector<float> send;
  for (int dest = 0; dest < ranks; ++dest)
    for (int64_t a = 0; a < N * top_k; ++a) {
      if (experts[a] / per_rank != dest) continue;
      const float* row = x.data() + (a / top_k) * kHidden;
      send.insert(send.end(), row, row + kHidden);
      send.push_back(static_cast<float>(experts[a]));
      send.push_back(static_cast<float>(first_token + a / top_k));
      sent.push_back(a);
      ++send_rows[dest];
    }
  // The row counts first (one number to each rank), then the rows.
  std::vector<float> rows_out(send_rows.begin(), send_rows.end()), rows_in(ranks);
  const std::vector<int64_t> ones(ranks, 1), one_offsets = offsets_of(ones);
  ep.all_to_all_v(rows_out.data(), ones.data(), one_offsets.data(), rows_in.data(), ones.data(),
                  one_offsets.data());
  std::vector<int64_t> recv_rows(ranks), send_counts(ranks), recv_counts(ranks);
  for (int r = 0; r < ranks; ++r) {
    recv_rows[r] = static_cast<int64_t>(rows_in[r]);
    send_counts[r] = send_rows[r] * kRowWidth;
    recv_counts[r] = recv_rows[r] * kRowWidth;
  }
  int64_t received = 0;
  for (int64_t rows : recv_rows) received += rows;
  std::vector<float> recv(received * kRowWidth);
  ep.all_to_all_v(send.data(), send_counts.data(), offsets_of(send_counts).data(), recv.data(),
                  recv_counts.data(), offsets_of(recv_counts).data());

  // The experts: this rank's own weights only, on the rows it received.
  std::vector<float> y(received * kHidden);  // (received, C), in arrival order
  std::string arrivals;
  for (int src = 0, row = 0; src < ranks; ++src)
    for (int64_t i = 0; i < recv_rows[src]; ++i, ++row) {
      const float* in = recv.data() + row * kRowWidth;
      const int64_t e = static_cast<int64_t>(in[kHidden]);
      TESSEL_CHECK(e / per_rank == rank, "demo ep: rank {} received a row for expert {}", rank, e);
      expert_ffn(y.data() + row * kHidden, in, w.fc.data() + e * kHidden * kFfn,
                 w.proj.data() + e * kFfn * kHidden);
      arrivals += fmt::format("rank {} runs expert {} on token {} (from rank {})\n", rank, e,
                              token_name(static_cast<int64_t>(in[kHidden + 1])), src);
    }

  // Back: the reverse all-to-all, then each token's weighted sum.
  for (int r = 0; r < ranks; ++r) {
    send_counts[r] = recv_rows[r] * kHidden;
    recv_counts[r] = send_rows[r] * kHidden;
  }
  std::vector<float> back(sent.size() * kHidden);  // in the order the rows left
  ep.all_to_all_v(y.data(), send_counts.data(), offsets_of(send_counts).data(), back.data(),
                  recv_counts.data(), offsets_of(recv_counts).data());
  std::vector<float> out(N * kHidden, 0.0f);
  for (size_t i = 0; i < sent.size(); ++i) {
    const int64_t a = sent[i];
    for (int64_t c = 0; c < kHidden; ++c)
      out[(a / top_k) * kHidden + c] += weights[a] * back[i * kHidden + c];
  }

  // The check: the same tokens, router and experts in one process.
  std::vector<float> ref(N * kHidden, 0.0f), one(kHidden);
  for (int64_t a = 0; a < N * top_k; ++a) {
    const int64_t e = experts[a];
    expert_ffn(one.data(), x.data() + (a / top_k) * kHidden, w.fc.data() + e * kHidden * kFfn,
               w.proj.data() + e * kFfn * kHidden);
    for (int64_t c = 0; c < kHidden; ++c) ref[(a / top_k) * kHidden + c] += weights[a] * one[c];
  }
  const float diff = max_abs_difference(out.data(), ref.data(), N * kHidden);

  print_from_rank0(world, fmt::format("seed example 10: {} experts over EP {}, top-{} routing, "
                                      "hidden {}, expert FFN {} → {} → {}\n",
                                      kExperts, ranks, top_k, kHidden, kHidden, kFfn, kHidden));
  std::string held = fmt::format("rank {} holds experts {}–{} and tokens", rank, first_expert,
                                 first_expert + per_rank - 1);
  for (int64_t n = 0; n < N; ++n) held += fmt::format(" {}", token_name(first_token + n));
  print_by_rank(world, held + "\n");
  std::string routes, sends;
  for (int64_t n = 0; n < N; ++n) {
    routes +=
        fmt::format("token {} on rank {}: the router picks", token_name(first_token + n), rank);
    for (int j = 0; j < top_k; ++j) {
      const int64_t a = n * top_k + j, dest = experts[a] / per_rank;
      routes += fmt::format("{} expert {} (weight {:.4f})", j ? "," : "", experts[a], weights[a]);
      sends += fmt::format("token {} → expert {}: {} rank {}\n", token_name(first_token + n),
                           experts[a], dest == rank ? "stays on" : "sent to", dest);
    }
    routes += "\n";
  }
  print_by_rank(world, routes);
  print_by_rank(world, sends);
  print_by_rank(world, arrivals);
  std::string sums;
  for (int64_t n = 0; n < N; ++n) {
    sums += fmt::format("token {} back on rank {} =", token_name(first_token + n), rank);
    for (int j = 0; j < top_k; ++j)
      sums += fmt::format("{} {:.4f} · expert {}({})", j ? " +" : "", weights[n * top_k + j],
                          experts[n * top_k + j], token_name(first_token + n));
    sums += fmt::format(" = {}\n", list_text(out.data() + n * kHidden, kHidden));
  }
  print_by_rank(world, sums);
  print_by_rank(world,
                fmt::format("rank {} against one process: max difference {:.1e}\n", rank, diff));
  check_against_one_process(groups.world(), diff, "demo ep: the experts' weighted sum");
}

}  // namespace tessel
