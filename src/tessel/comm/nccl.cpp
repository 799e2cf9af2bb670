#include "tessel/comm/nccl.h"

#include <chrono>

#include "tessel/core/cuda.h"
#include "tessel/core/error.h"

namespace tessel {

// The event that says when a posted isend/irecv has completed; null until its group launched.
struct P2pDone {
  cudaEvent_t event = nullptr;
  ~P2pDone() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check(ncclResult_t result, const char* what, ncclComm_t comm = nullptr) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  fail("nccl: {}: {} ({})", what, ncclGetErrorString(result),
       comm != nullptr ? ncclGetLastError(comm) : "");
}

ncclRedOp_t to_nccl(ReduceOp op) { return op == ReduceOp::Max ? ncclMax : ncclSum; }

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}

// A non-blocking collective: done when its event on NCCL's stream is; wait() puts that event in
// the kernels' stream's way. Dropped unwaited, it does the same, so no later kernel races it.
class NcclRequest final : public Request::Impl {
 public:
  NcclRequest(cudaEvent_t event, Comm& comm, CommOp op, CallTicket ticket)
      : event_(event), comm_(comm), op_(op), ticket_(ticket) {}
  ~NcclRequest() override {
    if (!waited_) cudaStreamWaitEvent(cuda_stream(), event_, 0);
    cudaEventDestroy(event_);
  }
  void wait() override {
    const Clock::time_point start = Clock::now();
    cuda_check(cudaStreamWaitEvent(cuda_stream(), event_, 0), "cudaStreamWaitEvent");
    waited_ = true;
    comm_.note_blocked(op_, ticket_, seconds_since(start));
  }
  bool test() override {
    if (cudaEventQuery(event_) != cudaSuccess) return false;
    wait();
    return true;
  }

 private:
  cudaEvent_t event_;
  Comm& comm_;
  CommOp op_;
  CallTicket ticket_;
  bool waited_ = false;
};

class NcclP2pRequest final : public Request::Impl {
 public:
  NcclP2pRequest(NcclComm& comm, std::shared_ptr<P2pDone> done, CommOp op, CallTicket ticket)
      : comm_(comm), done_(std::move(done)), op_(op), ticket_(ticket) {}
  ~NcclP2pRequest() override {
    if (!waited_) wait();  // launches it if still collected: a peer may be waiting for it
  }
  void wait() override {
    const Clock::time_point start = Clock::now();
    if (done_->event == nullptr) comm_.flush();
    cuda_check(cudaStreamWaitEvent(cuda_stream(), done_->event, 0), "cudaStreamWaitEvent");
    waited_ = true;
    comm_.note_blocked(op_, ticket_, seconds_since(start));
  }
  bool test() override {
    if (done_->event == nullptr) comm_.flush();
    if (cudaEventQuery(done_->event) != cudaSuccess) return false;
    wait();
    return true;
  }

 private:
  NcclComm& comm_;
  std::shared_ptr<P2pDone> done_;
  CommOp op_;
  CallTicket ticket_;
  bool waited_ = false;
};

}  // namespace

NcclComm::NcclComm(MPI_Comm comm) : host_(comm) {
  cuda_stream();  // selects this rank's device before NCCL looks for it
  ncclUniqueId id{};
  if (host_.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, host_.handle());
  check(ncclCommInitRank(&nccl_, host_.size(), id, host_.rank()), "ncclCommInitRank");
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate (nccl)");
  ready_ = new_event();
  p2p_ready_ = new_event();
  members_ = host_.members();
}

NcclComm::~NcclComm() {
  flush();
  cudaStreamSynchronize(stream_);
  ncclCommDestroy(nccl_);
  cudaEventDestroy(ready_);
  cudaEventDestroy(p2p_ready_);
  cudaStreamDestroy(stream_);
}

bool NcclComm::on_device(const void* a, const void* b) const {
  const bool first = cuda_is_device_pointer(a), second = cuda_is_device_pointer(b);
  TESSEL_CHECK(first == second, "comm/nccl.cpp: one call's buffers are in device and host memory");
  return first;
}

