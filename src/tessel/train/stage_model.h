// This rank's part of the model as training builds it (train/trainer.cpp): its stage's chunks in
// one parameter registry, and how its gradients are synchronised (parallel/grad_sync.h).
#pragma once

#include <memory>
#include <vector>

#include "tessel/model/transformer.h"
#include "tessel/parallel/grad_sync.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/plan.h"

namespace tessel {

// This rank's part of the model: its pipeline stage's chunks (several with VPP), each split over
// TP and its experts over EP and ETP, all their parameters in one registry, initialised.
struct StageModel {
  StageModel(const Kernels& k, const TrainPlan& plan, ProcessGroups& groups, const TensorParallel& tp,
             const ContextParallel& cp);

  std::vector<TransformerChunk*> pointers() const {
    std::vector<TransformerChunk*> p;
    for (const auto& c : chunks) p.push_back(c.get());
    return p;
  }

  ParamRegistry params;
  std::vector<std::unique_ptr<TransformerChunk>> chunks;
  Comm* token_group = nullptr;
  bool init_deferred = false;  // initialised by RunSetup, this rank's slices alone
};

// Gradient synchronisation of this rank's parameters. A tied embedding lives on the first and
// the last stage; both copies start equal (same seed and name, or the same file) and the
// embedding group keeps them so; the norm counts the first stage's. In a V the first stage
// holds the head too: one embedding, no group.
GradSyncConfig grad_sync_config(const TrainPlan& plan, const StageModel& stage, int pp_rank);

}  // namespace tessel
