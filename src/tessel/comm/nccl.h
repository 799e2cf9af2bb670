// NcclComm: the Comm of a group whose tensors live on CUDA devices, one process per GPU, over
// NCCL (built with TESSEL_CUDA). Bootstrapped through MPI: rank 0 of the group creates NCCL's
// unique id and broadcasts it over the group's MPI communicator.
//
// Ordering: NCCL runs on a stream of its own. Each call first makes that stream wait for the
// work already queued on the kernels' stream (cuda_stream()), and the kernels' stream then waits
// for the call's result — for a blocking call at once, for a non-blocking one in wait() — so
// everything stays in stream order and the host is never held up. A blocking call has therefore
// returned before the transfer has run, and its "seconds blocked" (comm.h's counters) is host
// time only; the data is ready for every later kernel and for to_host.
//
// Point to point: NCCL pairs sends and receives by posting order, and a send queued on a stream
// ahead of a receive the peer waits on deadlocks, so isend and irecv are collected and launched
// together in one NCCL group at the next other call on this Comm or the first wait() or test().
// Their data is taken as the kernels' stream had it when they were posted, and the group runs
// beside the kernels queued after the post.
//
// Buffers in host memory (loss scalars, counts, checkpoint buffers) go over MPI on the same
// group, as with MpiComm.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "tessel/comm/mpi.h"

namespace tessel {

struct P2pDone;  // when a posted isend/irecv is done (nccl.cpp)

class NcclComm final : public Comm {
 public:
  // Collective over the ranks of `comm`, which it owns (split or dup, as MpiComm). Every rank must
  // use a different device (cuda_device()); make_comm (device_comm.h) picks StagedComm otherwise.
  explicit NcclComm(MPI_Comm comm);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }

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
  void reduce_scatter_v(const float* send, float* recv, const int64_t* counts) override;
  void all_to_all_v(const float* send, const int64_t* send_counts, const int64_t* send_offsets,
                    float* recv, const int64_t* recv_counts, const int64_t* recv_offsets) override;
  void broadcast(float* data, int64_t count, int root) override;
  void barrier() override;
  Request isend(const float* data, int64_t count, int peer, int tag) override;
  Request irecv(float* data, int64_t count, int peer, int tag) override;

  // Launches the collected sends and receives (wait() and every other call do it first).
  void flush();

 private:
  struct Posted {  // an isend or irecv not yet launched
    bool send;
    float* data;
    int64_t count;
    int peer;
    std::shared_ptr<P2pDone> done;
  };

  bool on_device(const void* a, const void* b) const;
  void begin();       // NCCL's stream waits for the kernels' queued work
  cudaEvent_t end();  // records the call's completion on NCCL's stream
  Request pending(cudaEvent_t finished, CommOp op, CallTicket ticket);

  MpiComm host_;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;      // the kernels' stream at a call's start
  cudaEvent_t p2p_ready_ = nullptr;  // the kernels' stream at the last isend/irecv
  std::vector<Posted> posted_;
};

}  // namespace tessel
