// MpiComm and the MPI runtime (mpi.h). Each Comm call maps onto one non-blocking MPI call (a
// blocking one is that call and its wait, mpi_wait.cpp); this file only converts counts, picks
// datatypes and reduction ops, and checks what MPI cannot.

#include "tessel/comm/mpi.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tessel/core/error.h"

namespace tessel {
namespace {

bool mpi_usable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// MPI counts and displacements are int.
int to_mpi_count(int64_t n, const char* what) {
  TESSEL_CHECK(n >= 0 && n <= INT_MAX, "comm/mpi.cpp: {} {} is outside MPI's count range [0, {}]",
               what, n, INT_MAX);
  return static_cast<int>(n);
}

// Open MPI 4.1's all-reduce and reduce-scatter over shared memory slow from ~12 GB/s to 1-3 GB/s
// past a few MiB on this machine (bench/RESULTS.md, allreduce mode): large buffers go in pieces
// of at most this many floats (4 MiB).
constexpr int64_t kPieceFloats = int64_t{1} << 20;

MPI_Op to_mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

bool overlaps(const float* a, int64_t a_count, const float* b, int64_t b_count) {
  auto a_begin = reinterpret_cast<uintptr_t>(a), b_begin = reinterpret_cast<uintptr_t>(b);
  auto a_end = a_begin + a_count * sizeof(float), b_end = b_begin + b_count * sizeof(float);
  return a_count > 0 && b_count > 0 && a_begin < b_end && b_begin < a_end;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Counts one call of `comm` moving `bytes`; the time until it goes out of scope is blocked.
class BlockingCall {
 public:
  BlockingCall(Comm& comm, CommOp op, double bytes)
      : comm_(comm), op_(op), ticket_(comm.note_call(op, bytes)), start_(Clock::now()) {}
  ~BlockingCall() { comm_.note_blocked(op_, ticket_, seconds_since(start_)); }
  BlockingCall(const BlockingCall&) = delete;
  BlockingCall& operator=(const BlockingCall&) = delete;

 private:
  Comm& comm_;
  CommOp op_;
  CallTicket ticket_;
  Clock::time_point start_;
};

// One MPI request of `comm`; the time this rank waits for it is added to its call. A Request
// dropped while in flight is waited for here: MPI may still read or write its buffer, and
// freeing a non-blocking collective's request is not allowed.
class MpiRequest final : public Request::Impl {
 public:
  MpiRequest(MPI_Request request, MpiComm& comm, CommOp op, CallTicket ticket, int peer,
             std::shared_ptr<const std::vector<int>> arrays)
      : request_(request), comm_(comm), op_(op), ticket_(ticket), peer_(peer), arrays_(std::move(arrays)) {}
  ~MpiRequest() override {
    if (request_ != MPI_REQUEST_NULL && mpi_usable()) wait();
  }
  void wait() override {
    const Clock::time_point start = Clock::now();
    comm_.wait(request_, comm_op_name(op_), peer_);
    comm_.note_blocked(op_, ticket_, seconds_since(start));
  }
  bool test() override {
    int done = 0;
    MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    return done != 0;
  }

 private:
  MPI_Request request_;
  MpiComm& comm_;
  CommOp op_;
  CallTicket ticket_;
  int peer_;
  std::shared_ptr<const std::vector<int>> arrays_;  // read by MPI until the call completes
};

// All-gather in place when this rank's block already sits at its place in recv (MPI forbids
// aliased buffers otherwise).
const void* gather_send_buffer(const float* send, float* recv, int64_t count, int rank, int size) {
  if (send == recv + rank * count) return MPI_IN_PLACE;
  TESSEL_CHECK(!overlaps(send, count, recv, size * count),
               "comm/mpi.cpp: all_gather send buffer overlaps recv without being this rank's block");
  return send;
}

}  // namespace

MpiComm::MpiComm(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  TESSEL_CHECK(comm != MPI_COMM_NULL && comm != MPI_COMM_WORLD && comm != MPI_COMM_SELF,
               "comm/mpi.cpp: MpiComm needs a communicator of its own (split or dup), not a "
               "predefined one");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // The members' world ranks, for what a call's peer is in the whole job.
  MPI_Group group, world;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> in_group(size_);
  for (int r = 0; r < size_; ++r) in_group[r] = r;
  members_.resize(size_);
  MPI_Group_translate_ranks(group, size_, in_group.data(), world, members_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &found);
  if (found) tag_ub_ = *tag_ub;
}

MpiComm::~MpiComm() {
  if (mpi_usable()) MPI_Comm_free(&comm_);
}

void MpiComm::check_peer(int peer, const char* what) const {
  TESSEL_CHECK(peer >= 0 && peer < size_, "comm/mpi.cpp: {} rank {} outside a group of {}", what,
               peer, size_);
}

void MpiComm::check_tag(int tag) const {
  TESSEL_CHECK(tag >= 0 && tag <= tag_ub_, "comm/mpi.cpp: tag {} outside MPI's range [0, {}]", tag,
               tag_ub_);
}

Request MpiComm::started(MPI_Request request, CommOp op, double bytes, int peer,
                         std::shared_ptr<const std::vector<int>> arrays) {
  const CallTicket ticket = note_call(op, bytes, peer);
  return Request(std::make_shared<MpiRequest>(request, *this, op, ticket, peer, std::move(arrays)));
}

void MpiComm::all_reduce(float* data, int64_t count, ReduceOp op) {
  to_mpi_count(count, "all_reduce count");
  BlockingCall call(*this, CommOp::AllReduce, count * sizeof(float));
  for (int64_t begin = 0; begin < count; begin += kPieceFloats) {
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, data + begin,
                   static_cast<int>(std::min(kPieceFloats, count - begin)), MPI_FLOAT,
                   to_mpi_op(op), comm_, &request);
    wait(request, "all_reduce");
  }
}

void MpiComm::all_reduce(double* data, int64_t count, ReduceOp op) {
  BlockingCall call(*this, CommOp::AllReduce, count * sizeof(double));
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, data, to_mpi_count(count, "all_reduce count"), MPI_DOUBLE,
                 to_mpi_op(op), comm_, &request);
  wait(request, "all_reduce");
}

