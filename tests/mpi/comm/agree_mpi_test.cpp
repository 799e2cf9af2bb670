// Errors the ranks agree on (comm.h): first_error gives every rank the lowest failing rank and
// its message, check_together turns an error on any rank into one JobError on every rank; and a
// wait that makes progress within the distributed timeout is not ended by it. 2 and 4 ranks.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "support/world_copy.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"

namespace tessel {
namespace {

TEST(Agree, NoErrorAnywhere) {
  auto comm = world_copy();
  EXPECT_FALSE(first_error(*comm, std::nullopt).has_value());
  check_together(*comm, [] {});
}

TEST(Agree, LowestFailingRankIsToldToEveryRank) {
  auto comm = world_copy();
  const int size = comm->size();
  // The ranks from 1 on fail, each with its own message.
  const std::optional<std::string> mine =
      comm->rank() >= 1 ? std::optional<std::string>("rank " + std::to_string(comm->rank()) + " is out of disk ✗")
                        : std::nullopt;
  const std::optional<RankMessage> first = first_error(*comm, mine);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->rank, 1);
  EXPECT_EQ(first->message, "rank 1 is out of disk ✗");
  EXPECT_GE(size, 2);
}

TEST(Agree, CheckTogetherThrowsOnEveryRank) {
  auto comm = world_copy();
  const int last = comm->size() - 1;
  try {
    check_together(*comm, [&] {
      if (comm->rank() == last) fail("{}: missing", "data.txt");
    });
    ADD_FAILURE() << "no JobError on rank " << comm->rank();
  } catch (const JobError& e) {
    EXPECT_EQ(std::string(e.what()), "[rank " + std::to_string(last) + "] data.txt: missing");
  }
  try {
    check_together(*comm, [] { fail("every rank alike"); });
    ADD_FAILURE() << "no JobError";
  } catch (const JobError& e) {
    EXPECT_EQ(std::string(e.what()), "every rank alike");  // rank 0's, without a prefix
  }
}

TEST(Agree, SlowPeerWithinTheTimeoutIsWaitedFor) {
  auto comm = world_copy();
  const double before = distributed_timeout();
  set_distributed_timeout(5.0);
  // Rank 0 arrives 300 ms late: the others wait, sleeping between polls, and go on.
  if (comm->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  double x = 1;
  comm->all_reduce(&x, 1);
  EXPECT_EQ(x, comm->size());
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (comm->rank() != 0) {
    EXPECT_GT(waited, 0.2);
  }
  set_distributed_timeout(before);
}

}  // namespace
}  // namespace tessel
