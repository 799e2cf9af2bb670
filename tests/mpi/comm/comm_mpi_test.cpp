// MpiComm over a copy of MPI_COMM_WORLD: every collective against values each rank can work out
// for every other rank, so any rank can check the whole result. Runs with 2 and 4 ranks.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <memory>
#include <thread>
#include <vector>

#include "tessel/comm/mpi.h"
#include "support/world_copy.h"
#include "tessel/core/error.h"

namespace tessel {
namespace {


// Rank r's contribution at element i of the reductions; small integers, exact in float.
float contribution(int r, int64_t i) { return static_cast<float>((r * 7 + i * 3) % 11 - 5); }

// Element i of a sum and of a max over `size` ranks' contributions.
void expect_sum_and_max(float sum, float max, int size, int64_t i) {
  float expected_sum = 0, expected_max = -1e30f;
  for (int r = 0; r < size; ++r) {
    expected_sum += contribution(r, i);
    expected_max = std::max(expected_max, contribution(r, i));
  }
  EXPECT_EQ(sum, expected_sum) << "element " << i;
  EXPECT_EQ(max, expected_max) << "element " << i;
}

TEST(MpiComm, RankAndSize) {
  auto comm = world_copy();
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm->rank(), rank);
  EXPECT_EQ(comm->size(), size);
}

// Sizes below, at and past the 4 MiB pieces a large all-reduce is sent in (mpi.cpp).
class MpiCommAllReduce : public ::testing::TestWithParam<int64_t> {};

TEST_P(MpiCommAllReduce, FloatSumAndMax) {
  auto comm = world_copy();
  const int64_t n = GetParam();
  std::vector<float> sum(n), max(n);
  for (int64_t i = 0; i < n; ++i) sum[i] = max[i] = contribution(comm->rank(), i);
  comm->all_reduce(sum.data(), n, ReduceOp::Sum);
  comm->all_reduce(max.data(), n, ReduceOp::Max);
  for (int64_t i = 0; i < n; ++i) {
    expect_sum_and_max(sum[i], max[i], comm->size(), i);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, MpiCommAllReduce,
                         ::testing::Values(int64_t{1000}, int64_t{1} << 20, (int64_t{1} << 21) + 7));

// 1e12 + rank: the sum needs double's 53 bits (in float every rank's term would round alike).
TEST(MpiComm, AllReduceDoubleSumAndMax) {
  auto comm = world_copy();
  const int size = comm->size();
  std::vector<double> sum(3, 1e12 + comm->rank()), max(3, 1e12 + comm->rank());
  max[1] = -1e12 - comm->rank();
  comm->all_reduce(sum.data(), 3, ReduceOp::Sum);
  comm->all_reduce(max.data(), 3, ReduceOp::Max);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sum[i], size * 1e12 + size * (size - 1) / 2);
  EXPECT_EQ(max[0], 1e12 + size - 1);
  EXPECT_EQ(max[1], -1e12);
}

TEST(MpiComm, AllReduceAsyncTwoInFlight) {
  auto comm = world_copy();
  const int64_t n = 1 << 16;
  std::vector<float> sum(n), max(n);
  for (int64_t i = 0; i < n; ++i) sum[i] = max[i] = contribution(comm->rank(), i);
  Request sum_done = comm->all_reduce_async(sum.data(), n, ReduceOp::Sum);
  Request max_done = comm->all_reduce_async(max.data(), n, ReduceOp::Max);
  while (!max_done.test()) {
  }
  EXPECT_TRUE(max_done.test());  // complete requests stay complete
  sum_done.wait();
  for (int64_t i = 0; i < n; i += 97) {
    expect_sum_and_max(sum[i], max[i], comm->size(), i);
  }
}

// Block r of the result is rank r's send, whichever way it is called.
void expect_gathered(const std::vector<float>& recv, int size, int64_t count) {
  for (int r = 0; r < size; ++r)
    for (int64_t j = 0; j < count; ++j)
      EXPECT_EQ(recv[r * count + j], r * 10 + j) << "block " << r << " element " << j;
}

TEST(MpiComm, AllGatherInRankOrder) {
  auto comm = world_copy();
  const int64_t count = 3;
  std::vector<float> send(count), recv(comm->size() * count, -1.0f);
  for (int64_t j = 0; j < count; ++j) send[j] = comm->rank() * 10 + j;
  comm->all_gather(send.data(), recv.data(), count);
  expect_gathered(recv, comm->size(), count);

  std::vector<float> async_recv(comm->size() * count, -1.0f);
  comm->all_gather_async(send.data(), async_recv.data(), count).wait();
  expect_gathered(async_recv, comm->size(), count);

  // In place: this rank's block already at its place in the result.
  std::vector<float> in_place(comm->size() * count, -1.0f);
  for (int64_t j = 0; j < count; ++j) in_place[comm->rank() * count + j] = send[j];
  comm->all_gather(in_place.data() + comm->rank() * count, in_place.data(), count);
  expect_gathered(in_place, comm->size(), count);
}

// A few elements, and blocks that go in several pieces with a short last one (mpi.cpp sends
// pieces of 2^20 floats in all).
class MpiCommReduceScatter : public ::testing::TestWithParam<int64_t> {};

TEST_P(MpiCommReduceScatter, GivesEachRankItsSlice) {
  auto comm = world_copy();
  const int size = comm->size(), rank = comm->rank();
  const int64_t count = GetParam();
  std::vector<float> send(size * count);
  for (int64_t k = 0; k < size * count; ++k) send[k] = rank + k;
  std::vector<float> recv(count, -1.0f), async_recv(count, -1.0f);
  comm->reduce_scatter(send.data(), recv.data(), count);
  comm->reduce_scatter_async(send.data(), async_recv.data(), count).wait();
  for (int64_t j = 0; j < count; ++j) {
    // Σ_r (r + rank·count + j)
    float expected = size * (size - 1) / 2 + size * (rank * count + j);
    EXPECT_EQ(recv[j], expected) << "element " << j;
    EXPECT_EQ(async_recv[j], expected) << "element " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, MpiCommReduceScatter,
                         ::testing::Values(int64_t{5}, (int64_t{1} << 19) + 3));

// Rank r contributes r + 1 elements (r·10 + j), placed with a one-element gap after each block.
TEST(MpiComm, AllGatherVUnevenBlocksAtTheirOffsets) {
  auto comm = world_copy();
  const int size = comm->size(), me = comm->rank();
  std::vector<int64_t> counts(size), offsets(size);
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = r + 1;
    offsets[r] = total;
    total += counts[r] + 1;
  }
  std::vector<float> send(counts[me]);
  for (int64_t j = 0; j < counts[me]; ++j) send[j] = me * 10 + j;
  auto expect_blocks = [&](const std::vector<float>& recv) {
    for (int r = 0; r < size; ++r) {
      for (int64_t j = 0; j < counts[r]; ++j)
        EXPECT_EQ(recv[offsets[r] + j], r * 10 + j) << "block " << r << " element " << j;
      EXPECT_EQ(recv[offsets[r] + counts[r]], -1.0f) << "gap after block " << r;
    }
  };
  std::vector<float> recv(total, -1.0f);
  comm->all_gather_v(send.data(), recv.data(), counts.data(), offsets.data());
  expect_blocks(recv);
  // In place: this rank's block already at its offset.
  std::vector<float> in_place(total, -1.0f);
  std::copy(send.begin(), send.end(), in_place.begin() + offsets[me]);
  comm->all_gather_v(in_place.data() + offsets[me], in_place.data(), counts.data(), offsets.data());
  expect_blocks(in_place);
}

// Rank r's block has 2 + r elements (rank 0's first); every rank sends rank + k at element k.
TEST(MpiComm, ReduceScatterVGivesEachRankItsUnevenBlock) {
  auto comm = world_copy();
  const int size = comm->size(), me = comm->rank();
  std::vector<int64_t> counts(size);
  int64_t total = 0, first = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = 2 + r;
    if (r < me) first += counts[r];
    total += counts[r];
  }
  std::vector<float> send(total), recv(counts[me], -1.0f);
  for (int64_t k = 0; k < total; ++k) send[k] = static_cast<float>(me + k);
  comm->reduce_scatter_v(send.data(), recv.data(), counts.data());
  for (int64_t j = 0; j < counts[me]; ++j)
    EXPECT_EQ(recv[j], size * (size - 1) / 2 + size * (first + j)) << "element " << j;
}

