// Context parallelism: the load-balanced split of the sequence, and attention over it by a ring of
// K/V blocks (p2p) or by all-gathering K/V. Both are exact up to float rounding: each rank runs
// the attention kernels on (its query rows) × (a block of keys, visible by global position) and
// the partial results are merged by log-sum-exp; the backward recomputes each block's share from
// the final out and lse (attention_block_backward), so nothing but K/V and their gradients moves.
#include "tessel/parallel/context_parallel.h"

#include <algorithm>
#include <climits>
#include <memory>
#include <numeric>
#include <utility>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/kernels.h"

namespace tessel {

namespace {

// Message tags of the ring: K/V blocks and their gradient accumulators travel side by side.
constexpr int kKvTag = 6101;
constexpr int kKvGradTag = 6102;

// The buffers of one call, grown on first use and kept (no allocation in later steps). Per
// calling thread, so that concurrent callers (none today) cannot share them.
struct CpWorkspace {
  std::vector<float> kv[2];       // ring: the K/V block held and the one arriving (2, B, T_l, G·D)
  std::vector<float> kv_grad[3];  // ring backward: this rank's share, outgoing, incoming dK/dV
  std::vector<float> block_out;   // (B, T_l, H·D): one key block's partial output
  std::vector<float> block_lse;   // (B, H, T_l)
  std::vector<float> gathered;    // all-gather: (CP, 2, B, T_l, G·D), rank-major
  std::vector<float> global_kv;   // all-gather: (2, B, T, G·D), global position order
  std::vector<float> global_kv_grad;
  std::vector<int32_t> q_pos;  // (T_l): this rank's positions
  std::vector<int32_t> k_pos;  // (T_l) of a ring block's owner, or (T) in global order
};

CpWorkspace& workspace() {
  thread_local CpWorkspace ws;
  return ws;
}

template <typename T>
T* sized(std::vector<T>& buffer, int64_t n) {
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(n);
  return buffer.data();
}

// The global positions of rank `rank`'s T / CP rows: chunks rank and 2·CP−1−rank of 2·CP. Without
// context parallelism simply 0..T−1 (T need not be even).
void fill_positions(int32_t* positions, int64_t T, int cp, int rank) {
  if (cp == 1) {
    std::iota(positions, positions + T, 0);
    return;
  }
  const int64_t chunk = T / (2 * cp);
  const int64_t second = 2 * cp - 1 - rank;
  for (int64_t i = 0; i < chunk; ++i) {
    positions[i] = static_cast<int32_t>(rank * chunk + i);
    positions[chunk + i] = static_cast<int32_t>(second * chunk + i);
  }
}

void check_sequence(int64_t T, int cp) {
  TESSEL_CHECK(T <= INT32_MAX, "context_parallel.cpp: sequence length {} exceeds int32 positions",
               T);
  TESSEL_CHECK(T > 0 && (cp == 1 || T % (2 * cp) == 0),
               "context_parallel.cpp: sequence length {} is not divisible by 2·CP = {} (context "
               "parallelism cuts every sequence into 2·CP equal chunks)",
               T, 2 * cp);
}

// K then V rows of one block, packed contiguous: kv (2, N, width) from rows with strides.
void pack_kv(float* kv, const float* k, const float* v, int64_t N, int64_t width, int64_t k_ld,
             int64_t v_ld) {
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(k + n * k_ld, width, kv + n * width);
    std::copy_n(v + n * v_ld, width, kv + (N + n) * width);
  }
}

// dk, dv (rows with strides) += packed kv_grad (2, N, width).
void add_kv_grad(float* dk, float* dv, const float* kv_grad, int64_t N, int64_t width, int64_t k_ld,
                 int64_t v_ld) {
  for (int64_t n = 0; n < N; ++n) {
    const float* gk = kv_grad + n * width;
    const float* gv = kv_grad + (N + n) * width;
    for (int64_t j = 0; j < width; ++j) dk[n * k_ld + j] += gk[j];
    for (int64_t j = 0; j < width; ++j) dv[n * v_ld + j] += gv[j];
  }
}

// The shapes of one call.
struct Shape {
  int64_t B, T_l, H, G, D;
  int64_t kv_rows() const { return B * T_l; }
  int64_t kv_width() const { return G * D; }
  int64_t kv_count() const { return 2 * B * T_l * G * D; }  // one packed K/V block
};

// Checked before any message is posted: a bad shape must not leave a send in flight.
void check_shape(const Shape& s, int cp, int64_t q_ld, int64_t k_ld, int64_t v_ld) {
  check_sequence(s.T_l * cp, cp);
  TESSEL_CHECK(s.B >= 0 && s.D > 0 && s.H > 0 && s.G > 0 && s.H % s.G == 0,
               "context_parallel.cpp: bad attention shape B={} H={} G={} D={}", s.B, s.H, s.G, s.D);
  TESSEL_CHECK(q_ld >= s.H * s.D && k_ld >= s.G * s.D && v_ld >= s.G * s.D,
               "context_parallel.cpp: row strides q_ld={} k_ld={} v_ld={} are shorter than the "
               "heads they hold",
               q_ld, k_ld, v_ld);
}

// ---- p2p: the ring
// ------------------------------------------------------------------------------- Step s (0..CP−1)
// works on the K/V block of rank (r − s) mod CP; the next block is already on its way (isend to
// r+1, irecv from r−1, posted before the step's compute) while this one is used.

void ring_forward(const ContextParallel& cp, float* out, float* lse, const float* q, const float* k,
                  const float* v, const Shape& s, int64_t q_ld, int64_t k_ld, int64_t v_ld) {
  const int n = cp.size(), r = cp.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t T = s.T_l * n, count = s.kv_count(), width = s.kv_width();
  CpWorkspace& ws = workspace();
  float* held = sized(ws.kv[0], count);
  float* arriving = sized(ws.kv[1], count);
  float* block_out = sized(ws.block_out, s.B * s.T_l * s.H * s.D);
  float* block_lse = sized(ws.block_lse, s.B * s.H * s.T_l);
  int32_t* q_pos = sized(ws.q_pos, s.T_l);
  int32_t* k_pos = sized(ws.k_pos, s.T_l);
  fill_positions(q_pos, T, n, r);
  pack_kv(held, k, v, s.kv_rows(), width, k_ld, v_ld);

  for (int step = 0; step < n; ++step) {
    Request send, recv;
    if (step + 1 < n) {
      send = cp.comm->isend(held, count, next, kKvTag);
      recv = cp.comm->irecv(arriving, count, prev, kKvTag);
    }
    fill_positions(k_pos, T, n, (r - step + n) % n);
    // The own block (step 0) writes out and lse; later blocks are merged into them. Query and key
    // blocks that see nothing of each other are skipped inside the kernel, by position.
    float* step_out = step == 0 ? out : block_out;
    float* step_lse = step == 0 ? lse : block_lse;
    cpu::attention_block_forward(step_out, step_lse, q, held, held + count / 2, s.B, s.T_l, s.T_l,
                                 s.H, s.G, s.D, q_ld, width, width, q_pos, k_pos);
    if (step > 0) cpu::attention_merge(out, lse, block_out, block_lse, s.B, s.T_l, s.H, s.D);
    send.wait();
    recv.wait();
    std::swap(held, arriving);
  }
}

// Backward: dQ accumulates here. The dK/dV of a block follow it one hop behind: at step s this
// rank computes its share of the block's gradient, adds what the ranks before it accumulated
// (arrived from r−1 during the compute) and passes the sum on to r+1; after CP steps every block's
// sum has come back to its owner.
void ring_backward(const ContextParallel& cp, float* dq, float* dk, float* dv, const float* dout,
                   const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const Shape& s, int64_t q_ld, int64_t k_ld, int64_t v_ld) {
  const int n = cp.size(), r = cp.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t T = s.T_l * n, count = s.kv_count(), width = s.kv_width();
  CpWorkspace& ws = workspace();
  float* held = sized(ws.kv[0], count);
  float* arriving = sized(ws.kv[1], count);
  float* share = sized(ws.kv_grad[0], count);     // this rank's share of the held block's dK/dV
  float* outgoing = sized(ws.kv_grad[1], count);  // the sum passed on to r+1
  float* incoming = sized(ws.kv_grad[2], count);  // the sum from r−1
  int32_t* q_pos = sized(ws.q_pos, s.T_l);
  int32_t* k_pos = sized(ws.k_pos, s.T_l);
  fill_positions(q_pos, T, n, r);
  pack_kv(held, k, v, s.kv_rows(), width, k_ld, v_ld);

  Request grad_send, grad_recv;
  for (int step = 0; step < n; ++step) {
    Request send, recv;
    if (step + 1 < n) {
      send = cp.comm->isend(held, count, next, kKvTag);
      recv = cp.comm->irecv(arriving, count, prev, kKvTag);
    }
    if (step > 0) grad_recv = cp.comm->irecv(incoming, count, prev, kKvGradTag);
    fill_positions(k_pos, T, n, (r - step + n) % n);
    std::fill_n(share, count, 0.0f);
    cpu::attention_block_backward(dq, share, share + count / 2, dout, q, held, held + count / 2,
                                  out, lse, s.B, s.T_l, s.T_l, s.H, s.G, s.D, q_ld, width, width,
                                  q_pos, k_pos);
    if (step > 0) {
      grad_recv.wait();
      for (int64_t i = 0; i < count; ++i) share[i] += incoming[i];
    }
    grad_send.wait();  // the previous sum has left `outgoing`
    std::swap(share, outgoing);
    grad_send = cp.comm->isend(outgoing, count, next, kKvGradTag);
    send.wait();
    recv.wait();
    std::swap(held, arriving);
  }
  // The last hop: this rank's own block, with every rank's share.
  cp.comm->irecv(incoming, count, prev, kKvGradTag).wait();
  grad_send.wait();
  add_kv_grad(dk, dv, incoming, s.kv_rows(), width, k_ld, v_ld);
}

// ---- all-gather ---------------------------------------------------------------------------------
// The gathered blocks arrive rank-major; they are put in global position order (keys 0..T−1), the
// kernels' causal case, and the gradients go back the same way before the reduce-scatter.

// Gathers every rank's K/V and returns them in global order: (2, B, T, G·D).
const float* gather_kv(const ContextParallel& cp, const float* k, const float* v, const Shape& s,
                       int64_t k_ld, int64_t v_ld) {
  const int n = cp.size();
  const int64_t T = s.T_l * n, count = s.kv_count(), width = s.kv_width();
  CpWorkspace& ws = workspace();
  float* own = sized(ws.kv[0], count);
  float* gathered = sized(ws.gathered, n * count);
  float* global = sized(ws.global_kv, n * count);
  int32_t* positions = sized(ws.q_pos, s.T_l);
  pack_kv(own, k, v, s.kv_rows(), width, k_ld, v_ld);
  cp.comm->all_gather(own, gathered, count);
  for (int rank = 0; rank < n; ++rank) {
    fill_positions(positions, T, n, rank);
    for (int part = 0; part < 2; ++part)  // K, V
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t t = 0; t < s.T_l; ++t) {
          const float* from = gathered + rank * count + ((part * s.B + b) * s.T_l + t) * width;
          float* to = global + ((part * s.B + b) * T + positions[t]) * width;
          std::copy_n(from, width, to);
        }
  }
  return global;
}

