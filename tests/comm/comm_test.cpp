// LocalComm: the Comm of a one-process group, which single-process runs talk through.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/parallel/groups.h"
#include "tessel/core/error.h"

namespace tessel {

TEST(LocalComm, CollectivesKeepOrCopyTheOwnContribution) {
  auto comm = make_local_comm();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);

  std::vector<float> data = {1.5f, -2.0f, 3.0f};
  std::vector<double> wide = {1e12 + 1, -4.0};
  comm->all_reduce(data.data(), 3, ReduceOp::Sum);
  comm->all_reduce(data.data(), 3, ReduceOp::Max);
  comm->all_reduce(wide.data(), 2);
  comm->all_reduce_async(data.data(), 3).wait();
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.0f}));
  EXPECT_EQ(wide, (std::vector<double>{1e12 + 1, -4.0}));

  std::vector<float> gathered(3, 0.0f), scattered(3, 0.0f), async_out(3, 0.0f);
  comm->all_gather(data.data(), gathered.data(), 3);
  EXPECT_EQ(gathered, data);
  comm->reduce_scatter(data.data(), scattered.data(), 3);
  EXPECT_EQ(scattered, data);
  comm->all_gather_async(data.data(), async_out.data(), 2).wait();
  EXPECT_EQ(async_out, (std::vector<float>{1.5f, -2.0f, 0.0f}));
  comm->reduce_scatter_async(data.data() + 1, async_out.data(), 2).wait();
  EXPECT_EQ(async_out, (std::vector<float>{-2.0f, 3.0f, 0.0f}));

  comm->broadcast(data.data(), 3, 0);
  comm->barrier();
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.0f}));
}

TEST(LocalComm, AllToAllVCopiesAtTheOffsets) {
  auto comm = make_local_comm();
  std::vector<float> send = {9.0f, 1.0f, 2.0f, 9.0f}, recv(5, 0.0f);
  int64_t send_count = 2, send_offset = 1, recv_count = 2, recv_offset = 3;
  comm->all_to_all_v(send.data(), &send_count, &send_offset, recv.data(), &recv_count,
                     &recv_offset);
  EXPECT_EQ(recv, (std::vector<float>{0.0f, 0.0f, 0.0f, 1.0f, 2.0f}));

  int64_t zero = 0;
  comm->all_to_all_v(send.data(), &zero, &zero, recv.data(), &zero, &zero);
  EXPECT_EQ(recv[0], 0.0f);
  int64_t three = 3;
  EXPECT_THROW(comm->all_to_all_v(send.data(), &send_count, &zero, recv.data(), &three, &zero),
               Error);
}

TEST(LocalComm, PointToPointWithItselfIsAnError) {
  auto comm = make_local_comm();
  float x = 0.0f;
  EXPECT_THROW(comm->isend(&x, 1, 0, 0), Error);
  EXPECT_THROW(comm->irecv(&x, 1, 0, 0), Error);
  EXPECT_THROW(comm->broadcast(&x, 1, 1), Error);
}

// A request that never completes by itself and counts the waits on it.
struct CountingRequest : Request::Impl {
  explicit CountingRequest(int* waits) : waits(waits) {}
  void wait() override { ++*waits; }
  bool test() override { return false; }
  int* waits;
};

TEST(Request, WaitAllWaitsForEachAndEmptiesTheList) {
  Request done;
  EXPECT_TRUE(done.test());
  int waits = 0;
  Request pending(std::make_shared<CountingRequest>(&waits));
  EXPECT_FALSE(pending.test());
  std::vector<Request> requests = {pending, Request(std::make_shared<CountingRequest>(&waits)),
                                   Request()};
  wait_all(requests);
  EXPECT_EQ(waits, 2);
  EXPECT_TRUE(requests.empty());
}

TEST(ProcessGroups, SingleIsOneProcessInEveryGroup) {
  ProcessGroups groups = ProcessGroups::single();
  EXPECT_EQ(groups.world().size(), 1);
  for (GroupKind kind : kAllGroupKinds) {
    EXPECT_EQ(groups.get(kind).size(), 1) << group_kind_name(kind);
    EXPECT_EQ(groups.get(kind).rank(), 0) << group_kind_name(kind);
  }
  float x = 2.0f;
  groups.tp().all_reduce(&x, 1);
  groups.dp_cp().all_reduce(&x, 1);
  EXPECT_EQ(x, 2.0f);
  EXPECT_EQ(groups.coords().tp, 0);
  EXPECT_EQ(groups.world_rank(), 0);
}

}  // namespace tessel
