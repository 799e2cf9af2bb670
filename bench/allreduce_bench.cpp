// Reduction bandwidth: tessel's MpiComm::all_reduce against a plain MPI_Allreduce of the same
// size (float sum in place), with --op all_reduce_async MpiComm::all_reduce_async (one
// MPI_Iallreduce, waited at once) against the same plain call, or with --op reduce_scatter
// MpiComm::reduce_scatter against a plain MPI_Reduce_scatter_block (bytes = every rank's whole
// send buffer), from --min-bytes to --max-bytes (doubling). Run under mpirun:
//
//   mpirun --allow-run-as-root -n 2 -x OMP_NUM_THREADS=1 build/bench/allreduce_bench [--op ...]
//
// Each size: one checked call (every rank contributes rank + 1), one untimed warm-up of each,
// then rounds of one tessel call and one plain call, alternating so that noise hits both alike,
// until each kind has --min-reps calls and --min-seconds in total. A call's time is the slowest
// rank's, between a barrier and the call's return; the table shows medians and the algorithm
// bandwidth bytes / time (tessel over plain as "ratio"), and rank 0's minor page faults per call.

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <sys/resource.h>

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

// Minor page faults of this process so far: a message-sized temporary that the allocator hands
// back to the kernel after each call shows up as bytes / 4 KiB faults per call.
int64_t minor_page_faults() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
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
  CLI::App app{"Reduction bandwidth: tessel's MpiComm against plain MPI"};
  int64_t min_bytes = 1024, max_bytes = 64 << 20;
  std::string op = "all_reduce";
  app.add_option("--op", op, "all_reduce, all_reduce_async or reduce_scatter")
      ->check(CLI::IsMember({"all_reduce", "all_reduce_async", "reduce_scatter"}));
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
  const bool all_reduce = op != "reduce_scatter", async = op == "all_reduce_async";
  std::vector<float> data(max_bytes / sizeof(float), 0.0f), result(max_bytes / sizeof(float));
  if (rank == 0) {
    fmt::print("# {}, float sum, {} ranks; LD_PRELOAD={} MALLOC_MMAP_THRESHOLD_={} "
               "MALLOC_TRIM_THRESHOLD_={}; load {}\n",
               op, size, environment_value("LD_PRELOAD"), environment_value("MALLOC_MMAP_THRESHOLD_"),
               environment_value("MALLOC_TRIM_THRESHOLD_"), load_average());
    fmt::print("{:>10} {:>6} {:>11} {:>11} {:>11} {:>11} {:>7} {:>12}\n", "bytes", "reps",
               "tessel_us", "tessel_GB/s", "mpi_us", "mpi_GB/s", "ratio", "faults/call");
  }
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const int64_t count = bytes / sizeof(float), block = count / size;
    if (!all_reduce && block == 0) continue;
    float* buffer = data.data();
    float* out = all_reduce ? buffer : result.data();
    const int64_t out_count = all_reduce ? count : block;

    auto tessel_call = [&] {
      if (async) comm.all_reduce_async(buffer, count).wait();
      else if (all_reduce) comm.all_reduce(buffer, count);
      else comm.reduce_scatter(buffer, out, block);
    };
    auto plain_call = [&] {
      if (all_reduce)
        MPI_Allreduce(MPI_IN_PLACE, buffer, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      else
        MPI_Reduce_scatter_block(buffer, out, static_cast<int>(block), MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD);
    };
    std::fill_n(buffer, count, static_cast<float>(rank + 1));
    tessel_call();
    const float expected = size * (size + 1) / 2.0f;
    int64_t wrong = std::count_if(out, out + out_count, [&](float x) { return x != expected; });
    if (wrong) tessel::abort_job(fmt::format("allreduce_bench: {} wrong sums at {} bytes", wrong, bytes));
    // Zeros from here on: repeated sums stay 0, never overflow.
    std::fill_n(buffer, count, 0.0f);

    timed(tessel_call);  // warm-up: first touches, MPI's first-call set-up
    timed(plain_call);
    // timed() returns the same value on every rank, so every rank stops after the same round.
    std::vector<double> tessel_times, plain_times;
    double tessel_total = 0, plain_total = 0;
    const int64_t faults_before = minor_page_faults();
    while (static_cast<int>(tessel_times.size()) < min_reps ||
           std::min(tessel_total, plain_total) < min_seconds) {
      tessel_times.push_back(timed(tessel_call));
      plain_times.push_back(timed(plain_call));
      tessel_total += tessel_times.back();
      plain_total += plain_times.back();
    }
    const size_t reps = tessel_times.size();
    const double faults_per_call = double(minor_page_faults() - faults_before) / (2 * reps);
    double tessel_s = median(tessel_times), plain_s = median(plain_times);
    if (rank == 0)
      fmt::print("{:>10} {:>6} {:>11.1f} {:>11.3f} {:>11.1f} {:>11.3f} {:>7.3f} {:>12.1f}\n", bytes,
                 reps, tessel_s * 1e6, bytes / tessel_s / 1e9, plain_s * 1e6, bytes / plain_s / 1e9,
                 plain_s / tessel_s, faults_per_call);
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
