// The communicators of device-memory groups (comm/device_comm.h) on every collective and on
// point-to-point, each rank checking the whole result: StagedComm with host memory (plain copies:
// runs everywhere) and, where a CUDA device is visible, the backend make_comm chooses for CUDA
// memory — StagedComm when ranks share the GPU (mpirun -n 2, -n 4 on one GPU), NcclComm when
// each rank has its own (mpirun -n 1 on one GPU: bench/gpu.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tessel/comm/device_comm.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/tensor.h"

#ifdef TESSEL_CUDA
#include "tessel/core/cuda.h"
#endif

namespace tessel {
namespace {

struct CommSetup {
  std::string name;
  const DeviceMemory* memory;
  CommBackend backend;
};

std::vector<CommSetup> setups() {
  std::vector<CommSetup> list{{"staged, host memory", &host_memory(), CommBackend::Staged}};
#ifdef TESSEL_CUDA
  if (cuda_device_count() > 0) {
    MPI_Comm probe;
    MPI_Comm_dup(MPI_COMM_WORLD, &probe);
    const CommBackend chosen = choose_comm_backend(probe, cuda_memory());
    MPI_Comm_free(&probe);
    list.push_back(
        {std::string(comm_backend_name(chosen)) + ", cuda memory", &cuda_memory(), chosen});
  }
#endif
  return list;
}

std::unique_ptr<Comm> open(const CommSetup& s) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return make_comm(comm, s.backend, *s.memory, "test");
}

// A buffer in the setup's memory, filled from and read back to the host.
struct Buffer {
  Buffer(const DeviceMemory& m, const std::vector<float>& values)
      : t(Tensor::zeros({static_cast<int64_t>(values.size())}, DType::F32, m)) {
    m.from_host(t.data(), values.data(), t.bytes());
  }
  std::vector<float> host() const {
    std::vector<float> v(t.numel());
    t.memory().to_host(v.data(), t.data(), t.bytes());
    return v;
  }
  float* data() { return t.data(); }
  Tensor t;
};

float value(int rank, int64_t i) { return static_cast<float>((rank * 5 + i * 3) % 13 - 6); }

std::vector<float> values(int rank, int64_t n, int64_t first = 0) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(rank, first + i);
  return v;
}

TEST(DeviceComm, HostMemoryGetsMpi) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  EXPECT_EQ(choose_comm_backend(comm, host_memory()), CommBackend::Mpi);
  std::unique_ptr<Comm> made = make_comm(comm, CommBackend::Mpi, host_memory(), "test");
  EXPECT_NE(dynamic_cast<MpiComm*>(made.get()), nullptr);
}

TEST(DeviceComm, Collectives) {
  for (const CommSetup& s : setups()) {
    SCOPED_TRACE(s.name);
    auto comm = open(s);
    const int R = comm->size(), me = comm->rank();
    const int64_t n = 1000;
    std::vector<float> sum(n, 0), max(n, -1e30f);
    for (int r = 0; r < R; ++r)
      for (int64_t i = 0; i < n; ++i) sum[i] += value(r, i), max[i] = std::max(max[i], value(r, i));
    Buffer a(*s.memory, values(me, n)), b(*s.memory, values(me, n)), c(*s.memory, values(me, n));
    comm->all_reduce(a.data(), n, ReduceOp::Sum);
    comm->all_reduce(b.data(), n, ReduceOp::Max);
    Request pending = comm->all_reduce_async(c.data(), n);
    pending.wait();
    EXPECT_EQ(a.host(), sum);
    EXPECT_EQ(b.host(), max);
    EXPECT_EQ(c.host(), sum);
    double loss = me + 0.5;  // a host scalar through the same group
    comm->all_reduce(&loss, 1);
    EXPECT_EQ(loss, R * (R - 1) / 2.0 + 0.5 * R);

    std::vector<float> gathered;
    for (int r = 0; r < R; ++r) {
      std::vector<float> v = values(r, n);
      gathered.insert(gathered.end(), v.begin(), v.end());
    }
    Buffer own(*s.memory, values(me, n)), all(*s.memory, std::vector<float>(R * n, 99.0f));
    comm->all_gather(own.data(), all.data(), n);
    EXPECT_EQ(all.host(), gathered);
    std::vector<float> in_place_start(R * n, 99.0f);
    std::copy_n(values(me, n).begin(), n, in_place_start.begin() + me * n);
    Buffer in_place(*s.memory, in_place_start);
    comm->all_gather_async(in_place.data() + me * n, in_place.data(), n).wait();
    EXPECT_EQ(in_place.host(), gathered);

    Buffer blocks(*s.memory, values(me, R * n)), mine(*s.memory, std::vector<float>(n, 99.0f));
    std::vector<float> block_sum(n, 0);
    for (int r = 0; r < R; ++r)
      for (int64_t i = 0; i < n; ++i) block_sum[i] += value(r, me * n + i);
    comm->reduce_scatter(blocks.data(), mine.data(), n);
    EXPECT_EQ(mine.host(), block_sum);
    Buffer mine_async(*s.memory, std::vector<float>(n, 99.0f));
    comm->reduce_scatter_async(blocks.data(), mine_async.data(), n).wait();
    EXPECT_EQ(mine_async.host(), block_sum);

    Buffer root(*s.memory, values(me, n));
    comm->broadcast(root.data(), n, R - 1);
    EXPECT_EQ(root.host(), values(R - 1, n));
  }
}