// Blocks of more than one piece (reduce_scatter_v goes in pieces of 2^20 / size elements), of
// different lengths, the last rank's empty (a fully sharded bucket's slices when the last rank's
// falls past the end); every rank sends rank + k % 1000 at element k.
TEST(MpiComm, ReduceScatterVInPiecesGivesEachRankItsBlock) {
  auto comm = world_copy();
  const int size = comm->size(), me = comm->rank();
  const int64_t piece = (int64_t{1} << 20) / size;
  std::vector<int64_t> counts(size);
  int64_t total = 0, first = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = size > 1 && r == size - 1 ? 0 : 2 * piece + 7 * r + 1;
    if (r < me) first += counts[r];
    total += counts[r];
  }
  std::vector<float> send(total), recv(std::max<int64_t>(counts[me], 1), -1.0f);
  for (int64_t k = 0; k < total; ++k) send[k] = static_cast<float>(me + k % 1000);
  comm->reduce_scatter_v(send.data(), recv.data(), counts.data());
  for (int64_t j = 0; j < counts[me]; ++j)
    ASSERT_EQ(recv[j], size * (size - 1) / 2 + size * ((first + j) % 1000)) << "element " << j;
}

// The non-blocking all_gather_v (fully sharded data parallelism's prefetch) gathers in place as the
// blocking one, its counts freed before the wait.
TEST(MpiComm, AllGatherVAsyncGathersInPlace) {
  auto comm = world_copy();
  const int size = comm->size(), me = comm->rank();
  int64_t total = 0;
  std::vector<int64_t> offsets(size);
  for (int r = 0; r < size; ++r) offsets[r] = total, total += 3 + r;
  std::vector<float> gathered(total, -1.0f);
  for (int64_t k = 0; k < 3 + me; ++k) gathered[offsets[me] + k] = static_cast<float>(100 * me + k);
  Request request;
  {
    std::vector<int64_t> counts(size);
    for (int r = 0; r < size; ++r) counts[r] = 3 + r;
    request = comm->all_gather_v_async(gathered.data() + offsets[me], gathered.data(), counts.data(), offsets.data());
  }
  request.wait();
  for (int r = 0; r < size; ++r)
    for (int64_t k = 0; k < 3 + r; ++k) EXPECT_EQ(gathered[offsets[r] + k], 100 * r + k) << r << " " << k;
}

