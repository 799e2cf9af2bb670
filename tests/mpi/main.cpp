// main() of tessel_mpi_tests, run by ctest under mpirun (-n 2 and -n 4). Every rank runs every
// test; rank 0 prints GoogleTest's usual report, the other ranks print only their failures
// ("[rank R] ..."), and the exit code is the maximum over ranks, so a failure on any rank fails
// the run. Tests must not stop early on one rank before a collective (prefer EXPECT to ASSERT),
// or the ranks would fall out of step; ctest's timeout catches it if one does.
//
// --dead-rank=abort|exit: no tests; rank 1 fails while rank 0 waits for it in an all-reduce
// (abort: through abort_job; exit: std::exit(3) without MPI_Finalize). The job must end with a
// non-zero code instead of hanging (tests/mpi/expect_job_fails.sh checks it).

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tessel/comm/mpi.h"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    fmt::print(stderr, "[rank {}] {}:{}: Failure\n{}\n", rank_,
               result.file_name() ? result.file_name() : "?", result.line_number(),
               result.message());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      fmt::print(stderr, "[rank {}] [  FAILED  ] {}.{}\n", rank_, info.test_suite_name(),
                 info.name());
  }

 private:
  int rank_;
};

int run_dead_rank(const char* mode, int rank) {
  if (rank == 1) {
    // Let rank 0 enter the all-reduce first.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (std::strcmp(mode, "abort") == 0) tessel::abort_job("dead-rank test: rank 1 fails", 3);
    std::exit(3);
  }
  float value = 1.0f;
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return 0;  // never reached while rank 1 fails: the script reports a job that exits 0
}

}  // namespace

int main(int argc, char** argv) {
  tessel::MpiRuntime runtime(&argc, &argv);
  if (!runtime.active()) {
    fmt::print(stderr, "tessel_mpi_tests: run it under mpirun (e.g. mpirun -n 2 {})\n", argv[0]);
    return 1;
  }
  const int rank = runtime.world_rank();
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--dead-rank=", 12) == 0) return run_dead_rank(argv[i] + 12, rank);
  }

  testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int failed_anywhere = 0;
  MPI_Allreduce(&failed, &failed_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && failed_anywhere && !failed)
    fmt::print(stderr, "tessel_mpi_tests: tests failed on other ranks (lines \"[rank R]\" above)\n");
  return failed_anywhere;
}
