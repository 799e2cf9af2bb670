// ProcessGroups: this rank's Comm for every group kind of the layout (tp, cp, dp, dp_cp, pp,
// tp_cp, mp, tp_dp_cp, embedding, ep, etp, edp, tp_ep) and for the world. Modules take the Comm
// of the group they talk over: a TP linear holds tp(), the gradient all-reduce dp_cp(), ...
//
// Group-local ranks follow the layout's lists: rank i of a group's Comm is the i-th world rank
// of that group's list (Megatron's order), so "TP rank 1" means the same as in Megatron.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/parallel/layout.h"

namespace tessel {

class ProcessGroups {
 public:
  // One communicator per group kind, split from MPI_COMM_WORLD (after MpiRuntime started MPI).
  // Collective: every rank calls it with the same layout, and the splits run in the same order
  // on all of them. `world_rank` must be this process's rank in MPI_COMM_WORLD, and the layout's
  // world the number of processes mpirun started. A rank outside every group of a kind (middle
  // pipeline stages have no embedding group) gets a LocalComm of size 1, so its collectives on
  // that group do nothing. Throws tessel::Error, on every rank alike, when the layout does not
  // fit the job. The groups carry tensors in `memory` (the kernel table's): MpiComm for the host,
  // NcclComm or StagedComm for a GPU (comm/device_comm.h); the world, which carries host values
  // only, is always an MpiComm.
  static ProcessGroups create(const Layout& layout, int world_rank,
                              const DeviceMemory& memory = host_memory());
  // A one-process run: every group, and the world, is a LocalComm.
  static ProcessGroups single(const DeviceMemory& memory = host_memory());

  Comm& get(GroupKind kind) { return *comms_[static_cast<int>(kind)]; }
  Comm& world() { return *world_; }
  Comm& tp() { return get(GroupKind::TP); }
  Comm& cp() { return get(GroupKind::CP); }
  Comm& dp() { return get(GroupKind::DP); }
  Comm& dp_cp() { return get(GroupKind::DP_CP); }
  Comm& pp() { return get(GroupKind::PP); }
  Comm& tp_cp() { return get(GroupKind::TP_CP); }
  Comm& mp() { return get(GroupKind::MP); }
  Comm& tp_dp_cp() { return get(GroupKind::TP_DP_CP); }
  Comm& embedding() { return get(GroupKind::Embedding); }
  Comm& ep() { return get(GroupKind::EP); }
  Comm& etp() { return get(GroupKind::ETP); }
  Comm& edp() { return get(GroupKind::EDP); }
  Comm& tp_ep() { return get(GroupKind::TP_EP); }

  // The communication counters (comm.h) of every group kind's Comm: all reset, or those with
  // calls since the last reset as (group kind, call kind, counter), groups of one left out.
  void reset_comm_stats();
  struct CommUse {
    GroupKind group;
    CommOp op;
    CommCounter counter;
  };
  std::vector<CommUse> comm_uses() const;
  // Every group kind's calls listed as well from now on (comm.h's record_calls), and those listed
  // since the last reset, in each group's order.
  void record_comm_calls(bool on);
  struct GroupCall {
    GroupKind group;
    CommCall call;
  };
  std::vector<GroupCall> comm_calls() const;

  int world_rank() const { return world_rank_; }
  // This rank's coordinate on every axis of the layout (all 0 for single()).
  const RankCoords& coords() const { return coords_; }

 private:
  ProcessGroups() = default;

  std::unique_ptr<Comm> world_;
  std::array<std::unique_ptr<Comm>, kNumGroupKinds> comms_;
  int world_rank_ = 0;
  RankCoords coords_;
};

}  // namespace tessel