void NcclComm::begin() {
  flush();  // collected point-to-point goes first, in the order it was posted
  cuda_check(cudaEventRecord(ready_, cuda_stream()), "cudaEventRecord");
  cuda_check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
}

cudaEvent_t NcclComm::end() {
  cudaEvent_t done = new_event();
  cuda_check(cudaEventRecord(done, stream_), "cudaEventRecord");
  return done;
}

Request NcclComm::pending(cudaEvent_t finished, CommOp op, CallTicket ticket) {
  return Request(std::make_shared<NcclRequest>(finished, *this, op, ticket));
}

void NcclComm::flush() {
  if (posted_.empty()) return;
  cuda_check(cudaStreamWaitEvent(stream_, p2p_ready_, 0), "cudaStreamWaitEvent");
  check(ncclGroupStart(), "ncclGroupStart");
  for (const Posted& p : posted_) {
    if (p.send) {
      check(ncclSend(p.data, p.count, ncclFloat, p.peer, nccl_, stream_), "ncclSend", nccl_);
    } else {
      check(ncclRecv(p.data, p.count, ncclFloat, p.peer, nccl_, stream_), "ncclRecv", nccl_);
    }
  }
  check(ncclGroupEnd(), "ncclGroupEnd", nccl_);
  for (Posted& p : posted_) {
    p.done->event = new_event();
    cuda_check(cudaEventRecord(p.done->event, stream_), "cudaEventRecord");
  }
  posted_.clear();
}

// A blocking call (the statements after the counter and bytes): the kernels' stream waits for it.
#define TESSEL_NCCL_BLOCKING(counter_op, bytes, ...)                                \
  do {                                                                              \
    const Clock::time_point start = Clock::now();                                   \
    const CallTicket ticket = note_call(counter_op, bytes);                         \
    begin();                                                                        \
    __VA_ARGS__;                                                                    \
    cudaEvent_t done = end();                                                       \
    cuda_check(cudaStreamWaitEvent(cuda_stream(), done, 0), "cudaStreamWaitEvent"); \
    cudaEventDestroy(done);                                                         \
    note_blocked(counter_op, ticket, seconds_since(start));                         \
  } while (0)

void NcclComm::all_reduce(float* data, int64_t count, ReduceOp op) {
  if (!on_device(data, data)) {
    flush();
    host_.all_reduce(data, count, op);
    return;
  }
  TESSEL_NCCL_BLOCKING(
      CommOp::AllReduce, count * 4.0,
      check(ncclAllReduce(data, data, count, ncclFloat, to_nccl(op), nccl_, stream_),
            "ncclAllReduce", nccl_));
}

void NcclComm::all_reduce(double* data, int64_t count, ReduceOp op) {
  if (!on_device(data, data)) {
    flush();
    host_.all_reduce(data, count, op);
    return;
  }
  TESSEL_NCCL_BLOCKING(
      CommOp::AllReduce, count * 8.0,
      check(ncclAllReduce(data, data, count, ncclDouble, to_nccl(op), nccl_, stream_),
            "ncclAllReduce", nccl_));
}

Request NcclComm::all_reduce_async(float* data, int64_t count, ReduceOp op) {
  if (!on_device(data, data)) {
    flush();
    return host_.all_reduce_async(data, count, op);
  }
  const CallTicket ticket = note_call(CommOp::AllReduce, count * 4.0);
  begin();
  check(ncclAllReduce(data, data, count, ncclFloat, to_nccl(op), nccl_, stream_), "ncclAllReduce",
        nccl_);
  return pending(end(), CommOp::AllReduce, ticket);
}

Request NcclComm::all_reduce_async(double* data, int64_t count, ReduceOp op) {
  if (!on_device(data, data)) {
    flush();
    return host_.all_reduce_async(data, count, op);
  }
  const CallTicket ticket = note_call(CommOp::AllReduce, count * 8.0);
  begin();
  check(ncclAllReduce(data, data, count, ncclDouble, to_nccl(op), nccl_, stream_), "ncclAllReduce",
        nccl_);
  return pending(end(), CommOp::AllReduce, ticket);
}

