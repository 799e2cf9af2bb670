// Context-parallel attention: how evenly the causal work falls on the ranks, and how much of the
// ring's communication the compute hides. The CP group is the world; run under mpirun:
//
//   mpirun --allow-run-as-root --oversubscribe -n 4 -x OMP_NUM_THREADS=1 build/bench/cp_bench
//
// Work (deterministic, any load): per rank, the visible (query, key) pairs of its rows under
// Megatron's balanced split (chunks i and 2·CP−1−i) and under the simple contiguous split, and the
// gemm FLOP its attention really spends (forward + backward, both comm types; tessel::cpu's gemm
// counters, so the masked half of diagonal blocks counts too). Each as max/min over ranks.
//
// Overlap (timing: needs a free core per rank, so CP2 on this 2-core machine): medians over
// --reps rounds, each the slowest rank's time, of
//   ring     ContextParallel's p2p attention, forward + backward;
//   compute  the same block-kernel calls and merges with no messages;
//   comm     the same messages (K/V hops, dK/dV hops) with no compute;
// hidden = (compute + comm − ring) / comm, clipped to [0, 1]: the share of the messages' time
// that did not add to the ring's. On CPU ranks over shared memory a message is a copy made by a
// computing core when it waits (Open MPI has no progress thread), so expect little hiding here;
// the ring posts every transfer before its compute for backends that move data on their own.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tessel/comm/mpi.h"
#include "tessel/core/philox.h"
#include "tessel/kernels/kernels.h"
#include "tessel/parallel/context_parallel.h"

namespace {

using tessel::ContextParallel;
using tessel::CpCommType;
using tessel::MpiComm;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Seconds of one call, the slowest rank's.
template <typename Call>
double timed(Call call) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  call();
  double local = MPI_Wtime() - start, slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// One value per rank, in rank order, on every rank.
std::vector<double> per_rank(MpiComm& comm, double value) {
  std::vector<double> all(comm.size());
  MPI_Allgather(&value, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm.handle());
  return all;
}

double imbalance(const std::vector<double>& values) {
  return *std::max_element(values.begin(), values.end()) /
         *std::min_element(values.begin(), values.end());
}

std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  file >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

// Visible (query, key) pairs of one sequence's rows at these positions: query p sees keys 0..p.
double visible_pairs(const std::vector<int32_t>& positions) {
  double pairs = 0;
  for (int32_t p : positions) pairs += p + 1.0;
  return pairs;
}

struct Sizes {
  int64_t B = 1, T = 1024, H = 8, G = 8, D = 64;
};

// The tensors of one rank: q (B, T_l, H·D), k and v (B, T_l, G·D), and what backward needs.
struct Tensors {
  std::vector<float> q, k, v, dout, out, lse, dq, dk, dv;