Request MpiComm::all_reduce_async(float* data, int64_t count, ReduceOp op) {
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, data, to_mpi_count(count, "all_reduce count"), MPI_FLOAT,
                 to_mpi_op(op), comm_, &request);
  return started(request, CommOp::AllReduce, count * sizeof(float));
}

Request MpiComm::all_reduce_async(double* data, int64_t count, ReduceOp op) {
  MPI_Request request;
  MPI_Iallreduce(MPI_IN_PLACE, data, to_mpi_count(count, "all_reduce count"), MPI_DOUBLE,
                 to_mpi_op(op), comm_, &request);
  return started(request, CommOp::AllReduce, count * sizeof(double));
}

void MpiComm::all_gather(const float* send, float* recv, int64_t count) {
  BlockingCall call(*this, CommOp::AllGather, size_ * count * sizeof(float));
  MPI_Request request;
  start_all_gather(send, recv, count, request);
  wait(request, "all_gather");
}

Request MpiComm::all_gather_async(const float* send, float* recv, int64_t count) {
  MPI_Request request;
  start_all_gather(send, recv, count, request);
  return started(request, CommOp::AllGather, size_ * count * sizeof(float));
}

void MpiComm::start_all_gather(const float* send, float* recv, int64_t count, MPI_Request& request) {
  int n = to_mpi_count(count, "all_gather count");
  MPI_Iallgather(gather_send_buffer(send, recv, count, rank_, size_), n, MPI_FLOAT, recv, n,
                 MPI_FLOAT, comm_, &request);
}

void MpiComm::reduce_scatter(const float* send, float* recv, int64_t count) {
  TESSEL_CHECK(!overlaps(send, size_ * count, recv, count),
               "comm/mpi.cpp: reduce_scatter recv overlaps send");
  to_mpi_count(size_ * count, "reduce_scatter count");
  BlockingCall call(*this, CommOp::ReduceScatter, size_ * count * sizeof(float));
  // Open MPI 4.1's MPI_Reduce_scatter_block reduces at ~1.5 GB/s at every size here and
  // MPI_Reduce_scatter collapses past a few MiB like the all-reduce, so the ranks' blocks go in
  // pieces: piece [o, o + len) of every block copied together (in cache), then reduce-scattered.
  const int64_t piece = std::min(count, std::max<int64_t>(1, kPieceFloats / size_));
  if (static_cast<int64_t>(reduce_scatter_staging_.size()) < size_ * piece)
    reduce_scatter_staging_.resize(size_ * piece);
  std::vector<int> counts(size_);
  for (int64_t begin = 0; begin < count; begin += piece) {
    const int64_t len = std::min(piece, count - begin);
    for (int r = 0; r < size_; ++r)
      std::copy_n(send + r * count + begin, len, reduce_scatter_staging_.data() + r * len);
    std::fill(counts.begin(), counts.end(), static_cast<int>(len));
    MPI_Request request;
    MPI_Ireduce_scatter(reduce_scatter_staging_.data(), recv + begin, counts.data(), MPI_FLOAT,
                        MPI_SUM, comm_, &request);
    wait(request, "reduce_scatter");
  }
}

