// All-reduce bandwidth: tessel's MpiComm::all_reduce against a plain MPI_Allreduce of the same
// size, float sum in place, from --min-bytes to --max-bytes (doubling). Run under mpirun:
//
//   mpirun --allow-run-as-root -n 2 -x OMP_NUM_THREADS=1 build/bench/allreduce_bench
//
// Each size: one checked call (every rank contributes rank + 1), one untimed warm-up of each,
// then rounds of one tessel call and one plain call, alternating so that noise hits both alike,
// until each kind has --min-reps calls and --min-seconds in total. A call's time is the slowest
// rank's, between a barrier and the call's return; the table shows medians and the algorithm
// bandwidth bytes / time.

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tessel/comm/mpi.h"

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Seconds of one call, the slowest rank's.
template <typename Call>
double timed(Call call) {
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  call();
  double local = MPI_Wtime() - start, slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

std::string environment_value(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "(unset)";
}

std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  file >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

int run(int argc, char** argv) {
  CLI::App app{"All-reduce bandwidth: tessel's MpiComm against plain MPI_Allreduce"};
  int64_t min_bytes = 1024, max_bytes = 64 << 20;
  int min_reps = 10;
  double min_seconds = 0.2;
  app.add_option("--min-bytes", min_bytes, "smallest message (bytes)");
  app.add_option("--max-bytes", max_bytes, "largest message (bytes)");
  app.add_option("--min-reps", min_reps, "timed calls of each kind per size, at least");
  app.add_option("--min-seconds", min_seconds, "time per size and kind, at least");
  CLI11_PARSE(app, argc, argv);

  MPI_Comm copy;
  MPI_Comm_dup(MPI_COMM_WORLD, &copy);
  tessel::MpiComm comm(copy);
  const int size = comm.size(), rank = comm.rank();
  std::vector<float> data(max_bytes / sizeof(float), 0.0f);
  if (rank == 0) {
    fmt::print("# all-reduce, float sum in place, {} ranks; LD_PRELOAD={} MALLOC_MMAP_THRESHOLD_={}; "
               "load {}\n",
               size, environment_value("LD_PRELOAD"), environment_value("MALLOC_MMAP_THRESHOLD_"),
               load_average());
    fmt::print("{:>10} {:>6} {:>11} {:>11} {:>11} {:>11} {:>7}\n", "bytes", "reps", "tessel_us",
               "tessel_GB/s", "mpi_us", "mpi_GB/s", "ratio");
  }
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const int64_t count = bytes / sizeof(float);
    float* buffer = data.data();

    std::fill_n(buffer, count, static_cast<float>(rank + 1));
    comm.all_reduce(buffer, count);
    const float expected = size * (size + 1) / 2.0f;
    int64_t wrong = std::count_if(buffer, buffer + count, [&](float x) { return x != expected; });
    if (wrong) tessel::abort_job(fmt::format("allreduce_bench: {} wrong sums at {} bytes", wrong, bytes));
    // Zeros from here on: repeated sums stay 0, never overflow.
    std::fill_n(buffer, count, 0.0f);

    auto tessel_call = [&] { comm.all_reduce(buffer, count); };
    auto plain_call = [&] {
      MPI_Allreduce(MPI_IN_PLACE, buffer, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    };
    timed(tessel_call);  // warm-up: first touches, MPI's first-call set-up
    timed(plain_call);
    // timed() returns the same value on every rank, so every rank stops after the same round.
    std::vector<double> tessel_times, plain_times;
    double tessel_total = 0, plain_total = 0;
    while (static_cast<int>(tessel_times.size()) < min_reps ||
           std::min(tessel_total, plain_total) < min_seconds) {
      tessel_times.push_back(timed(tessel_call));
      plain_times.push_back(timed(plain_call));
      tessel_total += tessel_times.back();
      plain_total += plain_times.back();
    }
    const size_t reps = tessel_times.size();
    double tessel_s = median(tessel_times), plain_s = median(plain_times);
    if (rank == 0)
      fmt::print("{:>10} {:>6} {:>11.1f} {:>11.3f} {:>11.1f} {:>11.3f} {:>7.3f}\n", bytes, reps,
                 tessel_s * 1e6, bytes / tessel_s / 1e9, plain_s * 1e6, bytes / plain_s / 1e9,
                 plain_s / tessel_s);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::MpiRuntime runtime(&argc, &argv);
  if (!runtime.active() || runtime.world_size() < 2) {
    fmt::print(stderr, "allreduce_bench: run it under mpirun with 2 or more ranks\n");
    return 1;
  }
  return run(argc, argv);
}