  Tensors(const Sizes& s, int64_t T_l, int rank) {
    auto random = [&](int64_t n, uint64_t stream) {
      std::vector<float> x(n);
      for (int64_t i = 0; i < n; ++i) x[i] = tessel::random_normal(rank, stream, i);
      return x;
    };
    q = random(s.B * T_l * s.H * s.D, 1);
    k = random(s.B * T_l * s.G * s.D, 2);
    v = random(s.B * T_l * s.G * s.D, 3);
    dout = random(s.B * T_l * s.H * s.D, 4);
    out.resize(q.size());
    lse.resize(s.B * s.H * T_l);
    dq.resize(q.size());
    dk.resize(k.size());
    dv.resize(v.size());
  }
};

void cp_attention(const ContextParallel& cp, const Sizes& s, int64_t T_l, Tensors& x) {
  cp.attention_forward(x.out.data(), x.lse.data(), x.q.data(), x.k.data(), x.v.data(), s.B, T_l,
                       s.H, s.G, s.D, s.H * s.D, s.G * s.D, s.G * s.D);
  cp.attention_backward(x.dq.data(), x.dk.data(), x.dv.data(), x.dout.data(), x.q.data(),
                        x.k.data(), x.v.data(), x.out.data(), x.lse.data(), s.B, T_l, s.H, s.G, s.D,
                        s.H * s.D, s.G * s.D, s.G * s.D);
}

// The ring's kernel calls without its messages: step s uses rank (r − s)'s positions (this rank's
// own K/V stand in for the values; the work depends on positions only).
void ring_compute_only(const Sizes& s, int64_t T_l, int rank, int cp,
                       const std::vector<std::vector<int32_t>>& positions, Tensors& x,
                       std::vector<float>& block_out, std::vector<float>& block_lse,
                       std::vector<float>& kv_grad) {
  const int32_t* q_pos = positions[rank].data();
  const int64_t kv = s.G * s.D;
  for (int step = 0; step < cp; ++step) {
    const int32_t* k_pos = positions[(rank - step + cp) % cp].data();
    float* out = step == 0 ? x.out.data() : block_out.data();
    float* lse = step == 0 ? x.lse.data() : block_lse.data();
    tessel::cpu_kernels().attention_block_forward(out, lse, x.q.data(), x.k.data(), x.v.data(), s.B, T_l,
                                         T_l, s.H, s.G, s.D, s.H * s.D, kv, kv, q_pos, k_pos, nullptr, tessel::DropoutSite{});
    if (step > 0)
      tessel::cpu_kernels().attention_merge(x.out.data(), x.lse.data(), block_out.data(), block_lse.data(),
                                   s.B, T_l, s.H, s.D);
  }
  const int64_t half = static_cast<int64_t>(kv_grad.size()) / 2;
  for (int step = 0; step < cp; ++step) {
    const int32_t* k_pos = positions[(rank - step + cp) % cp].data();
    std::fill(kv_grad.begin(), kv_grad.end(), 0.0f);
    tessel::cpu_kernels().attention_block_backward(x.dq.data(), kv_grad.data(), kv_grad.data() + half,
                                          x.dout.data(), x.q.data(), x.k.data(), x.v.data(),
                                          x.out.data(), x.lse.data(), s.B, T_l, T_l, s.H, s.G, s.D,
                                          s.H * s.D, kv, kv, q_pos, k_pos, nullptr, tessel::DropoutSite{});
  }
}

// The ring's messages without its compute, in its order: CP−1 K/V hops forward; backward CP−1
// K/V hops and CP dK/dV hops, each dK/dV hop one step behind. Four buffers of one K/V block.
void ring_comm_only(MpiComm& comm, std::vector<float> (&buffers)[4]) {
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t count = static_cast<int64_t>(buffers[0].size());
  float* held = buffers[0].data();
  float* arriving = buffers[1].data();
  float* grad_out = buffers[2].data();
  float* grad_in = buffers[3].data();
  for (int step = 0; step + 1 < n; ++step) {
    tessel::Request send = comm.isend(held, count, next, 1);
    comm.irecv(arriving, count, prev, 1).wait();
    send.wait();
  }
  tessel::Request grad_send;
  for (int step = 0; step < n; ++step) {
    tessel::Request send, recv, grad_recv;
    if (step + 1 < n) {
      send = comm.isend(held, count, next, 1);
      recv = comm.irecv(arriving, count, prev, 1);
    }
    if (step > 0) grad_recv = comm.irecv(grad_in, count, prev, 2);
    grad_recv.wait();
    grad_send.wait();
    grad_send = comm.isend(grad_out, count, next, 2);
    send.wait();
    recv.wait();
  }
  comm.irecv(grad_in, count, prev, 2).wait();
  grad_send.wait();
}

int run(int argc, char** argv) {
  CLI::App app{"Context-parallel attention: work balance over ranks and ring overlap"};
  Sizes s;
  int reps = 15;
  app.add_option("--batch", s.B, "sequences per call");
  app.add_option("--seq-length", s.T, "whole sequence length (a multiple of 2·CP)");
  app.add_option("--heads", s.H, "query heads");
  app.add_option("--groups", s.G, "key/value heads");
  app.add_option("--head-dim", s.D, "head dimension");
  app.add_option("--reps", reps, "timed rounds of each kind");
  CLI11_PARSE(app, argc, argv);

  MPI_Comm copy;
  MPI_Comm_dup(MPI_COMM_WORLD, &copy);
  MpiComm comm(copy);
  const int n = comm.size(), rank = comm.rank();
  const ContextParallel ring{&comm, CpCommType::P2P, tessel::cpu_kernels()};
  const ContextParallel gather{&comm, CpCommType::AllGather, tessel::cpu_kernels()};
  const int64_t T_l = s.T / n;
  std::vector<std::vector<int32_t>> positions(n);  // every rank's, from the split itself
  {
    const std::vector<int32_t> mine = ring.local_positions(s.T);
    std::vector<int32_t> all(s.T);
    MPI_Allgather(mine.data(), static_cast<int>(T_l), MPI_INT32_T, all.data(),
                  static_cast<int>(T_l), MPI_INT32_T, comm.handle());
    for (int r = 0; r < n; ++r)
      positions[r].assign(all.begin() + r * T_l, all.begin() + (r + 1) * T_l);
  }
  if (rank == 0) {
    fmt::print("# CP{} attention, B={} T={} H={} G={} D={}, OMP_NUM_THREADS={}, load {}\n", n, s.B,
               s.T, s.H, s.G, s.D,
               std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "(unset)",
               load_average());
  }

  // ---- work per rank
  std::vector<double> balanced(n), simple(n);
  for (int r = 0; r < n; ++r) {
    balanced[r] = visible_pairs(positions[r]);
    std::vector<int32_t> contiguous(T_l);
    for (int64_t t = 0; t < T_l; ++t) contiguous[t] = static_cast<int32_t>(r * T_l + t);
    simple[r] = visible_pairs(contiguous);
  }
  Tensors x(s, T_l, rank);
  std::vector<double> flops[2];
  for (int kind = 0; kind < 2; ++kind) {
    tessel::cpu_kernels().gemm_stats_reset();
    tessel::cpu_kernels().gemm_stats_enable(true);
    cp_attention(kind == 0 ? ring : gather, s, T_l, x);
    tessel::cpu_kernels().gemm_stats_enable(false);
    flops[kind] = per_rank(comm, tessel::cpu_kernels().gemm_stats().flops);
  }
  if (rank == 0) {
    fmt::print(
        "\n| rank | visible pairs, balanced | visible pairs, simple split | GFLOP p2p (fwd+bwd) | "
        "GFLOP all-gather |\n");
    fmt::print("| --- | --- | --- | --- | --- |\n");
    for (int r = 0; r < n; ++r)
      fmt::print("| {} | {:.0f} | {:.0f} | {:.3f} | {:.3f} |\n", r, balanced[r], simple[r],
                 flops[0][r] / 1e9, flops[1][r] / 1e9);
    fmt::print("| max/min | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n", imbalance(balanced),
               imbalance(simple), imbalance(flops[0]), imbalance(flops[1]));
    // Visible pairs × heads × D × 2 FLOP × 2 gemms forward, 5 backward: the FLOP without waste.
    double useful = 0;
    for (double pairs : balanced) useful += pairs * s.B * s.H * s.D * 2 * 7;
    double spent = 0;
    for (double f : flops[0]) spent += f;
    fmt::print("\ngemm FLOP spent over the useful (visible pairs only), p2p: {:.3f}\n",
               spent / useful);
  }

  // ---- overlap of the ring's messages with its compute
  std::vector<float> block_out(x.out.size()), block_lse(x.lse.size());
  std::vector<float> kv_grad(2 * s.B * T_l * s.G * s.D);
  std::vector<float> buffers[4];
  for (auto& b : buffers) b.assign(kv_grad.size(), 1.0f);
  std::vector<double> ring_s, compute_s, comm_s;
  cp_attention(ring, s, T_l, x);  // warm-up: workspaces grown, pages touched
  ring_compute_only(s, T_l, rank, n, positions, x, block_out, block_lse, kv_grad);
  ring_comm_only(comm, buffers);
  for (int rep = 0; rep < reps; ++rep) {
    ring_s.push_back(timed([&] { cp_attention(ring, s, T_l, x); }));
    compute_s.push_back(timed(
        [&] { ring_compute_only(s, T_l, rank, n, positions, x, block_out, block_lse, kv_grad); }));
    comm_s.push_back(timed([&] { ring_comm_only(comm, buffers); }));
  }
  if (rank == 0) {
    const double t_ring = median(ring_s), t_compute = median(compute_s), t_comm = median(comm_s);
    const double hidden = std::clamp((t_compute + t_comm - t_ring) / t_comm, 0.0, 1.0);
    fmt::print(
        "\n| ring fwd+bwd (ms) | compute only (ms) | messages only (ms) | ring − compute (ms) | "
        "messages hidden |\n");
    fmt::print("| --- | --- | --- | --- | --- |\n");
    fmt::print("| {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.0f} % |\n", t_ring * 1e3, t_compute * 1e3,
               t_comm * 1e3, (t_ring - t_compute) * 1e3, hidden * 100);
    fmt::print("(medians of {} rounds; K/V block {:.2f} MiB per hop)\n", reps,
               kv_grad.size() * 4.0 / (1 << 20));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::MpiRuntime runtime(&argc, &argv);
  if (!runtime.active()) {
    fmt::print(stderr, "cp_bench: run it under mpirun (the CP group is the world)\n");
    return 1;
  }
  return run(argc, argv);
}