// Rank s sends (s + 2d) % 3 elements to rank d (some zero), valued s·1000 + d·100 + k. Blocks
// sit in reverse rank order in the send buffer and with a gap of one element in the receive
// buffer, so offsets are honoured rather than assumed contiguous.
int64_t a2a_count(int s, int d) { return (s + 2 * d) % 3; }

TEST(MpiComm, AllToAllVUnevenAndZeroCounts) {
  auto comm = world_copy();
  const int size = comm->size(), me = comm->rank();
  std::vector<int64_t> send_counts(size), send_offsets(size), recv_counts(size), recv_offsets(size);
  int64_t send_total = 0, recv_total = 0;
  for (int d = size - 1; d >= 0; --d) {
    send_counts[d] = a2a_count(me, d);
    send_offsets[d] = send_total;
    send_total += send_counts[d];
  }
  for (int s = 0; s < size; ++s) {
    recv_counts[s] = a2a_count(s, me);
    recv_offsets[s] = recv_total;
    recv_total += recv_counts[s] + 1;
  }
  std::vector<float> send(send_total), recv(recv_total, -1.0f);
  for (int d = 0; d < size; ++d)
    for (int64_t k = 0; k < send_counts[d]; ++k) send[send_offsets[d] + k] = me * 1000 + d * 100 + k;
  comm->all_to_all_v(send.data(), send_counts.data(), send_offsets.data(), recv.data(),
                     recv_counts.data(), recv_offsets.data());
  for (int s = 0; s < size; ++s) {
    for (int64_t k = 0; k < recv_counts[s]; ++k)
      EXPECT_EQ(recv[recv_offsets[s] + k], s * 1000 + me * 100 + k) << "from " << s;
    EXPECT_EQ(recv[recv_offsets[s] + recv_counts[s]], -1.0f) << "gap after rank " << s;
  }
}

