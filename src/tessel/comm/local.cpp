// LocalComm: the Comm of a group of one process. Every collective's result is this rank's own
// contribution, so a collective is a copy (or nothing, in place); point to point would be a
// message to itself, which no caller needs, so it is an error rather than a silent hang.

#include "tessel/comm/comm.h"
#include "tessel/core/error.h"

namespace tessel {
namespace {

class LocalComm final : public Comm {
 public:
  explicit LocalComm(const DeviceMemory& memory) : memory_(memory) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }

  void all_reduce(float*, int64_t, ReduceOp) override {}
  void all_reduce(double*, int64_t, ReduceOp) override {}
  Request all_reduce_async(float*, int64_t, ReduceOp) override { return Request(); }
  Request all_reduce_async(double*, int64_t, ReduceOp) override { return Request(); }

  void all_gather(const float* send, float* recv, int64_t count) override {
    copy_unless_same(send, recv, count);
  }
  Request all_gather_async(const float* send, float* recv, int64_t count) override {
    all_gather(send, recv, count);
    return Request();
  }

  void reduce_scatter(const float* send, float* recv, int64_t count) override {
    copy_unless_same(send, recv, count);
  }
  Request reduce_scatter_async(const float* send, float* recv, int64_t count) override {
    reduce_scatter(send, recv, count);
    return Request();
  }

  void all_gather_v(const float* send, float* recv, const int64_t* recv_counts,
                    const int64_t* recv_offsets) override {
    copy_unless_same(send, recv + recv_offsets[0], recv_counts[0]);
  }
  void reduce_scatter_v(const float* send, float* recv, const int64_t* counts) override {
    copy_unless_same(send, recv, counts[0]);
  }

  void all_to_all_v(const float* send, const int64_t* send_counts, const int64_t* send_offsets,
                    float* recv, const int64_t* recv_counts, const int64_t* recv_offsets) override {
    TESSEL_CHECK(send_counts[0] == recv_counts[0],
                 "comm/local.cpp: all_to_all_v sends {} elements to itself but expects {}",
                 send_counts[0], recv_counts[0]);
    copy_unless_same(send + send_offsets[0], recv + recv_offsets[0], send_counts[0]);
  }

  void broadcast(float*, int64_t, int root) override {
    TESSEL_CHECK(root == 0, "comm/local.cpp: broadcast from rank {} in a group of one process",
                 root);
  }
  void barrier() override {}

  Request isend(const float*, int64_t, int peer, int) override {
    fail("comm/local.cpp: isend to rank {} in a group of one process (no message to itself)", peer);
  }
  Request irecv(float*, int64_t, int peer, int) override {
    fail("comm/local.cpp: irecv from rank {} in a group of one process (no message to itself)",
         peer);
  }

 private:
  void copy_unless_same(const float* from, float* to, int64_t count) const {
    if (from != to) memory_.copy(to, from, count * static_cast<int64_t>(sizeof(float)));
  }

  const DeviceMemory& memory_;
};

}  // namespace

std::unique_ptr<Comm> make_local_comm(const DeviceMemory& memory) {
  return std::make_unique<LocalComm>(memory);
}

Comm& local_comm(const DeviceMemory& memory) {
  static std::unique_ptr<Comm> host = make_local_comm(), device;
  if (memory.device == Device::CPU) return *host;
  if (device == nullptr) device = make_local_comm(memory);
  return *device;
}

}  // namespace tessel
