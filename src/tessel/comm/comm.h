// Comm: all communication of one process group (DESIGN invariant 5). Modules never call MPI or
// NCCL directly; they hold the Comm of the group they talk over (ProcessGroups, groups.h).
// Ranks are group-local: 0..size()-1 in the order of the group's rank list.
//
// Backends: MpiComm (mpi.cpp) over an MPI communicator, LocalComm for a group of one process
// (every collective is then a copy or nothing), so single-process code runs the same calls.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/device.h"

namespace tessel {

enum class ReduceOp : uint8_t { Sum, Max };

// A non-blocking operation in flight. wait() blocks until it completes (then the buffers may be
// reused); test() makes progress and says whether it has. A default Request is complete.
class Request {
 public:
  struct Impl {
    virtual ~Impl() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;
  };
  Request() = default;
  explicit Request(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  void wait() {
    if (impl_) impl_->wait();
    impl_.reset();
  }
  bool test() {
    if (impl_ && !impl_->test()) return false;
    impl_.reset();
    return true;
  }

 private:
  std::shared_ptr<Impl> impl_;
};

void wait_all(std::vector<Request>& requests);

// What this rank's calls on one group moved and how long they held it up, per kind of call:
// calls; bytes of the message (an all-reduce's buffer, an all-gather's result, a reduce-scatter's
// input, what an all-to-all or a send sends to other ranks, what a receive receives); and the
// seconds spent blocked — inside a blocking call, or in wait() on a non-blocking one (time a
// non-blocking operation spends in flight while this rank computes is not counted: it is hidden).
enum class CommOp : uint8_t { AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, Send, Recv };
inline constexpr int kNumCommOps = 7;
// "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send", "recv"
const char* comm_op_name(CommOp op);
struct CommCounter {
  int64_t calls = 0;
  double bytes = 0;
  double seconds = 0;
};
using CommStats = std::array<CommCounter, kNumCommOps>;

// One call as it ran, kept while a Comm records its calls (the pictures of a run and who talks to
// whom are drawn from these): its kind and bytes as counted, the peer of a send or receive as a
// world rank (-1 for a collective), when it started and when this rank's last wait for it ended
// (system-clock seconds since the epoch, a clock the ranks of one host share; the end is the
// start until it is waited for) and the seconds it blocked this rank.
struct CommCall {
  CommOp op = CommOp::AllReduce;
  double bytes = 0;
  int peer = -1;
  double start = 0, end = 0, blocked = 0;
};
// Which counted call a wait belongs to: a call counted before the last reset_stats() is no
// longer listed, and its wait then adds to the counter alone.
struct CallTicket {
  int64_t generation = -1;
  size_t index = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Counters since the last reset (a group of one process moves nothing and counts nothing).
  const CommStats& stats() const { return stats_; }
  // Empties the counters and the list of calls.
  void reset_stats();
  // From now on (or no longer) each counted call is also listed in calls(), until the next reset.
  void record_calls(bool on) { recording_ = on; }
  const std::vector<CommCall>& calls() const { return calls_; }
  // The world ranks of the group's members in group order; empty for a group of one process.
  const std::vector<int>& members() const { return members_; }

  // The backends' bookkeeping: a call of `op` moving `bytes` (to or from group-local `peer`, -1
  // for a collective) is counted, and listed while recording; the seconds a wait for it blocked
  // this rank are added to it.
  CallTicket note_call(CommOp op, double bytes, int peer = -1);
  void note_blocked(CommOp op, const CallTicket& ticket, double seconds);