TEST(MpiComm, BroadcastFromLastRank) {
  auto comm = world_copy();
  const int root = comm->size() - 1;
  std::vector<float> data(100, -1.0f);
  if (comm->rank() == root)
    for (int i = 0; i < 100; ++i) data[i] = i * 0.5f;
  comm->broadcast(data.data(), 100, root);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(data[i], i * 0.5f);
}

// Rank 0 arrives 100 ms late; nobody may leave the barrier before it arrives. The ranks share
// one host, so steady_clock (CLOCK_MONOTONIC) readings compare across processes.
double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TEST(MpiComm, BarrierWaitsForTheLastRank) {
  auto comm = world_copy();
  comm->barrier();
  double arrived = -1.0;  // rank 0's arrival; -1 elsewhere, so the max is rank 0's
  if (comm->rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    arrived = monotonic_seconds();
  }
  comm->barrier();
  double left = monotonic_seconds();
  comm->all_reduce(&arrived, 1, ReduceOp::Max);
  EXPECT_GE(left, arrived);
}

// Every rank sends 1 MiB messages to both neighbours of the ring at once and receives from both.
// Blocking sends of this size facing each other would deadlock; non-blocking ones must not.
float ring_value(int from, int direction, int64_t k) {
  return static_cast<float>(from * 8192 + direction * 4096 + k % 4096);
}

TEST(MpiComm, RingExchangeBothDirections) {
  auto comm = world_copy();
  const int size = comm->size(), me = comm->rank();
  const int right = (me + 1) % size, left = (me + size - 1) % size;
  const int64_t n = (1 << 20) / sizeof(float) * 2;  // 2 MiB
  const int to_right = 0, to_left = 1;               // tags: the direction of travel
  std::vector<float> send_right(n), send_left(n), from_left(n, -1.0f), from_right(n, -1.0f);
  for (int64_t k = 0; k < n; ++k) {
    send_right[k] = ring_value(me, to_right, k);
    send_left[k] = ring_value(me, to_left, k);
  }
  std::vector<Request> requests;
  requests.push_back(comm->isend(send_right.data(), n, right, to_right));
  requests.push_back(comm->isend(send_left.data(), n, left, to_left));
  requests.push_back(comm->irecv(from_left.data(), n, left, to_right));
  requests.push_back(comm->irecv(from_right.data(), n, right, to_left));
  wait_all(requests);
  EXPECT_TRUE(requests.empty());
  int64_t wrong = 0;
  for (int64_t k = 0; k < n; ++k) {
    wrong += from_left[k] != ring_value(left, to_right, k);
    wrong += from_right[k] != ring_value(right, to_left, k);
  }
  EXPECT_EQ(wrong, 0);
}

