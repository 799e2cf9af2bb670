// `tessel plan --calibrate`: measures this machine and writes the CPU cluster file the planner
// reads as `--cluster cpu`. GEMM through the project's gemm kernel (kernels/cpu/gemm.h) on one
// thread; memory bandwidth with a copy; MPI point-to-point latency and all-reduce bandwidth by
// running this binary under mpirun (`plan --calibrate-comm` on 2 ranks); then one short
// `tessel train` under mpirun (one rank): its step time fits the memory efficiency (everything
// that is not a GEMM), its peak RSS (GNU time) against the planner's sum gives the runtime
// memory of a rank, and the same run with --profile-report gives the achieved GEMM rate.
#pragma once

#include <string>

#include "tessel/comm/mpi.h"
#include "tessel/plan/cluster.h"

namespace tessel {

// Measures, writes `out_path` (JSON) and returns the cluster; prints what it measured.
Cluster calibrate_cpu(const std::string& out_path);

// Run on 2 ranks under mpirun: rank 0 prints "tessel-comm latency=<s> bandwidth=<B/s>".
void measure_comm(MpiRuntime& runtime);

// This binary's path (for running itself under mpirun).
std::string self_executable();

}  // namespace tessel
