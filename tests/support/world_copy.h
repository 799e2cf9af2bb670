// The job's world for the multi-rank tests: its size, this process's rank, and a communicator of
// its own over every rank, for tests that exercise MpiComm.
#pragma once

#include <memory>

#include "tessel/comm/mpi.h"

namespace tessel {

inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline std::unique_ptr<MpiComm> world_copy() {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return std::make_unique<MpiComm>(comm);
}

}  // namespace tessel
