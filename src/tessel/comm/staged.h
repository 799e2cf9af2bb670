// StagedComm: the Comm of a group whose tensors live in device memory, moved through the host —
// every device buffer is copied to a host buffer, the call made on an inner host Comm (MpiComm),
// and the result copied back. It lets several ranks share one GPU (tests, two ranks on one
// device), which NCCL refuses; one process per GPU uses NcclComm (nccl.h) instead.
//
// Host buffers (loss scalars, counts) go through the same staging copies. The non-blocking forms
// copy in when they start and copy out in wait() (or when test() first finds them done); isend's
// data is copied when it is posted, so the caller may overwrite it at once.
#pragma once

#include <memory>

#include "tessel/comm/comm.h"
#include "tessel/core/device.h"

namespace tessel {

class StagedComm final : public Comm {
 public:
  // on_device(p): whether p is in `memory` (copied with its to_host/from_host) rather than on the
  // host (copied plainly). `host` carries the messages.
  StagedComm(std::unique_ptr<Comm> host, const DeviceMemory& memory,
             bool (*on_device)(const void*));

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }

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

 private:
  template <typename T>
  Request staged_all_reduce_async(T* data, int64_t count, ReduceOp op);
  template <typename T>
  void copy_in(T* host, const T* src, int64_t count) const;
  template <typename T>
  void copy_out(T* dst, const T* host, int64_t count) const;

  std::unique_ptr<Comm> host_;
  const DeviceMemory& memory_;
  bool (*on_device_)(const void*);
};

}  // namespace tessel
