// A communicator of its own over every rank of the job, for tests that exercise MpiComm.
#pragma once

#include <memory>

#include "tessel/comm/mpi.h"

namespace tessel {

inline std::unique_ptr<MpiComm> world_copy() {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return std::make_unique<MpiComm>(comm);
}

}  // namespace tessel
