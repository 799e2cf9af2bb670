#include "tessel/train/terms.h"

#include <algorithm>

namespace tessel {

std::vector<StepTerm> take_step_terms(const std::vector<std::unique_ptr<TransformerChunk>>& chunks) {
  std::vector<StepTerm> terms;
  for (const auto& c : chunks) add_step_terms(terms, c->take_step_terms());
  return terms;
}

// A side loss's values each count the targets at their positions and later, as counted_tokens
// counts the LM loss's. Megatron (without --calculate-per-token-loss) divides each microbatch's
// masked sum by its mask's count, then averages the microbatches and DP ranks: the same mean
// whenever every microbatch counts equally (always without --eod-mask-loss, the PyTorch
// cross-check's case); counting over the global batch keeps every layout's objective the same
// under --eod-mask-loss too.
std::vector<std::vector<double>> count_term_tokens(const std::vector<StepTerm>& terms, const TrainPlan& plan,
                                                   int64_t global_batch, const MicrobatchLoader& loader,
                                                   ProcessGroups& groups) {
  const bool masked = plan.options.data.eod_mask_loss;
  std::vector<std::vector<double>> counted;
  for (const StepTerm& t : terms) {
    std::vector<double>& c = counted.emplace_back();
    for (int from : t.counted_from)
      c.push_back(masked ? static_cast<double>(loader.counted_targets_from(from))
                         : static_cast<double>(global_batch) * (plan.model.seq_length - from));
    if (masked && !c.empty()) groups.dp().all_reduce(c.data(), static_cast<int64_t>(c.size()));
  }
  return counted;
}

void set_loss_scales(const std::vector<std::unique_ptr<TransformerChunk>>& chunks,
                     const std::vector<StepTerm>& terms, const std::vector<std::vector<double>>& counted,
                     float loss_scale) {
  for (size_t i = 0; i < terms.size(); ++i) {
    if (counted[i].empty()) continue;
    std::vector<float> scales;
    for (double n : counted[i]) scales.push_back(static_cast<float>(terms[i].weight / std::max(n, 1.0)) * loss_scale);
    for (const auto& c : chunks) c->set_loss_scales(terms[i].name, scales);
  }
}

void add_term_figures(IterationStats& s, const std::vector<StepTerm>& terms,
                      const std::vector<std::vector<double>>& counted, const TermGroups& groups) {
  for (size_t i = 0; i < terms.size(); ++i)
    for (StepFigure& f : terms[i].figures(terms[i].sums, counted[i], groups)) s.figures.push_back(std::move(f));
}

}  // namespace tessel
