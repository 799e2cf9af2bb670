// The step's terms besides the LM loss (model/step_terms.h) as the trainer handles them, whatever
// they are: taken from the rank's chunks after each computation, reduced into the iteration's
// figures, and for a side loss counted over each global batch and fed back as the next forwards'
// gradient scales.
#pragma once

#include <memory>
#include <vector>

#include "tessel/model/step_terms.h"
#include "tessel/model/transformer.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/log.h"
#include "tessel/train/microbatches.h"
#include "tessel/train/plan.h"

namespace tessel {

// The rank's chunks' terms since the last take, added up chunk by chunk (the same list on every
// rank); starts new sums.
std::vector<StepTerm> take_step_terms(const std::vector<std::unique_ptr<TransformerChunk>>& chunks);

// For each term, the tokens of the current global batch (of `global_batch` samples) each of a side
// loss's values counts (none for a term that is no loss). Collective over DP with --eod-mask-loss.
std::vector<std::vector<double>> count_term_tokens(const std::vector<StepTerm>& terms, const TrainPlan& plan,
                                                   int64_t global_batch, const MicrobatchLoader& loader,
                                                   ProcessGroups& groups);

// Each side loss's gradient scales for the next forwards, weight / its counted tokens times the loss
// scale (optim/loss_scaler.h; Megatron scales its auxiliary losses' gradients by it too), to every chunk.
void set_loss_scales(const std::vector<std::unique_ptr<TransformerChunk>>& chunks,
                     const std::vector<StepTerm>& terms, const std::vector<std::vector<double>>& counted,
                     float loss_scale);

// The terms' figures, reduced over `groups`, into s.figures. Collective: every rank calls it.
void add_term_figures(IterationStats& s, const std::vector<StepTerm>& terms,
                      const std::vector<std::vector<double>>& counted, const TermGroups& groups);

}  // namespace tessel
