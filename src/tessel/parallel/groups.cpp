// ProcessGroups (groups.h): one MPI_Comm_split per group kind. The color is the index of the
// group that holds the rank and the key its position in that group's list, so MPI numbers the
// group's members in list order.

#include "tessel/parallel/groups.h"

#include <vector>

#include "tessel/comm/device_comm.h"
#include "tessel/comm/mpi.h"
#include "tessel/core/error.h"

namespace tessel {
namespace {

// Where each world rank sits in one kind's group lists: the group index (MPI_UNDEFINED when in
// none) and the position inside it.
struct GroupSlot {
  int group = MPI_UNDEFINED;
  int position = 0;
};

// Computed for every rank, not just this one, so that a bad layout fails on every rank alike
// before any collective call (a throw on one rank alone would leave the others waiting).
std::vector<GroupSlot> group_slots(const Layout& layout, GroupKind kind) {
  std::vector<GroupSlot> slots(layout.world());
  const auto& groups = layout.groups(kind);
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    for (int i = 0; i < static_cast<int>(groups[g].size()); ++i) {
      int rank = groups[g][i];
      TESSEL_CHECK(rank >= 0 && rank < layout.world(),
                   "parallel/groups.cpp: {} group {} lists rank {} outside a world of {}",
                   group_kind_name(kind), g, rank, layout.world());
      TESSEL_CHECK(slots[rank].group == MPI_UNDEFINED,
                   "parallel/groups.cpp: rank {} is in two {} groups ({} and {})", rank,
                   group_kind_name(kind), slots[rank].group, g);
      slots[rank] = {g, i};
    }
  }
  // Only the embedding groups (first and last pipeline stage) may leave ranks out.
  if (kind != GroupKind::Embedding) {
    for (int rank = 0; rank < layout.world(); ++rank)
      TESSEL_CHECK(slots[rank].group != MPI_UNDEFINED, "parallel/groups.cpp: rank {} is in no {} group",
                   rank, group_kind_name(kind));
  }
  return slots;
}

}  // namespace

ProcessGroups ProcessGroups::create(const Layout& layout, int world_rank,
                                    const DeviceMemory& memory) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  TESSEL_CHECK(initialized, "parallel/groups.cpp: process groups over MPI need the job started by "
                            "mpirun (MPI is not initialised)");
  int mpi_rank = 0, mpi_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  TESSEL_CHECK(layout.world() == mpi_size,
               "parallel/groups.cpp: the layout is for {} ranks but mpirun started {}", layout.world(),
               mpi_size);
  TESSEL_CHECK(world_rank == mpi_rank, "parallel/groups.cpp: world rank {} given, MPI says {}",
               world_rank, mpi_rank);

  std::array<std::vector<GroupSlot>, kNumGroupKinds> slots;
  for (GroupKind kind : kAllGroupKinds) slots[static_cast<int>(kind)] = group_slots(layout, kind);

  ProcessGroups groups;
  groups.world_rank_ = world_rank;
  groups.coords_ = layout.coords(world_rank);
  MPI_Comm world;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  groups.world_ = std::make_unique<MpiComm>(world);
  for (GroupKind kind : kAllGroupKinds) {
    const GroupSlot& slot = slots[static_cast<int>(kind)][world_rank];
    MPI_Comm split;
    MPI_Comm_split(MPI_COMM_WORLD, slot.group, slot.position, &split);
    if (split == MPI_COMM_NULL) {
      groups.comms_[static_cast<int>(kind)] = make_local_comm(memory);
      continue;
    }
    std::unique_ptr<Comm> comm =
        make_comm(split, choose_comm_backend(split, memory), memory, group_kind_name(kind));
    const auto& members = layout.groups(kind)[slot.group];
    TESSEL_CHECK(comm->size() == static_cast<int>(members.size()) && comm->rank() == slot.position,
                 "parallel/groups.cpp: MPI made rank {} member {} of {} in its {} group, the layout "
                 "says {} of {}",
                 world_rank, comm->rank(), comm->size(), group_kind_name(kind), slot.position,
                 members.size());
    groups.comms_[static_cast<int>(kind)] = std::move(comm);
  }
  return groups;
}

ProcessGroups ProcessGroups::single(const DeviceMemory& memory) {
  ProcessGroups groups;
  groups.world_ = make_local_comm();
  for (auto& comm : groups.comms_) comm = make_local_comm(memory);
  return groups;
}

void ProcessGroups::reset_comm_stats() {
  for (auto& comm : comms_) comm->reset_stats();
}

std::vector<ProcessGroups::CommUse> ProcessGroups::comm_uses() const {
  std::vector<CommUse> uses;
  for (GroupKind kind : kAllGroupKinds) {
    const Comm& comm = *comms_[static_cast<int>(kind)];
    if (comm.size() == 1) continue;  // nothing moves in a group of one
    const CommStats& stats = comm.stats();
    for (int op = 0; op < kNumCommOps; ++op)
      if (stats[op].calls > 0) uses.push_back({kind, static_cast<CommOp>(op), stats[op]});
  }
  return uses;
}

void ProcessGroups::record_comm_calls(bool on) {
  for (auto& comm : comms_) comm->record_calls(on);
}

std::vector<ProcessGroups::GroupCall> ProcessGroups::comm_calls() const {
  std::vector<GroupCall> calls;
  for (GroupKind kind : kAllGroupKinds)
    for (const CommCall& call : comms_[static_cast<int>(kind)]->calls()) calls.push_back({kind, call});
  return calls;
}

}  // namespace tessel