void all_gather_forward(const ContextParallel& cp, float* out, float* lse, const float* q,
                        const float* k, const float* v, const Shape& s, int64_t q_ld, int64_t k_ld,
                        int64_t v_ld) {
  const int n = cp.size();
  const int64_t T = s.T_l * n, width = s.kv_width();
  const float* global = gather_kv(cp, k, v, s, k_ld, v_ld);  // (2, B, T, G·D)
  CpWorkspace& ws = workspace();
  int32_t* q_pos = sized(ws.q_pos, s.T_l);
  int32_t* k_pos = sized(ws.k_pos, T);
  fill_positions(q_pos, T, n, cp.rank());
  std::iota(k_pos, k_pos + T, 0);
  cpu::attention_block_forward(out, lse, q, global, global + s.B * T * width, s.B, s.T_l, T, s.H,
                               s.G, s.D, q_ld, width, width, q_pos, k_pos);
}

void all_gather_backward(const ContextParallel& cp, float* dq, float* dk, float* dv,
                         const float* dout, const float* q, const float* k, const float* v,
                         const float* out, const float* lse, const Shape& s, int64_t q_ld,
                         int64_t k_ld, int64_t v_ld) {
  const int n = cp.size();
  const int64_t T = s.T_l * n, count = s.kv_count(), width = s.kv_width();
  const float* global = gather_kv(cp, k, v, s, k_ld, v_ld);  // (2, B, T, G·D)
  CpWorkspace& ws = workspace();
  float* global_grad = sized(ws.global_kv_grad, n * count);  // (2, B, T, G·D)
  float* rank_major = sized(ws.gathered, n * count);         // (CP, 2, B, T_l, G·D)
  float* own_grad = sized(ws.kv[1], count);                  // (2, B, T_l, G·D)
  int32_t* q_pos = sized(ws.q_pos, s.T_l);
  int32_t* k_pos = sized(ws.k_pos, T);
  std::iota(k_pos, k_pos + T, 0);
  fill_positions(q_pos, T, n, cp.rank());
  std::fill_n(global_grad, n * count, 0.0f);
  cpu::attention_block_backward(dq, global_grad, global_grad + s.B * T * width, dout, q, global,
                                global + s.B * T * width, out, lse, s.B, s.T_l, T, s.H, s.G, s.D,
                                q_ld, width, width, q_pos, k_pos);
  // Every rank holds a share of every key's gradient: back to rank-major, summed at the owners.
  for (int rank = 0; rank < n; ++rank) {
    fill_positions(q_pos, T, n, rank);  // rank's positions (this rank's are not needed again)
    for (int part = 0; part < 2; ++part)
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t t = 0; t < s.T_l; ++t) {
          const float* from = global_grad + ((part * s.B + b) * T + q_pos[t]) * width;
          float* to = rank_major + rank * count + ((part * s.B + b) * s.T_l + t) * width;
          std::copy_n(from, width, to);
        }
  }
  cp.comm->reduce_scatter(rank_major, own_grad, count);
  add_kv_grad(dk, dv, own_grad, s.kv_rows(), width, k_ld, v_ld);
}

}  // namespace

