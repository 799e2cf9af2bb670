#include "tessel/plan/calibrate.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/writable.h"
#include "tessel/kernels/kernels.h"
#include "tessel/parallel/groups.h"
#include "tessel/plan/estimate.h"

namespace tessel {

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double best_seconds(int repeats, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

// One thread's sgemm rate on a square 1024 problem (the best of five).
double gemm_flops_per_s() {
  const int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  cpu_kernels().gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm up
  const double s = best_seconds(5, [&] { cpu_kernels().gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
  return 2.0 * n * n * n / s;
}

// One thread's copy rate of 256 MiB buffers, counting the read and the write.
double copy_bytes_per_s() {
  const size_t n = size_t{64} << 20;
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  const double s = best_seconds(5, [&] { std::memcpy(dst.data(), src.data(), n * sizeof(float)); });
  return 2.0 * n * sizeof(float) / s;
}

std::string run_capture(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  TESSEL_CHECK(pipe != nullptr, "--calibrate: cannot run {}", command);
  std::string out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  const int status = pclose(pipe);
  TESSEL_CHECK(status == 0, "--calibrate: `{}` failed (status {}):\n{}", command, status, out);
  return out;
}

double number_after(const std::string& text, const std::string& key, const std::string& what) {
  const size_t at = text.find(key);
  TESSEL_CHECK(at != std::string::npos, "--calibrate: no '{}' in the output of {}:\n{}", key, what, text);
  return std::stod(text.substr(at + key.size()));
}

std::string mpirun(int ranks) {
  return fmt::format("mpirun --allow-run-as-root --oversubscribe -n {} -x OMP_NUM_THREADS=1 ", ranks);
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

double memory_total_gib() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("MemTotal:", 0) == 0) return std::stod(line.substr(9)) / (1024.0 * 1024.0);
  return 16;
}

// The calibration run: tessel's default GPT-2-style model (4 layers, hidden 256, seq 128), one
// rank under mpirun, micro batch 8, two microbatches, as the planner sees it.
struct TrainMeasure {
  double step_s = 0, rss_bytes = 0, gemm_flops = 0;
};

TrainMeasure measure_train(const std::string& self, PlanModel& model, PlanRun& run) {
  model = PlanModel{};
  model.name = "calibration run";
  run = PlanRun{};
  run.parallel.world = 1;
  run.micro_batch = 8, run.global_batch = 16;
  run.precision = PlannedPrecision::FP32;
  run.attention = AttentionBackend::Tessel;
  // The step time and the GEMM rate come from the same iterations of a profiled run, so that a
  // change of speed between two runs (a shared machine) cannot set the one against the other;
  // GNU time reports the peak RSS of a second run without --profile-report (its report allocates one
  // more set of activations at the end).
  const std::string args = " train --train-iters 12 --eval-iters 0 --log-interval 1 --micro-batch-size 8 --global-batch-size 16";
  const std::string profiled = run_capture(mpirun(1) + self + args + " --profile-report");
  std::vector<double> ms;
  for (size_t at = profiled.find("iter "); at != std::string::npos; at = profiled.find("iter ", at + 1)) {
    const size_t line_end = profiled.find('\n', at);
    const std::string line = profiled.substr(at, line_end - at);
    const size_t bar = line.rfind("| ");
    if (bar != std::string::npos && line.find(" ms") != std::string::npos) ms.push_back(std::stod(line.substr(bar + 2)));
  }
  TESSEL_CHECK(ms.size() >= 4, "--calibrate: the training run printed {} iterations:\n{}", ms.size(), profiled);
  std::vector<double> steady(ms.begin() + 2, ms.end());  // the first iterations size buffers and warm caches
  std::sort(steady.begin(), steady.end());
  TrainMeasure m;
  m.step_s = steady[steady.size() / 2] / 1e3;
  m.gemm_flops = number_after(profiled, "profile: gemm ", "the profiled training run") * 1e9;
  const std::string out = run_capture(mpirun(1) + "/usr/bin/time -f 'tessel-maxrss-kib %M' " + self + args);
  m.rss_bytes = number_after(out, "tessel-maxrss-kib ", "the training run") * 1024;
  return m;
}

}  // namespace

std::string self_executable() {
  std::vector<char> path(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  TESSEL_CHECK(n > 0, "cannot find this program's path (/proc/self/exe)");
  return std::string(path.data(), static_cast<size_t>(n));
}

void measure_comm(MpiRuntime& runtime) {
  TESSEL_CHECK(runtime.active() && runtime.world_size() == 2, "--calibrate-comm runs on 2 ranks under mpirun");
  ParallelConfig pc;
  pc.world = 2;
  ProcessGroups groups = ProcessGroups::create(Layout(pc), runtime.world_rank());
  Comm& world = groups.world();
  const int me = world.rank(), other = 1 - me;
  float one = 0;
  auto ping_pong = [&](float* data, int64_t count, int repeats) {
    for (int i = 0; i < repeats; ++i) {
      if (me == 0) {
        world.isend(data, count, other, 1).wait();
        world.irecv(data, count, other, 2).wait();
      } else {
        world.irecv(data, count, other, 1).wait();
        world.isend(data, count, other, 2).wait();
      }
    }
  };
  ping_pong(&one, 1, 100);  // warm up
  world.barrier();
  const double latency = best_seconds(5, [&] { ping_pong(&one, 1, 200); }) / 400;
  // All-reduce of 4 MiB, the pieces tessel's gradient reduction uses: bus bandwidth 2(n−1)/n·S/t.
  std::vector<float> buffer(int64_t{1} << 20, 1.0f);
  world.all_reduce(buffer.data(), static_cast<int64_t>(buffer.size()));
  world.barrier();
  const double s = best_seconds(5, [&] {
    for (int i = 0; i < 10; ++i) world.all_reduce(buffer.data(), static_cast<int64_t>(buffer.size()));
  }) / 10;
  const double bandwidth = 2.0 * (2 - 1) / 2 * buffer.size() * sizeof(float) / s;
  if (me == 0) fmt::print("tessel-comm latency={:.6e} bandwidth={:.6e}\n", latency, bandwidth);
}

Cluster calibrate_cpu(const std::string& out_path) {
  // Written after a minute of measuring: a file that cannot be is found first.
  require_writable_file("--out", out_path);
  const std::string self = self_executable();
  // Not the file it replaces (cluster_preset("cpu") reads it): every rate is measured anew, and
  // a damaged file must not stop the command that rewrites it.
  Cluster c = uncalibrated_cpu();
  c.name = "cpu";
  c.device = "cpu";
  c.devices_per_node = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.memory_gib = memory_total_gib() / c.devices_per_node;
  c.peak_flops = gemm_flops_per_s();
  c.memory_bandwidth = copy_bytes_per_s();
  c.gemm_efficiency = c.memory_efficiency = c.network_efficiency = 1.0;
  fmt::print("calibrate: {} cores ({}), {:.1f} GiB per core; sgemm 1024³ on one thread {:.1f} GFLOP/s; copy {:.1f} GB/s\n",
             c.devices_per_node, cpu_model_name(), c.memory_gib, c.peak_flops / 1e9, c.memory_bandwidth / 1e9);
  const std::string comm = run_capture(mpirun(2) + self + " plan --calibrate-comm");
  c.intra_latency = c.inter_latency = number_after(comm, "latency=", "plan --calibrate-comm");
  c.intra_bandwidth = c.inter_bandwidth = number_after(comm, "bandwidth=", "plan --calibrate-comm");
  fmt::print("calibrate: MPI on 2 ranks: latency {:.2f} us, all-reduce bus bandwidth {:.2f} GB/s\n", c.intra_latency * 1e6,
             c.intra_bandwidth / 1e9);

  PlanModel model;
  PlanRun run;
  const TrainMeasure t = measure_train(self, model, run);
  c.gemm_efficiency = t.gemm_flops / c.peak_flops;
  // The memory efficiency that makes the planner's step time the measured one (the step time
  // falls as the efficiency rises): bisection.
  double lo = 0.01, hi = 10;
  for (int i = 0; i < 60; ++i) {
    c.memory_efficiency = std::sqrt(lo * hi);
    (estimate(model, run, c).time.step > t.step_s ? lo : hi) = c.memory_efficiency;
  }
  c.runtime_memory_gib = 0;
  const Estimate e = estimate(model, run, c);
  c.runtime_memory_gib = std::max(0.0, (t.rss_bytes - e.stages.front().total()) / (1024.0 * 1024 * 1024));
  c.source = fmt::format("tessel plan --calibrate on {} ({} cores)", cpu_model_name(), c.devices_per_node);
  fmt::print("calibrate: tessel train (default model, 1 rank): step {:.1f} ms, gemm {:.1f} GFLOP/s (efficiency {:.3f}); "
             "memory efficiency fitted {:.3f}; peak RSS {:.1f} MiB = planned {:.1f} MiB + runtime {:.1f} MiB\n",
             t.step_s * 1e3, t.gemm_flops / 1e9, c.gemm_efficiency, c.memory_efficiency, t.rss_bytes / 1048576.0,
             e.stages.front().total() / 1048576.0, c.runtime_memory_gib * 1024);
  nlohmann::json j = cluster_to_json(c);
  j["measured"] = {{"cpu_model", cpu_model_name()}, {"train_step_s", t.step_s}, {"train_peak_rss_mib", t.rss_bytes / 1048576.0},
                   {"train_gemm_gflops", t.gemm_flops / 1e9}};
  write_file_atomically(out_path, j.dump(2) + "\n", Durability::kReplaceable);
  fmt::print("calibrate: wrote {} (use it as --cluster cpu, or --cluster {})\n", out_path, out_path);
  return c;
}

}  // namespace tessel