  // In place over `count` elements.
  virtual void all_reduce(float* data, int64_t count, ReduceOp op = ReduceOp::Sum) = 0;
  virtual void all_reduce(double* data, int64_t count, ReduceOp op = ReduceOp::Sum) = 0;
  virtual Request all_reduce_async(float* data, int64_t count, ReduceOp op = ReduceOp::Sum) = 0;
  virtual Request all_reduce_async(double* data, int64_t count, ReduceOp op = ReduceOp::Sum) = 0;
  // recv (size · count) = every rank's send (count), in rank order.
  virtual void all_gather(const float* send, float* recv, int64_t count) = 0;
  virtual Request all_gather_async(const float* send, float* recv, int64_t count) = 0;
  // recv (count) = Σ over ranks of send[rank() · count .. +count); send holds size · count.
  virtual void reduce_scatter(const float* send, float* recv, int64_t count) = 0;
  virtual Request reduce_scatter_async(const float* send, float* recv, int64_t count) = 0;
  // Variable all-gather: rank r's recv_counts[r] elements land at recv_offsets[r] of every
  // rank's recv; this rank sends recv_counts[rank()] from `send`, which may be its own place in
  // recv (in place).
  virtual void all_gather_v(const float* send, float* recv, const int64_t* recv_counts,
                            const int64_t* recv_offsets) = 0;
  // The same without waiting (fully sharded data parallelism's prefetch); the counts and offsets
  // may be freed once it returns. A backend without a non-blocking form gathers before returning.
  virtual Request all_gather_v_async(const float* send, float* recv, const int64_t* recv_counts,
                                     const int64_t* recv_offsets) {
    all_gather_v(send, recv, recv_counts, recv_offsets);
    return Request();
  }
  // Variable reduce-scatter: send holds every rank's block in rank order (counts[r] elements
  // for rank r); recv (counts[rank()]) = Σ over ranks of their send's block for this rank.
  virtual void reduce_scatter_v(const float* send, float* recv, const int64_t* counts) = 0;
  // Variable all-to-all: send_counts[r] elements at send_offsets[r] go to rank r, which
  // receives them at its recv_offsets[this rank]. Counts and offsets in elements.
  virtual void all_to_all_v(const float* send, const int64_t* send_counts,
                            const int64_t* send_offsets, float* recv, const int64_t* recv_counts,
                            const int64_t* recv_offsets) = 0;
  virtual void broadcast(float* data, int64_t count, int root) = 0;
  virtual void barrier() = 0;
  // Point to point, non-blocking; `peer` is a group-local rank.
  virtual Request isend(const float* data, int64_t count, int peer, int tag) = 0;
  virtual Request irecv(float* data, int64_t count, int peer, int tag) = 0;

 protected:
  CommStats stats_{};
  std::vector<int> members_;

 private:
  bool recording_ = false;
  std::vector<CommCall> calls_;
  int64_t generation_ = 0;  // reset_stats() calls so far
};

// A rank's place in a group: its index and the group's size. What a layer reads of a group to
// declare its shards; a declare-only build (the planner's, export's) has places and no
// communicators.
struct GroupPlace {
  int rank = 0;
  int size = 1;
};

// A group a module talks over: this rank's place in it and, in a build that runs, its Comm. A
// default group is one process with no communicator (a module that needs one takes local_comm).
struct CommGroup {
  GroupPlace place;

  CommGroup() = default;
  CommGroup(Comm& c) : place{c.rank(), c.size()}, comm_(&c) {}  // NOLINT: a Comm is a group
  CommGroup(Comm* c) : place{c ? c->rank() : 0, c ? c->size() : 1}, comm_(c) {}  // NOLINT: null is one process
  explicit CommGroup(GroupPlace p) : place(p) {}

  int rank() const { return place.rank; }
  int size() const { return place.size; }
  bool communicates() const { return comm_ != nullptr; }
  // The communicator; an error in a declare-only build, which must never communicate.
  Comm& comm() const {
    if (comm_ == nullptr) refuse();
    return *comm_;
  }

 private:
  [[noreturn]] static void refuse();
  Comm* comm_ = nullptr;  // null: a declare-only build's group, which never communicates
};

// Every rank's `mine`, each of its own length, in rank order on every rank; `starts` gets where
// each rank's begins, and the total after the last. Collective over `comm`.
std::vector<float> all_gather_lists(Comm& comm, const std::vector<float>& mine, std::vector<int64_t>& starts);

// A group of one process: collectives copy (within `memory`, where the tensors live) or do nothing;
// point to point with itself is an error.
std::unique_ptr<Comm> make_local_comm(const DeviceMemory& memory = host_memory());
// The process's one LocalComm for tensors in `memory`'s device (what a module without a group,
// TP or CP of one, talks over).
Comm& local_comm(const DeviceMemory& memory);

// Errors the ranks agree on (DESIGN invariant 6). An error that strikes a rank while the others
// wait for it in a collective must end the job (abort_job); but an error met where every rank
// arrives without communicating — a missing file, a bad value, a full disk during a save — can
// be told to every rank, so that rank 0 reports it once and every rank exits non-zero in order.
//
// Collective over `world`: each rank passes the error it met, if any. Returns on every rank the
// lowest rank that failed and its message, or nothing.
struct RankMessage {
  int rank = 0;
  std::string message;
};
std::optional<RankMessage> first_error(Comm& world, const std::optional<std::string>& mine);
// Runs `step`, which must not communicate, on every rank of `world`; when it throws
// tessel::Error on any rank, every rank throws one tessel::JobError with the first failing
// rank's message ("[rank R] " before it unless R is 0).
void check_together(Comm& world, const std::function<void()>& step);

}  // namespace tessel
