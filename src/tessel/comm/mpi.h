// MPI backend of Comm (Open MPI), and the process-wide MPI state: start-up, rank, finalize, and
// ending the whole job when one rank fails (DESIGN invariant 6: never a hang).
//
// Only this file, mpi.cpp, mpi_wait.cpp and groups.cpp include <mpi.h>; the rest of tessel sees
// Comm. Errors inside MPI stay MPI_ERRORS_ARE_FATAL (the default): a failed call ends the job.
//
// Every call waits through wait_for_request (mpi_wait.cpp): each collective and point-to-point
// operation is started non-blocking and polled, first in a tight loop, then sleeping between
// polls, so a rank waiting for a slow one does not burn a core; a wait that makes no progress for
// the distributed timeout ends the job with a message naming the rank, the group and the call.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "tessel/comm/comm.h"

namespace tessel {

// How long one wait may go without its operation completing before the job is ended
// (Megatron's --distributed-timeout-minutes; 10 minutes unless set). Process-wide.
void set_distributed_timeout(double seconds);
double distributed_timeout();

// Comm over one MPI communicator, which it owns (MPI_Comm_free in the destructor). float goes as
// MPI_FLOAT and double as MPI_DOUBLE. Counts are int64_t in the interface but int in MPI: a count
// or offset above INT_MAX throws tessel::Error. all_gather may run in place
// (send == recv + rank() · count); other overlaps of send and recv throw.
class MpiComm final : public Comm {
 public:
  // Takes ownership of `comm` (from MPI_Comm_split or MPI_Comm_dup; never MPI_COMM_WORLD itself).
  // `name` (the group kind: "tp", "dp_cp", ...) names the group in timeout messages.
  explicit MpiComm(MPI_Comm comm, std::string name = "world");
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm handle() const { return comm_; }
  const std::string& name() const { return name_; }
  // Waits for a request this Comm started (`what`: the call, e.g. "all_reduce"; `peer`: the
  // group-local peer of a send or receive, -1 for a collective): mpi_wait.cpp.
  void wait(MPI_Request& request, const char* what, int peer = -1) const;

  // Default arguments repeat Comm's, for calls through an MpiComm.
  void all_reduce(float* data, int64_t count, ReduceOp op = ReduceOp::Sum) override;
  void all_reduce(double* data, int64_t count, ReduceOp op = ReduceOp::Sum) override;
  Request all_reduce_async(float* data, int64_t count, ReduceOp op = ReduceOp::Sum) override;
  Request all_reduce_async(double* data, int64_t count, ReduceOp op = ReduceOp::Sum) override;
  void all_gather(const float* send, float* recv, int64_t count) override;
  Request all_gather_async(const float* send, float* recv, int64_t count) override;
  void reduce_scatter(const float* send, float* recv, int64_t count) override;
  Request reduce_scatter_async(const float* send, float* recv, int64_t count) override;
  void all_gather_v(const float* send, float* recv, const int64_t* recv_counts,
                    const int64_t* recv_offsets) override;
  Request all_gather_v_async(const float* send, float* recv, const int64_t* recv_counts,
                             const int64_t* recv_offsets) override;
  void reduce_scatter_v(const float* send, float* recv, const int64_t* counts) override;
  void all_to_all_v(const float* send, const int64_t* send_counts, const int64_t* send_offsets,
                    float* recv, const int64_t* recv_counts, const int64_t* recv_offsets) override;
  void broadcast(float* data, int64_t count, int root) override;
  void barrier() override;
  Request isend(const float* data, int64_t count, int peer, int tag) override;
  Request irecv(float* data, int64_t count, int peer, int tag) override;

 private:
  void check_peer(int peer, const char* what) const;
  void check_tag(int tag) const;
  // A non-blocking call counted under `op` (moving `bytes`), returned to be waited for.
  // `arrays`: what MPI may read until the call completes (a v-collective's counts and offsets).
  Request started(MPI_Request request, CommOp op, double bytes, int peer = -1,
                  std::shared_ptr<const std::vector<int>> arrays = nullptr);
  void start_all_gather(const float* send, float* recv, int64_t count, MPI_Request& request);
  // Starts all_gather_v; returns the bytes gathered. `arrays` gets MPI's counts, then offsets.
  double start_all_gather_v(const float* send, float* recv, const int64_t* recv_counts,
                            const int64_t* recv_offsets, std::vector<int>& arrays, MPI_Request& request);

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;  // MPI_TAG_UB of the communicator; the standard guarantees at least this
  std::vector<float> reduce_scatter_staging_;  // one piece of every rank's block, see reduce_scatter
};

// True when an MPI launcher started this process: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE),
// any PMIx launcher (PMIX_RANK), or a PMI-1/2 one such as MPICH's or Slurm's (PMI_SIZE).
bool launched_by_mpi();

// The process-wide MPI state; exactly one, created first thing in main() and destroyed last.
// Under an MPI launcher it calls MPI_Init_thread (MPI_THREAD_FUNNELED: only the main thread
// calls MPI; OpenMP threads never do) and MPI_Finalize on destruction; otherwise it does nothing
// and the process is a world of one rank (no MPI_Init, so a plain run needs no launcher).
// Every communicator (MpiComm, ProcessGroups) must be destroyed before it.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  bool active() const { return active_; }  // MPI_Init was called
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Every process of the job (a LocalComm without MPI): for what ranks must agree on before
  // their process groups exist, such as an error in the flags (check_together, comm.h).
  Comm& world() { return *world_; }

 private:
  std::unique_ptr<Comm> world_;
  bool active_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
};

// Ends the whole job: prints "tessel: error: <message>" once to stderr (prefixed "[rank R] " on
// ranks other than 0) and calls MPI_Abort(MPI_COMM_WORLD, code), which makes mpirun kill every
// rank, including those waiting in a collective for this one. Without MPI it exits with `code`.
[[noreturn]] void abort_job(const std::string& message, int code = 1);

}  // namespace tessel