// In place when send is this rank's block of recv, which NCCL accepts as it is.
void NcclComm::all_gather(const float* send, float* recv, int64_t count) {
  if (!on_device(send, recv)) {
    flush();
    host_.all_gather(send, recv, count);
    return;
  }
  TESSEL_NCCL_BLOCKING(
      CommOp::AllGather, size() * count * 4.0,
      check(ncclAllGather(send, recv, count, ncclFloat, nccl_, stream_), "ncclAllGather", nccl_));
}

Request NcclComm::all_gather_async(const float* send, float* recv, int64_t count) {
  if (!on_device(send, recv)) {
    flush();
    return host_.all_gather_async(send, recv, count);
  }
  const CallTicket ticket = note_call(CommOp::AllGather, size() * count * 4.0);
  begin();
  check(ncclAllGather(send, recv, count, ncclFloat, nccl_, stream_), "ncclAllGather", nccl_);
  return pending(end(), CommOp::AllGather, ticket);
}

void NcclComm::reduce_scatter(const float* send, float* recv, int64_t count) {
  if (!on_device(send, recv)) {
    flush();
    host_.reduce_scatter(send, recv, count);
    return;
  }
  TESSEL_NCCL_BLOCKING(
      CommOp::ReduceScatter, size() * count * 4.0,
      check(ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, nccl_, stream_),
            "ncclReduceScatter", nccl_));
}

Request NcclComm::reduce_scatter_async(const float* send, float* recv, int64_t count) {
  if (!on_device(send, recv)) {
    flush();
    return host_.reduce_scatter_async(send, recv, count);
  }
  const CallTicket ticket = note_call(CommOp::ReduceScatter, size() * count * 4.0);
  begin();
  check(ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, nccl_, stream_),
        "ncclReduceScatter", nccl_);
  return pending(end(), CommOp::ReduceScatter, ticket);
}

// NCCL has no variable all-gather: every rank's block goes to every other rank in one group of
// sends and receives; this rank's own block is copied (unless it is already in place).
void NcclComm::all_gather_v(const float* send, float* recv, const int64_t* recv_counts,
                            const int64_t* recv_offsets) {
  if (!on_device(send, recv)) {
    flush();
    host_.all_gather_v(send, recv, recv_counts, recv_offsets);
    return;
  }
  int64_t gathered = 0;
  for (int r = 0; r < size(); ++r) gathered += recv_counts[r];
  const int me = rank();
  TESSEL_NCCL_BLOCKING(CommOp::AllGather, gathered * 4.0, {
    float* own = recv + recv_offsets[me];
    if (send != own && recv_counts[me] > 0)
      cuda_check(cudaMemcpyAsync(own, send, recv_counts[me] * 4, cudaMemcpyDeviceToDevice, stream_),
                 "cudaMemcpyAsync");
    check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r) {
      if (r == me) continue;
      if (recv_counts[me] > 0)
        check(ncclSend(send, recv_counts[me], ncclFloat, r, nccl_, stream_), "ncclSend", nccl_);
      if (recv_counts[r] > 0)
        check(ncclRecv(recv + recv_offsets[r], recv_counts[r], ncclFloat, r, nccl_, stream_),
              "ncclRecv", nccl_);
    }
    check(ncclGroupEnd(), "ncclGroupEnd", nccl_);
  });
}

// NCCL has no variable reduce-scatter: one reduce per rank, to that rank as root, in one group.
void NcclComm::reduce_scatter_v(const float* send, float* recv, const int64_t* counts) {
  if (!on_device(send, recv)) {
    flush();
    host_.reduce_scatter_v(send, recv, counts);
    return;
  }
  int64_t total = 0;
  for (int r = 0; r < size(); ++r) total += counts[r];
  TESSEL_NCCL_BLOCKING(CommOp::ReduceScatter, total * 4.0, {
    check(ncclGroupStart(), "ncclGroupStart");
    int64_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      check(ncclReduce(send + offset, recv, counts[r], ncclFloat, ncclSum, r, nccl_, stream_),
            "ncclReduce", nccl_);
      offset += counts[r];
    }
    check(ncclGroupEnd(), "ncclGroupEnd", nccl_);
  });
}

