#include "tessel/comm/staged.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace tessel {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Counts one call of `comm` moving `bytes`; the time until it goes out of scope is blocked (as
// MpiComm).
class Blocked {
 public:
  Blocked(Comm& comm, CommOp op, double bytes)
      : comm_(comm), op_(op), ticket_(comm.note_call(op, bytes)), start_(Clock::now()) {}
  ~Blocked() { comm_.note_blocked(op_, ticket_, seconds_since(start_)); }

 private:
  Comm& comm_;
  CommOp op_;
  CallTicket ticket_;
  Clock::time_point start_;
};

// The inner request, and what completes it here: copying the staged result out. Dropped while in
// flight, it is waited for (the inner Comm may still write the staging buffer).
class StagedRequest final : public Request::Impl {
 public:
  StagedRequest(Request inner, std::function<void()> finish, Comm& comm, CommOp op, CallTicket ticket)
      : inner_(std::move(inner)), finish_(std::move(finish)), comm_(comm), op_(op), ticket_(ticket) {}
  ~StagedRequest() override {
    if (!done_) inner_.wait();  // the result is dropped with the request
  }
  void wait() override {
    const Clock::time_point start = Clock::now();
    inner_.wait();
    complete();
    comm_.note_blocked(op_, ticket_, seconds_since(start));
  }
  bool test() override {
    if (!done_ && inner_.test()) complete();
    return done_;
  }

 private:
  void complete() {
    if (done_) return;
    done_ = true;
    if (finish_) finish_();
  }
  Request inner_;
  std::function<void()> finish_;
  Comm& comm_;
  CommOp op_;
  CallTicket ticket_;
  bool done_ = false;
};

template <typename T>
using Staging = std::shared_ptr<std::vector<T>>;

template <typename T>
Staging<T> staging(int64_t count) {
  return std::make_shared<std::vector<T>>(std::max<int64_t>(count, 1));
}

int64_t extent(const int64_t* counts, const int64_t* offsets, int size) {
  int64_t end = 0;
  for (int r = 0; r < size; ++r) end = std::max(end, offsets[r] + counts[r]);
  return end;
}

}  // namespace

StagedComm::StagedComm(std::unique_ptr<Comm> host, const DeviceMemory& memory,
                       bool (*on_device)(const void*))
    : host_(std::move(host)), memory_(memory), on_device_(on_device) {
  members_ = host_->members();
}

template <typename T>
void StagedComm::copy_in(T* host, const T* src, int64_t count) const {
  if (count <= 0) return;
  if (on_device_(src)) {
    memory_.to_host(host, src, count * static_cast<int64_t>(sizeof(T)));
  } else {
    std::copy_n(src, count, host);
  }
}

template <typename T>
void StagedComm::copy_out(T* dst, const T* host, int64_t count) const {
  if (count <= 0) return;
  if (on_device_(dst)) {
    memory_.from_host(dst, host, count * static_cast<int64_t>(sizeof(T)));
  } else {
    std::copy_n(host, count, dst);
  }
}

void StagedComm::all_reduce(float* data, int64_t count, ReduceOp op) {
  Blocked call(*this, CommOp::AllReduce, count * 4.0);
  std::vector<float> host(count);
  copy_in(host.data(), data, count);
  host_->all_reduce(host.data(), count, op);
  copy_out(data, host.data(), count);
}

void StagedComm::all_reduce(double* data, int64_t count, ReduceOp op) {
  Blocked call(*this, CommOp::AllReduce, count * 8.0);
  std::vector<double> host(count);
  copy_in(host.data(), data, count);
  host_->all_reduce(host.data(), count, op);
  copy_out(data, host.data(), count);
}

template <typename T>
Request StagedComm::staged_all_reduce_async(T* data, int64_t count, ReduceOp op) {
  const CommOp counted = CommOp::AllReduce;
  const CallTicket ticket = note_call(counted, count * static_cast<double>(sizeof(T)));
  Staging<T> host = staging<T>(count);
  copy_in(host->data(), data, count);
  Request inner = host_->all_reduce_async(host->data(), count, op);
  return Request(std::make_shared<StagedRequest>(
      std::move(inner), [this, host, data, count] { copy_out(data, host->data(), count); },
      *this, counted, ticket));
}

Request StagedComm::all_reduce_async(float* data, int64_t count, ReduceOp op) {
  return staged_all_reduce_async(data, count, op);
}

Request StagedComm::all_reduce_async(double* data, int64_t count, ReduceOp op) {
  return staged_all_reduce_async(data, count, op);
}

void StagedComm::all_gather(const float* send, float* recv, int64_t count) {
  Blocked call(*this, CommOp::AllGather, size() * count * 4.0);
  std::vector<float> host_send(count), host_recv(size() * count);
  copy_in(host_send.data(), send, count);
  host_->all_gather(host_send.data(), host_recv.data(), count);
  copy_out(recv, host_recv.data(), size() * count);
}