Request MpiComm::reduce_scatter_async(const float* send, float* recv, int64_t count) {
  TESSEL_CHECK(!overlaps(send, size_ * count, recv, count),
               "comm/mpi.cpp: reduce_scatter recv overlaps send");
  MPI_Request request;
  MPI_Ireduce_scatter_block(send, recv, to_mpi_count(count, "reduce_scatter count"), MPI_FLOAT,
                            MPI_SUM, comm_, &request);
  return started(request, CommOp::ReduceScatter, size_ * count * sizeof(float));
}

double MpiComm::start_all_gather_v(const float* send, float* recv, const int64_t* recv_counts,
                                  const int64_t* recv_offsets, std::vector<int>& arrays,
                                  MPI_Request& request) {
  arrays.resize(2 * size_);
  int* counts = arrays.data();
  int* offsets = counts + size_;
  int64_t extent = 0, gathered = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = to_mpi_count(recv_counts[r], "all_gather_v count");
    offsets[r] = to_mpi_count(recv_offsets[r], "all_gather_v offset");
    extent = std::max(extent, recv_offsets[r] + recv_counts[r]);
    gathered += recv_counts[r];
  }
  const bool in_place = send == recv + recv_offsets[rank_];
  TESSEL_CHECK(in_place || !overlaps(send, recv_counts[rank_], recv, extent),
               "comm/mpi.cpp: all_gather_v send buffer overlaps recv without being this rank's block");
  MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, counts[rank_], MPI_FLOAT, recv, counts, offsets,
                  MPI_FLOAT, comm_, &request);
  return static_cast<double>(gathered) * sizeof(float);
}

void MpiComm::all_gather_v(const float* send, float* recv, const int64_t* recv_counts,
                           const int64_t* recv_offsets) {
  std::vector<int> arrays;
  MPI_Request request;
  const double bytes = start_all_gather_v(send, recv, recv_counts, recv_offsets, arrays, request);
  BlockingCall call(*this, CommOp::AllGather, bytes);
  wait(request, "all_gather_v");
}

Request MpiComm::all_gather_v_async(const float* send, float* recv, const int64_t* recv_counts,
                                    const int64_t* recv_offsets) {
  auto arrays = std::make_shared<std::vector<int>>();
  MPI_Request request;
  const double bytes = start_all_gather_v(send, recv, recv_counts, recv_offsets, *arrays, request);
  return started(request, CommOp::AllGather, bytes, -1, std::move(arrays));
}

// In pieces as reduce_scatter, for the same reasons and one more: on a whole message Open MPI
// stages every rank's blocks in temporary buffers of the message's size (a fully sharded unit's
// gradients: tens of MB more at the peak).
void MpiComm::reduce_scatter_v(const float* send, float* recv, const int64_t* counts) {
  std::vector<int64_t> offsets(size_);
  int64_t total = 0, largest = 0;
  for (int r = 0; r < size_; ++r) {
    to_mpi_count(counts[r], "reduce_scatter_v count");
    offsets[r] = total;
    total += counts[r];
    largest = std::max(largest, counts[r]);
  }
  TESSEL_CHECK(!overlaps(send, total, recv, counts[rank_]),
               "comm/mpi.cpp: reduce_scatter_v recv overlaps send");
  BlockingCall call(*this, CommOp::ReduceScatter, total * sizeof(float));
  const int64_t piece = std::min(std::max<int64_t>(largest, 1), std::max<int64_t>(1, kPieceFloats / size_));
  if (static_cast<int64_t>(reduce_scatter_staging_.size()) < size_ * piece)
    reduce_scatter_staging_.resize(size_ * piece);
  std::vector<int> piece_counts(size_);
  for (int64_t begin = 0; begin < largest; begin += piece) {
    int64_t staged = 0;
    for (int r = 0; r < size_; ++r) {
      const int64_t len = std::clamp<int64_t>(counts[r] - begin, 0, piece);
      std::copy_n(send + offsets[r] + begin, len, reduce_scatter_staging_.data() + staged);
      piece_counts[r] = static_cast<int>(len);
      staged += len;
    }
    MPI_Request request;
    MPI_Ireduce_scatter(reduce_scatter_staging_.data(), recv + std::min(begin, counts[rank_]), piece_counts.data(),
                        MPI_FLOAT, MPI_SUM, comm_, &request);
    wait(request, "reduce_scatter_v");
  }
}

