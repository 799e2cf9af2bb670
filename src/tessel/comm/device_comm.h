// Which Comm a process group gets, by where its tensors live: the hook through which
// ProcessGroups picks a communicator for the kernel table it trains with.
//
//   host memory (the CPU table)              MpiComm
//   CUDA, every rank on its own GPU          NcclComm (comm/nccl.h)
//   CUDA, ranks sharing a GPU                StagedComm over MpiComm (comm/staged.h): NCCL
//                                            refuses two ranks on one device
//
// ProcessGroups::create (parallel/groups.cpp) builds an MpiComm from each MPI_Comm_split today;
// with a CUDA table it would call make_comm(split, choose_comm_backend(split, memory), memory)
// instead, every rank of the group together. (Wiring it in waits for the trainer's rewrite.)
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "tessel/comm/comm.h"
#include "tessel/core/device.h"

namespace tessel {

enum class CommBackend : uint8_t { Mpi, Nccl, Staged };
const char* comm_backend_name(CommBackend backend);  // "mpi", "nccl", "staged"

// Collective over comm's ranks when memory is a device's: they exchange which GPU each uses
// (host name and PCI bus id), and any GPU used twice means Staged.
CommBackend choose_comm_backend(MPI_Comm comm, const DeviceMemory& memory);

// The Comm over comm's ranks (taking ownership of comm, split or dup) for tensors in `memory`.
// Collective for Nccl. Nccl needs a build with TESSEL_CUDA; Staged with host memory stages
// through plain copies (what the CPU tests exercise). `name` names the group in timeout errors.
std::unique_ptr<Comm> make_comm(MPI_Comm comm, CommBackend backend, const DeviceMemory& memory,
                                const std::string& name);

}  // namespace tessel
