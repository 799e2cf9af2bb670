// What a step reports besides the LM loss: the terms the chunks add up over its microbatches (the
// multi-token prediction depths' losses, the MoE routers' statistics), each with how the step
// reduces it, the log's figures of it and, for a side loss, the gradient scale the next forwards
// give it. The trainer takes, reduces, logs and feeds back every term through one loop.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessel/comm/comm.h"

namespace tessel {

// The groups a term reduces over.
struct TermGroups {
  Comm* tokens = nullptr;  // the ranks that split a microbatch's rows (TP under sequence parallel, CP); null: none
  Comm& pipeline;
  Comm& data;
  Comm& data_context;      // DP × CP
  int expert_parallel = 1;  // EP's size
};

// One figure of the iteration's log: " | {text}" in its line, right after the loss (a side loss)
// or at its end, and its numbers in --log-json, each under a key: "a" a number, "a[]" appended to
// the list a, "a.b" member b of the object a; and the scalars Megatron-LM writes of it to
// TensorBoard every iteration (its tag, the value).
struct StepFigure {
  std::string text;
  bool after_loss = false;
  std::vector<std::pair<std::string, double>> json;
  std::vector<std::pair<std::string, double>> tensorboard;
};

struct StepTerm {
  std::string name;
  // This rank's sums since the last take; the rank's chunks' add up value by value.
  std::vector<double> sums;
  // A side loss: sums[i] is a sum of token losses whose mean is over the global batch's targets
  // at positions ≥ counted_from[i]; the next forwards scale its gradient by weight / that count.
  std::vector<int> counted_from;
  double weight = 0;
  // The log's figures of the rank's sums (and of a side loss's counts), which it reduces over
  // `groups` as it needs: collective, every rank calls it with the same terms.
  std::function<std::vector<StepFigure>(std::vector<double> sums, const std::vector<double>& counted,
                                        const TermGroups& groups)>
      figures;
};

// Adds `from`'s sums to `into`'s, term by term (the same terms in the same order), value by value;
// an empty `into` starts from `from`'s terms at zero.
void add_step_terms(std::vector<StepTerm>& into, const std::vector<StepTerm>& from);

struct RouterTotals;  // moe/moe.h

// The MoE routers' statistics: tokens per expert as the first rank sees them (summed over its EP
// group), the assignments dropped, and the auxiliary losses the model's (the mean over all layers
// and microbatches, as one process logs it). Every model has the term: a rank without MoE layers
// takes part in its reductions with zeros. TensorBoard gets Megatron's load_balancing_loss and,
// with a z-loss (z_loss), z_loss: each the mean over the layers and microbatches.
StepTerm router_statistics(const RouterTotals& totals, bool z_loss);
// Multi-token prediction's D depths' losses (model/mtp.h): depth d's sum of token losses, its mean
// over the targets at positions ≥ d, weighted s / D in the objective (--mtp-loss-scaling-factor s).
StepTerm mtp_losses(std::vector<double> sums, float scaling_factor);

}  // namespace tessel