Request StagedComm::all_gather_async(const float* send, float* recv, int64_t count) {
  const CommOp counted = CommOp::AllGather;
  const CallTicket ticket = note_call(counted, size() * count * 4.0);
  Staging<float> host_send = staging<float>(count), host_recv = staging<float>(size() * count);
  copy_in(host_send->data(), send, count);
  Request inner = host_->all_gather_async(host_send->data(), host_recv->data(), count);
  const int64_t total = size() * count;
  return Request(std::make_shared<StagedRequest>(
      std::move(inner),
      [this, host_send, host_recv, recv, total] { copy_out(recv, host_recv->data(), total); },
      *this, counted, ticket));
}

void StagedComm::reduce_scatter(const float* send, float* recv, int64_t count) {
  Blocked call(*this, CommOp::ReduceScatter, size() * count * 4.0);
  std::vector<float> host_send(size() * count), host_recv(count);
  copy_in(host_send.data(), send, size() * count);
  host_->reduce_scatter(host_send.data(), host_recv.data(), count);
  copy_out(recv, host_recv.data(), count);
}

Request StagedComm::reduce_scatter_async(const float* send, float* recv, int64_t count) {
  const CommOp counted = CommOp::ReduceScatter;
  const CallTicket ticket = note_call(counted, size() * count * 4.0);
  Staging<float> host_send = staging<float>(size() * count), host_recv = staging<float>(count);
  copy_in(host_send->data(), send, size() * count);
  Request inner = host_->reduce_scatter_async(host_send->data(), host_recv->data(), count);
  return Request(std::make_shared<StagedRequest>(
      std::move(inner),
      [this, host_send, host_recv, recv, count] { copy_out(recv, host_recv->data(), count); },
      *this, counted, ticket));
}

// Only the ranks' blocks of recv are written: gaps between them keep their contents.
void StagedComm::all_gather_v(const float* send, float* recv, const int64_t* recv_counts,
                              const int64_t* recv_offsets) {
  const int64_t end = extent(recv_counts, recv_offsets, size());
  int64_t gathered = 0;
  for (int r = 0; r < size(); ++r) gathered += recv_counts[r];
  Blocked call(*this, CommOp::AllGather, gathered * 4.0);
  std::vector<float> host_send(recv_counts[rank()]), host_recv(end);
  copy_in(host_send.data(), send, recv_counts[rank()]);
  host_->all_gather_v(host_send.data(), host_recv.data(), recv_counts, recv_offsets);
  for (int r = 0; r < size(); ++r)
    copy_out(recv + recv_offsets[r], host_recv.data() + recv_offsets[r], recv_counts[r]);
}

void StagedComm::reduce_scatter_v(const float* send, float* recv, const int64_t* counts) {
  int64_t total = 0;
  for (int r = 0; r < size(); ++r) total += counts[r];
  Blocked call(*this, CommOp::ReduceScatter, total * 4.0);
  std::vector<float> host_send(total), host_recv(counts[rank()]);
  copy_in(host_send.data(), send, total);
  host_->reduce_scatter_v(host_send.data(), host_recv.data(), counts);
  copy_out(recv, host_recv.data(), counts[rank()]);
}

void StagedComm::all_to_all_v(const float* send, const int64_t* send_counts,
                              const int64_t* send_offsets, float* recv, const int64_t* recv_counts,
                              const int64_t* recv_offsets) {
  int64_t sent_elsewhere = 0;
  for (int r = 0; r < size(); ++r)
    if (r != rank()) sent_elsewhere += send_counts[r];
  Blocked call(*this, CommOp::AllToAll, sent_elsewhere * 4.0);
  const int64_t send_end = extent(send_counts, send_offsets, size());
  const int64_t recv_end = extent(recv_counts, recv_offsets, size());
  std::vector<float> host_send(send_end), host_recv(recv_end);
  copy_in(host_send.data(), send, send_end);
  host_->all_to_all_v(host_send.data(), send_counts, send_offsets, host_recv.data(), recv_counts,
                      recv_offsets);
  for (int r = 0; r < size(); ++r)
    copy_out(recv + recv_offsets[r], host_recv.data() + recv_offsets[r], recv_counts[r]);
}

void StagedComm::broadcast(float* data, int64_t count, int root) {
  Blocked call(*this, CommOp::Broadcast, count * 4.0);
  std::vector<float> host(count);
  if (rank() == root) copy_in(host.data(), data, count);
  host_->broadcast(host.data(), count, root);
  if (rank() != root) copy_out(data, host.data(), count);
}

void StagedComm::barrier() { host_->barrier(); }

Request StagedComm::isend(const float* data, int64_t count, int peer, int tag) {
  const CommOp counted = CommOp::Send;
  const CallTicket ticket = note_call(counted, count * 4.0, peer);
  Staging<float> host = staging<float>(count);
  copy_in(host->data(), data, count);
  Request inner = host_->isend(host->data(), count, peer, tag);
  return Request(std::make_shared<StagedRequest>(
      std::move(inner), [host] {}, *this, counted, ticket));
}

Request StagedComm::irecv(float* data, int64_t count, int peer, int tag) {
  const CommOp counted = CommOp::Recv;
  const CallTicket ticket = note_call(counted, count * 4.0, peer);
  Staging<float> host = staging<float>(count);
  Request inner = host_->irecv(host->data(), count, peer, tag);
  return Request(std::make_shared<StagedRequest>(
      std::move(inner), [this, host, data, count] { copy_out(data, host->data(), count); },
      *this, counted, ticket));
}

}  // namespace tessel
