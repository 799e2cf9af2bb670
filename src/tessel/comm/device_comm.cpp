#include "tessel/comm/device_comm.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "tessel/comm/mpi.h"
#include "tessel/comm/staged.h"
#include "tessel/core/error.h"

#ifdef TESSEL_CUDA
#include "tessel/comm/nccl.h"
#include "tessel/core/cuda.h"
#endif

namespace tessel {

namespace {
bool every_pointer(const void*) { return true; }  // host memory: all of it is "the memory's"

#ifdef TESSEL_CUDA
// "host/pci-bus-id" of this rank's GPU, padded to a fixed size for the all-gather.
using GpuName = std::array<char, 160>;
GpuName this_gpu() {
  GpuName name{};
  char host[64] = {}, bus[32] = {};
  gethostname(host, sizeof(host) - 1);
  cuda_check(cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_device()), "cudaDeviceGetPCIBusId");
  std::snprintf(name.data(), name.size(), "%s/%s", host, bus);
  return name;
}
#endif
}  // namespace

const char* comm_backend_name(CommBackend backend) {
  switch (backend) {
    case CommBackend::Mpi:
      return "mpi";
    case CommBackend::Nccl:
      return "nccl";
    case CommBackend::Staged:
      return "staged";
  }
  return "?";
}

CommBackend choose_comm_backend(MPI_Comm comm, const DeviceMemory& memory) {
  if (memory.device == Device::CPU) return CommBackend::Mpi;
#ifdef TESSEL_CUDA
  int size = 1;
  MPI_Comm_size(comm, &size);
  const GpuName mine = this_gpu();
  std::vector<GpuName> all(size);
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(),
                static_cast<int>(mine.size()), MPI_CHAR, comm);
  std::set<std::string> distinct;
  for (const GpuName& name : all) distinct.insert(name.data());
  return static_cast<int>(distinct.size()) == size ? CommBackend::Nccl : CommBackend::Staged;
#else
  fail("comm: tensors in {} memory, but this build has no CUDA (-DTESSEL_CUDA=ON)",
       device_name(memory.device));
#endif
}

std::unique_ptr<Comm> make_comm(MPI_Comm comm, CommBackend backend, const DeviceMemory& memory,
                                const std::string& name) {
  switch (backend) {
    case CommBackend::Mpi:
      return std::make_unique<MpiComm>(comm, name);
    case CommBackend::Staged: {
      bool (*on_device)(const void*) = every_pointer;
#ifdef TESSEL_CUDA
      if (memory.device == Device::CUDA) on_device = cuda_is_device_pointer;
#endif
      return std::make_unique<StagedComm>(std::make_unique<MpiComm>(comm, name), memory, on_device);
    }
    case CommBackend::Nccl:
#ifdef TESSEL_CUDA
      return std::make_unique<NcclComm>(comm);
#else
      fail("comm: NCCL needs a build with CUDA (-DTESSEL_CUDA=ON)");
#endif
  }
  fail("comm: unknown backend");
}

}  // namespace tessel