// Checked before any MPI call, identically on every rank, so no rank is left in a collective.
// The counters say what each kind of call moved: calls, bytes of the message (an all-to-all's
// sent to other ranks only), and time blocked — which includes waiting for a late rank.
TEST(MpiComm, StatsCountCallsBytesAndBlockedTime) {
  auto comm = world_copy();
  const int size = comm->size(), me = comm->rank();
  std::vector<float> data(1000, 1.0f);
  comm->all_reduce(data.data(), 1000);
  Request pending = comm->all_reduce_async(data.data(), 250);
  pending.wait();
  std::vector<float> gathered(size * 10);
  comm->all_gather(data.data(), gathered.data(), 10);
  std::vector<int64_t> counts(size, 3), offsets(size);
  for (int r = 0; r < size; ++r) offsets[r] = 3 * r;
  std::vector<float> recv(3 * size);
  comm->all_to_all_v(data.data(), counts.data(), offsets.data(), recv.data(), counts.data(),
                     offsets.data());
  const CommStats& stats = comm->stats();
  const CommCounter& reduce = stats[static_cast<int>(CommOp::AllReduce)];
  EXPECT_EQ(reduce.calls, 2);
  EXPECT_EQ(reduce.bytes, 1250.0 * sizeof(float));
  EXPECT_EQ(stats[static_cast<int>(CommOp::AllGather)].bytes, size * 10.0 * sizeof(float));
  EXPECT_EQ(stats[static_cast<int>(CommOp::AllToAll)].bytes, (size - 1) * 3.0 * sizeof(float));
  EXPECT_EQ(stats[static_cast<int>(CommOp::Send)].calls, 0);
  // Rank 0 arrives 50 ms late: every other rank's barrier-free all-reduce blocks that long.
  comm->reset_stats();
  EXPECT_EQ(comm->stats()[static_cast<int>(CommOp::AllReduce)].calls, 0);
  if (me == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comm->all_reduce(data.data(), 1);
  const double blocked = comm->stats()[static_cast<int>(CommOp::AllReduce)].seconds;
  if (me != 0) {
    EXPECT_GT(blocked, 0.04);
  }
}

// While recording, each counted call is listed: its kind, bytes, peer as a world rank (the group
// here numbers the world's ranks backwards), start before end, and the time it blocked; a reset
// empties the list, and a wait for a call counted before it leaves the new list alone.
TEST(MpiComm, RecordedCallsNameTheirWorldPeers) {
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm reversed;
  MPI_Comm_split(MPI_COMM_WORLD, 0, world_size - 1 - world_rank, &reversed);
  MpiComm comm(reversed, "reversed");
  ASSERT_EQ(comm.rank(), world_size - 1 - world_rank);
  float value = 1, received = 0;
  comm.all_reduce(&value, 1);
  EXPECT_TRUE(comm.calls().empty());  // not recording yet
  comm.record_calls(true);
  const int next = (comm.rank() + 1) % comm.size(), previous = (comm.rank() + comm.size() - 1) % comm.size();
  Request recv = comm.irecv(&received, 1, previous, 7);
  Request send = comm.isend(&value, 1, next, 7);
  recv.wait();
  send.wait();
  comm.all_reduce(&value, 1);
  ASSERT_EQ(comm.calls().size(), 3u);
  const CommCall &r = comm.calls()[0], &s = comm.calls()[1], &a = comm.calls()[2];
  EXPECT_EQ(r.op, CommOp::Recv);
  EXPECT_EQ(r.peer, world_size - 1 - previous);
  EXPECT_EQ(s.op, CommOp::Send);
  EXPECT_EQ(s.peer, world_size - 1 - next);
  EXPECT_EQ(a.op, CommOp::AllReduce);
  EXPECT_EQ(a.peer, -1);
  EXPECT_EQ(a.bytes, sizeof(float));
  for (const CommCall& call : comm.calls()) {
    EXPECT_LE(call.start, call.end);
    EXPECT_GE(call.blocked, 0);
  }
  Request late = comm.all_reduce_async(&value, 1);
  comm.reset_stats();
  late.wait();
  EXPECT_TRUE(comm.calls().empty());
  EXPECT_EQ(comm.stats()[static_cast<int>(CommOp::AllReduce)].calls, 0);
}

TEST(MpiComm, BadArgumentsThrow) {
  auto comm = world_copy();
  float x = 0;
  EXPECT_THROW(comm->all_reduce(&x, int64_t{INT_MAX} + 1), Error);
  EXPECT_THROW(comm->all_reduce(&x, -1), Error);
  EXPECT_THROW(comm->broadcast(&x, 1, comm->size()), Error);
  EXPECT_THROW(comm->isend(&x, 1, comm->size(), 0), Error);
  EXPECT_THROW(comm->irecv(&x, 1, -1, 0), Error);
  EXPECT_THROW(comm->isend(&x, 1, 0, -1), Error);
  std::vector<float> buffer(4 * comm->size());
  // recv overlapping send other than in place
  EXPECT_THROW(comm->all_gather(buffer.data() + 1, buffer.data(), 2), Error);
  EXPECT_THROW(comm->reduce_scatter(buffer.data(), buffer.data(), 2), Error);
}

}  // namespace
}  // namespace tessel