CpCommType parse_cp_comm_type(const std::string& name) {
  if (name == "p2p") return CpCommType::P2P;
  if (name == "all-gather") return CpCommType::AllGather;
  fail("context_parallel.cpp: unknown CP communication type '{}' (expected p2p or all-gather)",
       name);
}

std::vector<int32_t> context_parallel_positions(int64_t T, int cp, int rank) {
  check_sequence(T, cp);
  std::vector<int32_t> positions(T / cp);
  fill_positions(positions.data(), T, cp, rank);
  return positions;
}

std::vector<int32_t> ContextParallel::local_positions(int64_t T) const {
  return context_parallel_positions(T, size(), rank());
}

void ContextParallel::take_local_rows(const int32_t* in, int32_t* out, int64_t B, int64_t T,
                                      int64_t width) const {
  const std::vector<int32_t> positions = local_positions(T);
  const int64_t T_l = static_cast<int64_t>(positions.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_l; ++t)
      std::copy_n(in + (b * T + positions[t]) * width, width, out + (b * T_l + t) * width);
}

void ContextParallel::attention_forward(float* out, float* lse, const float* q, const float* k,
                                        const float* v, int64_t B, int64_t T_l, int64_t H,
                                        int64_t G, int64_t D, int64_t q_ld, int64_t k_ld,
                                        int64_t v_ld) const {
  if (size() == 1) {
    cpu::attention_forward(out, lse, q, k, v, B, T_l, H, G, D, q_ld, k_ld, v_ld, true);
    return;
  }
  const Shape shape{B, T_l, H, G, D};
  check_shape(shape, size(), q_ld, k_ld, v_ld);
  if (comm_type == CpCommType::P2P) {
    ring_forward(*this, out, lse, q, k, v, shape, q_ld, k_ld, v_ld);
  } else {
    all_gather_forward(*this, out, lse, q, k, v, shape, q_ld, k_ld, v_ld);
  }
}

void ContextParallel::attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                         const float* q, const float* k, const float* v,
                                         const float* out, const float* lse, int64_t B, int64_t T_l,
                                         int64_t H, int64_t G, int64_t D, int64_t q_ld,
                                         int64_t k_ld, int64_t v_ld) const {
  if (size() == 1) {
    cpu::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T_l, H, G, D, q_ld, k_ld, v_ld,
                            true);
    return;
  }
  const Shape shape{B, T_l, H, G, D};
  check_shape(shape, size(), q_ld, k_ld, v_ld);
  TESSEL_CHECK(dq != nullptr && dk != nullptr && dv != nullptr,
               "context_parallel.cpp: attention_backward needs all of dq, dk and dv");
  if (comm_type == CpCommType::P2P) {
    ring_backward(*this, dq, dk, dv, dout, q, k, v, out, lse, shape, q_ld, k_ld, v_ld);
  } else {
    all_gather_backward(*this, dq, dk, dv, dout, q, k, v, out, lse, shape, q_ld, k_ld, v_ld);
  }
}

ContextParallel no_context_parallel() {
  static const std::unique_ptr<Comm> local = make_local_comm();
  return {local.get(), CpCommType::P2P};
}

}  // namespace tessel
