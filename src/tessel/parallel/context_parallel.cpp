// Context parallelism: the load-balanced split of the sequence, and attention over it by a ring of
// K/V blocks (p2p) or by all-gathering K/V. Both are exact up to float rounding: each rank runs
// the attention kernels on (its query rows) × (a block of keys, visible by global position) and
// the partial results are merged by log-sum-exp; the backward recomputes each block's share from
// the final out and lse (attention_block_backward), so nothing but K/V and their gradients moves.
#include "tessel/parallel/context_parallel.h"

#include <climits>
#include <memory>
#include <numeric>
#include <utility>

#include "tessel/core/error.h"

namespace tessel {

// The buffers of one call (ContextParallel::workspace), in the backend's memory.
struct CpWorkspace {
  Tensor kv[2];       // ring: the K/V block held and the one arriving (2, B, T_l, G·D)
  Tensor kv_grad[3];  // ring backward: this rank's share, outgoing, incoming dK/dV
  Tensor block_out;   // (B, T_l, H·D): one key block's partial output
  Tensor block_lse;   // (B, H, T_l)
  Tensor gathered;    // all-gather: (CP, 2, B, T_l, G·D), rank-major
  Tensor global_kv;   // all-gather: (2, B, T, G·D), global position order
  Tensor global_kv_grad;
  Tensor heads[2];    // the heads' all-to-all: what this rank sends and receives, (CP, a message)
  Tensor positions;   // (CP, T_l): every rank's global positions, for sequences of length T
  Tensor all_keys;    // (T): 0..T−1, the gathered keys' positions
  int64_t positions_T = 0;
};

namespace {

// Message tags of the ring: K/V blocks and their gradient accumulators travel side by side.
constexpr int kKvTag = 6101;
constexpr int kKvGradTag = 6102;

// The global positions of rank `rank`'s T / CP rows: chunks rank and 2·CP−1−rank of 2·CP. Without
// context parallelism simply 0..T−1 (T need not be even).
void fill_positions(int32_t* positions, int64_t T, int cp, int rank) {
  if (cp == 1) {
    std::iota(positions, positions + T, 0);
    return;
  }
  const int64_t chunk = T / (2 * cp);
  std::iota(positions, positions + chunk, static_cast<int32_t>(rank * chunk));
  std::iota(positions + chunk, positions + 2 * chunk,
            static_cast<int32_t>((2 * cp - 1 - rank) * chunk));
}

void check_sequence(int64_t T, int cp) {
  TESSEL_CHECK(T <= INT32_MAX, "context_parallel.cpp: sequence length {} exceeds int32 positions",
               T);
  TESSEL_CHECK(T > 0 && (cp == 1 || T % (2 * cp) == 0),
               "context_parallel.cpp: sequence length {} is not divisible by 2·CP = {} (context "
               "parallelism cuts every sequence into 2·CP equal chunks)",
               T, 2 * cp);
}

// The shapes of one call.
struct AttentionShape {
  int64_t B, T_l, H, G, D;
  const int32_t* key_start;  // (B, T_l) packed documents' first positions, or nullptr
  DropoutSite dropout = {};  // attention dropout, keyed by global positions: the same on every block
  int64_t kv_rows() const { return B * T_l; }
  int64_t kv_width() const { return G * D; }
  int64_t kv_count() const { return 2 * B * T_l * G * D; }  // one packed K/V block
};

// Checked before any message is posted: a bad shape must not leave a send in flight.
void check_shape(const AttentionShape& s, int cp, int64_t q_ld, int64_t k_ld, int64_t v_ld) {
  check_sequence(s.T_l * cp, cp);
  TESSEL_CHECK(s.B >= 0 && s.D > 0 && s.H > 0 && s.G > 0 && s.H % s.G == 0,
               "context_parallel.cpp: bad attention shape B={} H={} G={} D={}", s.B, s.H, s.G, s.D);
  TESSEL_CHECK(q_ld >= s.H * s.D && k_ld >= s.G * s.D && v_ld >= s.G * s.D,
               "context_parallel.cpp: row strides q_ld={} k_ld={} v_ld={} are shorter than the "
               "heads they hold",
               q_ld, k_ld, v_ld);
}

// Every rank's positions (CP, T_l) for sequences of length T, in the backend's memory; rank r's
// row starts at the returned pointer + r·T_l.
const int32_t* rank_positions(const ContextParallel& cp, int64_t T) {
  CpWorkspace& ws = *cp.workspace;
  if (ws.positions_T != T) {
    const int ranks = cp.size();
    std::vector<int32_t> host(T), keys(T);
    for (int rank = 0; rank < ranks; ++rank)
      fill_positions(host.data() + rank * (T / ranks), T, ranks, rank);
    std::iota(keys.begin(), keys.end(), 0);
    const Kernels& k = *cp.kernels;
    ws.positions = k.zeros({T}, DType::I32);
    ws.all_keys = k.zeros({T}, DType::I32);
    k.memory.from_host(ws.positions.ints(), host.data(), T * 4);
    k.memory.from_host(ws.all_keys.ints(), keys.data(), T * 4);
    ws.positions_T = T;
  }
  return ws.positions.ints();
}

// ---- p2p: the ring -------------------------------------------------------------------------------
// Step s (0..CP−1) works on the K/V block of rank (r − s) mod CP; the next block is already on its
// way (isend to r+1, irecv from r−1, posted before the step's compute) while this one is used.

// The ring's neighbours, one packed K/V block's size, every rank's positions, and the two block
// buffers: the one held and the one arriving.
struct Ring {
  int ranks, rank, next, prev;
  int64_t count, width;
  const int32_t* positions;
  float* held;
  float* arriving;
};

Ring ring_of(const ContextParallel& cp, const AttentionShape& s) {
  const int ranks = cp.size(), r = cp.rank();
  const int64_t count = s.kv_count();
  return {ranks, r, (r + 1) % ranks, (r + ranks - 1) % ranks, count, s.kv_width(),
          rank_positions(cp, s.T_l * ranks), cp.kernels->reserve(cp.workspace->kv[0], count, 1),
          cp.kernels->reserve(cp.workspace->kv[1], count, 1)};
}

void ring_forward(const ContextParallel& cp, float* out, float* lse, const float* q, const float* k,
                  const float* v, const AttentionShape& s, int64_t q_ld, int64_t k_ld, int64_t v_ld) {
  auto [ranks, r, next, prev, count, width, positions, held, arriving] = ring_of(cp, s);
  const Kernels& K = *cp.kernels;
  CpWorkspace& ws = *cp.workspace;
  float* block_out = K.reserve(ws.block_out, s.B * s.T_l, s.H * s.D);
  float* block_lse = K.reserve(ws.block_lse, s.B * s.H, s.T_l);
  const int32_t* q_pos = positions + r * s.T_l;
  K.cp_pack_kv(held, k, v, s.kv_rows(), width, k_ld, v_ld);

  for (int step = 0; step < ranks; ++step) {
    Request send, recv;
    if (step + 1 < ranks) {
      send = cp.comm().isend(held, count, next, kKvTag);
      recv = cp.comm().irecv(arriving, count, prev, kKvTag);
    }
    const int32_t* k_pos = positions + ((r - step + ranks) % ranks) * s.T_l;
    // The own block (step 0) writes out and lse; later blocks are merged into them. Query and key
    // blocks that see nothing of each other are skipped inside the kernel, by position.
    float* step_out = step == 0 ? out : block_out;
    float* step_lse = step == 0 ? lse : block_lse;
    K.attention_block_forward(step_out, step_lse, q, held, held + count / 2, s.B, s.T_l, s.T_l,
                              s.H, s.G, s.D, q_ld, width, width, q_pos, k_pos, s.key_start, s.dropout);
    if (step > 0) K.attention_merge(out, lse, block_out, block_lse, s.B, s.T_l, s.H, s.D);
    if (cp.on_ring_step)
      cp.on_ring_step({step, (r - step + ranks) % ranks, step_out, step_lse, out, lse});
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
                   const float* lse, const AttentionShape& s, int64_t q_ld, int64_t k_ld, int64_t v_ld) {
  auto [ranks, r, next, prev, count, width, positions, held, arriving] = ring_of(cp, s);
  const Kernels& K = *cp.kernels;
  CpWorkspace& ws = *cp.workspace;
  float* share = K.reserve(ws.kv_grad[0], count, 1);     // this rank's share of the held block's dK/dV
  float* outgoing = K.reserve(ws.kv_grad[1], count, 1);  // the sum passed on to r+1
  float* incoming = K.reserve(ws.kv_grad[2], count, 1);  // the sum from r−1
  const int32_t* q_pos = positions + r * s.T_l;
  K.cp_pack_kv(held, k, v, s.kv_rows(), width, k_ld, v_ld);

  Request grad_send, grad_recv;
  for (int step = 0; step < ranks; ++step) {
    Request send, recv;
    if (step + 1 < ranks) {
      send = cp.comm().isend(held, count, next, kKvTag);
      recv = cp.comm().irecv(arriving, count, prev, kKvTag);
    }
    if (step > 0) grad_recv = cp.comm().irecv(incoming, count, prev, kKvGradTag);
    const int32_t* k_pos = positions + ((r - step + ranks) % ranks) * s.T_l;
    K.zero(share, count);
    K.attention_block_backward(dq, share, share + count / 2, dout, q, held, held + count / 2, out,
                               lse, s.B, s.T_l, s.T_l, s.H, s.G, s.D, q_ld, width, width, q_pos,
                               k_pos, s.key_start, s.dropout);
    if (step > 0) {
      grad_recv.wait();
      K.residual_forward(share, share, incoming, count);
    }
    grad_send.wait();  // the previous sum has left `outgoing`
    std::swap(share, outgoing);
    if (ranks > 1) grad_send = cp.comm().isend(outgoing, count, next, kKvGradTag);
    send.wait();
    recv.wait();
    std::swap(held, arriving);
  }
  // The last hop: this rank's own block, with every rank's share (alone, its share is the sum).
  const float* whole = outgoing;
  if (ranks > 1) {
    cp.comm().irecv(incoming, count, prev, kKvGradTag).wait();
    grad_send.wait();
    whole = incoming;
  }
  K.cp_unpack_add_kv(dk, dv, whole, s.kv_rows(), width, k_ld, v_ld);
}

// ---- all-gather ---------------------------------------------------------------------------------
// The gathered blocks arrive rank-major; they are put in global position order (keys 0..T−1), the
// kernels' causal case, and the gradients go back the same way before the reduce-scatter.

// The gathered blocks' K, then V (each rank's block (2, B, T_l, G·D)), to global order (2, B, T,
// G·D), or back.
void kv_to_global(const ContextParallel& cp, float* global, const float* rank_major, const AttentionShape& s) {
  const int64_t T = s.T_l * cp.size(), width = s.kv_width();
  for (int64_t part = 0; part < 2; ++part)
    cp.kernels->cp_rows_to_global(global + part * s.B * T * width, width, rank_major + part * s.B * s.T_l * width,
                                  s.kv_count(), rank_positions(cp, T), cp.size(), s.B, s.T_l, width);
}
void kv_from_global(const ContextParallel& cp, float* rank_major, const float* global, const AttentionShape& s) {
  const int64_t T = s.T_l * cp.size(), width = s.kv_width();
  for (int64_t part = 0; part < 2; ++part)
    cp.kernels->cp_rows_from_global(rank_major + part * s.B * s.T_l * width, s.kv_count(),
                                    global + part * s.B * T * width, width, rank_positions(cp, T), cp.size(), s.B,
                                    s.T_l, width);
}

// Gathers every rank's K/V and returns them in global order: (2, B, T, G·D).
const float* gather_kv(const ContextParallel& cp, const float* k, const float* v, const AttentionShape& s,
                       int64_t k_ld, int64_t v_ld) {
  const int ranks = cp.size();
  const int64_t count = s.kv_count(), width = s.kv_width();
  const Kernels& K = *cp.kernels;
  CpWorkspace& ws = *cp.workspace;
  float* own = K.reserve(ws.kv[0], count, 1);
  float* gathered = K.reserve(ws.gathered, ranks, count);
  float* global = K.reserve(ws.global_kv, ranks, count);
  K.cp_pack_kv(own, k, v, s.kv_rows(), width, k_ld, v_ld);
  cp.comm().all_gather(own, gathered, count);
  kv_to_global(cp, global, gathered, s);
  return global;
}

void all_gather_forward(const ContextParallel& cp, float* out, float* lse, const float* q,
                        const float* k, const float* v, const AttentionShape& s, int64_t q_ld, int64_t k_ld,
                        int64_t v_ld) {
  const int ranks = cp.size();
  const int64_t T = s.T_l * ranks, width = s.kv_width();
  const float* global = gather_kv(cp, k, v, s, k_ld, v_ld);  // (2, B, T, G·D)
  const int32_t* q_pos = rank_positions(cp, T) + cp.rank() * s.T_l;
  cp.kernels->attention_block_forward(out, lse, q, global, global + s.B * T * width, s.B, s.T_l, T,
                                      s.H, s.G, s.D, q_ld, width, width, q_pos,
                                      cp.workspace->all_keys.ints(), s.key_start, s.dropout);
}

void all_gather_backward(const ContextParallel& cp, float* dq, float* dk, float* dv,
                         const float* dout, const float* q, const float* k, const float* v,
                         const float* out, const float* lse, const AttentionShape& s, int64_t q_ld,
                         int64_t k_ld, int64_t v_ld) {
  const int ranks = cp.size();
  const int64_t T = s.T_l * ranks, count = s.kv_count(), width = s.kv_width();
  const Kernels& K = *cp.kernels;
  CpWorkspace& ws = *cp.workspace;
  const float* global = gather_kv(cp, k, v, s, k_ld, v_ld);  // (2, B, T, G·D)
  float* global_grad = K.reserve(ws.global_kv_grad, ranks, count);  // (2, B, T, G·D)
  float* rank_major = K.reserve(ws.gathered, ranks, count);         // (CP, 2, B, T_l, G·D)
  float* own_grad = K.reserve(ws.kv[1], count, 1);              // (2, B, T_l, G·D)
  const int32_t* positions = rank_positions(cp, T);
  K.zero(global_grad, ranks * count);
  K.attention_block_backward(dq, global_grad, global_grad + s.B * T * width, dout, q, global,
                             global + s.B * T * width, out, lse, s.B, s.T_l, T, s.H, s.G, s.D,
                             q_ld, width, width, positions + cp.rank() * s.T_l,
                             ws.all_keys.ints(), s.key_start, s.dropout);
  // Every rank holds a share of every key's gradient: back to rank-major, summed at the owners.
  kv_from_global(cp, rank_major, global_grad, s);
  cp.comm().reduce_scatter(rank_major, own_grad, count);
  K.cp_unpack_add_kv(dk, dv, own_grad, s.kv_rows(), width, k_ld, v_ld);
}

// ---- the heads' all-to-all -----------------------------------------------------------------------
// One message per pair of ranks: every section's (B·T_l, width) block, in section order, `block`
// floats in all; the messages to send, rank by rank, and those received.
struct HeadMessages {
  int64_t rows, block;
  float* send;
  float* recv;
};

HeadMessages head_messages(const ContextParallel& cp, const std::vector<CpColumns>& from,
                           const std::vector<CpColumns>& to, int64_t B, int64_t T_l) {
  TESSEL_CHECK(from.size() == to.size(), "context_parallel.cpp: {} sections to exchange for {}", from.size(),
               to.size());
  check_sequence(T_l * cp.size(), cp.size());
  int64_t width = 0;
  for (size_t i = 0; i < from.size(); ++i) {
    TESSEL_CHECK(from[i].width == to[i].width && from[i].width > 0,
                 "context_parallel.cpp: section {} is {} columns a rank on one side, {} on the other", i,
                 from[i].width, to[i].width);
    width += from[i].width;
  }
  CpWorkspace& ws = *cp.workspace;
  const int64_t block = B * T_l * width;
  return {B * T_l, block, cp.kernels->reserve(ws.heads[0], cp.size(), block),
          cp.kernels->reserve(ws.heads[1], cp.size(), block)};
}

void exchange(const ContextParallel& cp, const HeadMessages& m) {
  const std::vector<int64_t> counts(cp.size(), m.block);
  std::vector<int64_t> offsets(cp.size());
  for (int r = 0; r < cp.size(); ++r) offsets[r] = r * m.block;
  cp.comm().all_to_all_v(m.send, counts.data(), offsets.data(), m.recv, counts.data(), offsets.data());
}

}  // namespace

// Rank r's message from this rank: the columns of r's heads of this rank's rows; arrived from rank
// r: its rows of this rank's heads, put at their global positions.
void ContextParallel::sequence_to_heads(const std::vector<CpColumns>& local, const std::vector<CpColumns>& whole,
                                        int64_t B, int64_t T_l) const {
  const HeadMessages m = head_messages(*this, local, whole, B, T_l);
  int64_t at = 0;
  for (const CpColumns& c : local) {
    kernels->cp_columns_to_ranks(m.send + at, m.block, c.data, c.ld, m.rows, size(), c.width);
    at += m.rows * c.width;
  }
  exchange(*this, m);
  const int32_t* positions = rank_positions(*this, T_l * size());
  at = 0;
  for (const CpColumns& c : whole) {
    kernels->cp_rows_to_global(c.data, c.ld, m.recv + at, m.block, positions, size(), B, T_l, c.width);
    at += m.rows * c.width;
  }
}

// Rank r's message from this rank: r's rows of this rank's heads; arrived from rank r: the columns
// of r's heads of this rank's rows.
void ContextParallel::heads_to_sequence(const std::vector<CpColumns>& whole, const std::vector<CpColumns>& local,
                                        int64_t B, int64_t T_l) const {
  const HeadMessages m = head_messages(*this, whole, local, B, T_l);
  const int32_t* positions = rank_positions(*this, T_l * size());
  int64_t at = 0;
  for (const CpColumns& c : whole) {
    kernels->cp_rows_from_global(m.send + at, m.block, c.data, c.ld, positions, size(), B, T_l, c.width);
    at += m.rows * c.width;
  }
  exchange(*this, m);
  at = 0;
  for (const CpColumns& c : local) {
    kernels->cp_columns_from_ranks(c.data, c.ld, m.recv + at, m.block, m.rows, size(), c.width);
    at += m.rows * c.width;
  }
}

int64_t context_parallel_workspace_bytes(CpCommType type, int cp, int64_t B, int64_t T_l, int64_t H,
                                         int64_t G, int64_t D) {
  const AttentionShape s{B, T_l, H, G, D, nullptr};
  const int64_t count = s.kv_count(), positions = 2 * T_l * cp;  // positions, all_keys
  const int64_t floats = type == CpCommType::P2P ? 5 * count + B * T_l * H * D + B * H * T_l
                                                 : 2 * count + 3 * cp * count;
  return (floats + positions) * 4;
}

int64_t context_parallel_heads_workspace_bytes(int cp, int64_t B, int64_t T_l, int64_t width) {
  return 2 * cp * B * T_l * width * 4;
}

ContextParallel::ContextParallel(CommGroup group, CpCommType comm_type, const Kernels& kernels)
    : group(group), comm_type(comm_type), kernels(&kernels),
      workspace(std::make_shared<CpWorkspace>()) {}

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
  check_sequence(T, size());
  kernels->cp_take_rows(out, in, rank_positions(*this, T) + rank() * (T / size()), B, T,
                        T / size(), width);
}

void ContextParallel::attention_forward(float* out, float* lse, const float* q, const float* k,
                                        const float* v, int64_t B, int64_t T_l, int64_t H,
                                        int64_t G, int64_t D, int64_t q_ld, int64_t k_ld,
                                        int64_t v_ld, const int32_t* key_start,
                                        const DropoutSite& dropout) const {
  // One rank without packed documents: the causal kernel; with them, the ring of one block.
  if (size() == 1 && key_start == nullptr) {
    kernels->attention_forward(out, lse, q, k, v, B, T_l, H, G, D, q_ld, k_ld, v_ld, true, dropout);
    return;
  }
  const AttentionShape shape{B, T_l, H, G, D, key_start, dropout};
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
                                         int64_t k_ld, int64_t v_ld,
                                         const int32_t* key_start, const DropoutSite& dropout) const {
  if (size() == 1 && key_start == nullptr) {
    kernels->attention_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T_l, H, G, D, q_ld, k_ld, v_ld,
                            true, dropout);
    return;
  }
  const AttentionShape shape{B, T_l, H, G, D, key_start, dropout};
  check_shape(shape, size(), q_ld, k_ld, v_ld);
  TESSEL_CHECK(dq != nullptr && dk != nullptr && dv != nullptr,
               "context_parallel.cpp: attention_backward needs all of dq, dk and dv");
  if (comm_type == CpCommType::P2P) {
    ring_backward(*this, dq, dk, dv, dout, q, k, v, out, lse, shape, q_ld, k_ld, v_ld);
  } else {
    all_gather_backward(*this, dq, dk, dv, dout, q, k, v, out, lse, shape, q_ld, k_ld, v_ld);
  }
}

ContextParallel no_context_parallel(const Kernels& kernels) {
  return {&local_comm(kernels.memory), CpCommType::P2P, kernels};
}

}  // namespace tessel