void MpiComm::all_to_all_v(const float* send, const int64_t* send_counts,
                           const int64_t* send_offsets, float* recv, const int64_t* recv_counts,
                           const int64_t* recv_offsets) {
  std::vector<int> counts_out(size_), offsets_out(size_), counts_in(size_), offsets_in(size_);
  int64_t sent_elsewhere = 0;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) sent_elsewhere += send_counts[r];
    counts_out[r] = to_mpi_count(send_counts[r], "all_to_all_v send count");
    offsets_out[r] = to_mpi_count(send_offsets[r], "all_to_all_v send offset");
    counts_in[r] = to_mpi_count(recv_counts[r], "all_to_all_v recv count");
    offsets_in[r] = to_mpi_count(recv_offsets[r], "all_to_all_v recv offset");
  }
  BlockingCall call(*this, CommOp::AllToAll, sent_elsewhere * sizeof(float));
  MPI_Request request;
  MPI_Ialltoallv(send, counts_out.data(), offsets_out.data(), MPI_FLOAT, recv, counts_in.data(),
                 offsets_in.data(), MPI_FLOAT, comm_, &request);
  wait(request, "all_to_all_v");
}

void MpiComm::broadcast(float* data, int64_t count, int root) {
  check_peer(root, "broadcast root");
  BlockingCall call(*this, CommOp::Broadcast, count * sizeof(float));
  MPI_Request request;
  MPI_Ibcast(data, to_mpi_count(count, "broadcast count"), MPI_FLOAT, root, comm_, &request);
  wait(request, "broadcast");
}

void MpiComm::barrier() {
  MPI_Request request;
  MPI_Ibarrier(comm_, &request);
  wait(request, "barrier");
}

Request MpiComm::isend(const float* data, int64_t count, int peer, int tag) {
  check_peer(peer, "isend to");
  check_tag(tag);
  MPI_Request request;
  MPI_Isend(data, to_mpi_count(count, "isend count"), MPI_FLOAT, peer, tag, comm_, &request);
  return started(request, CommOp::Send, count * sizeof(float), peer);
}

Request MpiComm::irecv(float* data, int64_t count, int peer, int tag) {
  check_peer(peer, "irecv from");
  check_tag(tag);
  MPI_Request request;
  MPI_Irecv(data, to_mpi_count(count, "irecv count"), MPI_FLOAT, peer, tag, comm_, &request);
  return started(request, CommOp::Recv, count * sizeof(float), peer);
}

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
         std::getenv("PMI_SIZE");
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  static bool created = false;  // MPI can be initialised once per process
  TESSEL_CHECK(!created, "comm/mpi.cpp: a second MpiRuntime in one process");
  created = true;
  world_ = make_local_comm();
  if (!launched_by_mpi()) return;
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  active_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  if (provided < MPI_THREAD_FUNNELED)
    abort_job("the MPI library does not support MPI_THREAD_FUNNELED (OpenMP threads beside MPI)");
  MPI_Comm world;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  world_ = std::make_unique<MpiComm>(world);
}

MpiRuntime::~MpiRuntime() {
  world_.reset();
  if (active_ && mpi_usable()) MPI_Finalize();
}

void abort_job(const std::string& message, int code) {
  static std::atomic<bool> printed = false;  // once, even if two threads fail together
  const bool mpi = mpi_usable();
  int rank = 0;
  if (mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!printed.exchange(true)) {
    std::string prefix = rank == 0 ? "" : fmt::format("[rank {}] ", rank);
    // fputs, not fmt::print: an error writing stderr itself must not throw out of the handler.
    std::fputs(fmt::format("{}tessel: error: {}\n", prefix, message).c_str(), stderr);
    std::fflush(stderr);
  }
  // A zero code would let mpirun report success for a failed job.
  if (code == 0) code = 1;
  if (mpi) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace tessel