// Rank r holds r + 1 elements; the gathered blocks sit 2 apart, the gaps untouched.
TEST(DeviceComm, VariableCollectives) {
  for (const CommSetup& s : setups()) {
    SCOPED_TRACE(s.name);
    auto comm = open(s);
    const int R = comm->size(), me = comm->rank();
    std::vector<int64_t> counts(R), offsets(R);
    int64_t end = 0;
    for (int r = 0; r < R; ++r) counts[r] = r + 1, offsets[r] = end, end += r + 1 + 2;
    std::vector<float> expected(end, -5.0f);
    for (int r = 0; r < R; ++r)
      for (int64_t i = 0; i < counts[r]; ++i) expected[offsets[r] + i] = value(r, i);
    Buffer own(*s.memory, values(me, counts[me])), all(*s.memory, std::vector<float>(end, -5.0f));
    comm->all_gather_v(own.data(), all.data(), counts.data(), offsets.data());
    EXPECT_EQ(all.host(), expected);

    int64_t total = 0;
    for (int64_t c : counts) total += c;
    std::vector<int64_t> dense(R);
    for (int r = 1; r < R; ++r) dense[r] = dense[r - 1] + counts[r - 1];
    Buffer send(*s.memory, values(me, total)), recv(*s.memory, std::vector<float>(counts[me], 0));
    std::vector<float> reduced(counts[me], 0);
    for (int r = 0; r < R; ++r)
      for (int64_t i = 0; i < counts[me]; ++i) reduced[i] += value(r, dense[me] + i);
    comm->reduce_scatter_v(send.data(), recv.data(), counts.data());
    EXPECT_EQ(recv.host(), reduced);

    // all-to-all: rank r sends (r + q) % 3 + 1 elements to rank q.
    auto size_of = [](int from, int to) { return int64_t{(from + to) % 3 + 1}; };
    std::vector<int64_t> send_counts(R), send_offsets(R), recv_counts(R), recv_offsets(R);
    int64_t send_total = 0, recv_total = 0;
    for (int q = 0; q < R; ++q) {
      send_counts[q] = size_of(me, q), send_offsets[q] = send_total, send_total += send_counts[q];
      recv_counts[q] = size_of(q, me), recv_offsets[q] = recv_total, recv_total += recv_counts[q];
    }
    std::vector<float> expected_in;
    for (int q = 0; q < R; ++q) {
      int64_t first = 0;  // where q's block for me starts in q's send buffer
      for (int t = 0; t < me; ++t) first += size_of(q, t);
      std::vector<float> v = values(q, recv_counts[q], first);
      expected_in.insert(expected_in.end(), v.begin(), v.end());
    }
    Buffer out(*s.memory, values(me, send_total)), in(*s.memory, std::vector<float>(recv_total, 0));
    comm->all_to_all_v(out.data(), send_counts.data(), send_offsets.data(), in.data(),
                       recv_counts.data(), recv_offsets.data());
    EXPECT_EQ(in.host(), expected_in);
  }
}

// The ring of context parallelism: send to the next rank and receive from the previous, both
// posted before either is waited for.
// Each backend lists its calls while recording (comm.h), as the run's pictures read them.
TEST(DeviceComm, RingOfSendsAndReceives) {
  for (const CommSetup& s : setups()) {
    SCOPED_TRACE(s.name);
    auto comm = open(s);
    const int R = comm->size(), me = comm->rank();
    if (R == 1) continue;  // no message to itself
    comm->record_calls(true);
    const int64_t n = 300000;
    Buffer held(*s.memory, values(me, n)), arriving(*s.memory, std::vector<float>(n, 0));
    Request send = comm->isend(held.data(), n, (me + 1) % R, 7);
    Request recv = comm->irecv(arriving.data(), n, (me + R - 1) % R, 7);
    send.wait();
    recv.wait();
    EXPECT_EQ(arriving.host(), values((me + R - 1) % R, n));
    EXPECT_EQ(comm->stats()[static_cast<int>(CommOp::Send)].calls, 1);
    // Listed as MpiComm lists them: each with its peer (the world's order here) and its wait.
    ASSERT_EQ(comm->calls().size(), 2u);
    EXPECT_EQ(comm->calls()[0].op, CommOp::Send);
    EXPECT_EQ(comm->calls()[0].peer, (me + 1) % R);
    EXPECT_EQ(comm->calls()[1].op, CommOp::Recv);
    EXPECT_EQ(comm->calls()[1].peer, (me + R - 1) % R);
    EXPECT_LE(comm->calls()[1].start, comm->calls()[1].end);
    comm->barrier();
  }
}

}  // namespace
}  // namespace tessel