void NcclComm::all_to_all_v(const float* send, const int64_t* send_counts,
                            const int64_t* send_offsets, float* recv, const int64_t* recv_counts,
                            const int64_t* recv_offsets) {
  if (!on_device(send, recv)) {
    flush();
    host_.all_to_all_v(send, send_counts, send_offsets, recv, recv_counts, recv_offsets);
    return;
  }
  const int me = rank();
  TESSEL_CHECK(send_counts[me] == recv_counts[me],
               "comm/nccl.cpp: all_to_all_v sends {} elements to itself but expects {}",
               send_counts[me], recv_counts[me]);
  int64_t sent_elsewhere = 0;
  for (int r = 0; r < size(); ++r)
    if (r != me) sent_elsewhere += send_counts[r];
  TESSEL_NCCL_BLOCKING(CommOp::AllToAll, sent_elsewhere * 4.0, {
    if (send_counts[me] > 0)
      cuda_check(cudaMemcpyAsync(recv + recv_offsets[me], send + send_offsets[me],
                                 send_counts[me] * 4, cudaMemcpyDeviceToDevice, stream_),
                 "cudaMemcpyAsync");
    check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r) {
      if (r == me) continue;
      if (send_counts[r] > 0)
        check(ncclSend(send + send_offsets[r], send_counts[r], ncclFloat, r, nccl_, stream_),
              "ncclSend", nccl_);
      if (recv_counts[r] > 0)
        check(ncclRecv(recv + recv_offsets[r], recv_counts[r], ncclFloat, r, nccl_, stream_),
              "ncclRecv", nccl_);
    }
    check(ncclGroupEnd(), "ncclGroupEnd", nccl_);
  });
}

void NcclComm::broadcast(float* data, int64_t count, int root) {
  TESSEL_CHECK(root >= 0 && root < size(), "comm/nccl.cpp: broadcast root {} outside a group of {}",
               root, size());
  if (!on_device(data, data)) {
    flush();
    host_.broadcast(data, count, root);
    return;
  }
  TESSEL_NCCL_BLOCKING(CommOp::Broadcast, count * 4.0,
                       check(ncclBroadcast(data, data, count, ncclFloat, root, nccl_, stream_),
                             "ncclBroadcast", nccl_));
}

// Every rank's queued device work on this group is done, then the ranks meet over MPI.
void NcclComm::barrier() {
  flush();
  cuda_check(cudaStreamSynchronize(cuda_stream()), "cudaStreamSynchronize");
  cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (nccl)");
  host_.barrier();
}

Request NcclComm::isend(const float* data, int64_t count, int peer, int tag) {
  TESSEL_CHECK(peer >= 0 && peer < size(), "comm/nccl.cpp: isend to rank {} outside a group of {}",
               peer, size());
  if (!on_device(data, data)) {
    flush();
    return host_.isend(data, count, peer, tag);
  }
  // NCCL matches by order, not tag: ranks post their messages in the same order (as the
  // schedules do).
  const CallTicket ticket = note_call(CommOp::Send, count * 4.0, peer);
  cuda_check(cudaEventRecord(p2p_ready_, cuda_stream()), "cudaEventRecord");
  auto done = std::make_shared<P2pDone>();
  posted_.push_back({true, const_cast<float*>(data), count, peer, done});
  return Request(std::make_shared<NcclP2pRequest>(*this, done, CommOp::Send, ticket));
}

Request NcclComm::irecv(float* data, int64_t count, int peer, int tag) {
  TESSEL_CHECK(peer >= 0 && peer < size(),
               "comm/nccl.cpp: irecv from rank {} outside a group of {}", peer, size());
  if (!on_device(data, data)) {
    flush();
    return host_.irecv(data, count, peer, tag);
  }
  const CallTicket ticket = note_call(CommOp::Recv, count * 4.0, peer);
  cuda_check(cudaEventRecord(p2p_ready_, cuda_stream()), "cudaEventRecord");
  auto done = std::make_shared<P2pDone>();
  posted_.push_back({false, data, count, peer, done});
  return Request(std::make_shared<NcclP2pRequest>(*this, done, CommOp::Recv, ticket));
}

}  // namespace tessel
