#include "tessel/model/step_terms.h"

#include <algorithm>
#include <cstdint>
#include <fmt/format.h>

#include "tessel/core/error.h"
#include "tessel/model/moe/moe.h"

namespace tessel {

void add_step_terms(std::vector<StepTerm>& into, const std::vector<StepTerm>& from) {
  if (into.empty()) {
    into = from;
    for (StepTerm& t : into) std::fill(t.sums.begin(), t.sums.end(), 0.0);
  }
  TESSEL_CHECK(into.size() == from.size(), "step terms: {} terms added to {}", from.size(), into.size());
  for (size_t i = 0; i < into.size(); ++i) {
    std::vector<double>& sums = into[i].sums;
    sums.resize(std::max(sums.size(), from[i].sums.size()), 0.0);
    for (size_t v = 0; v < from[i].sums.size(); ++v) sums[v] += from[i].sums[v];
  }
}

// sums: aux loss, z loss, layer-forwards, dropped assignments, then tokens per expert.
StepTerm router_statistics(const RouterTotals& totals, bool z_loss) {
  StepTerm t{.name = "router"};
  t.sums = {totals.aux_loss, totals.z_loss, static_cast<double>(totals.forwards),
            static_cast<double>(totals.dropped)};
  t.sums.insert(t.sums.end(), totals.tokens_per_expert.begin(), totals.tokens_per_expert.end());
  t.figures = [z_loss](std::vector<double> sums, const std::vector<double>&, const TermGroups& groups) {
    const int64_t forwards = static_cast<int64_t>(sums[2]), dropped = static_cast<int64_t>(sums[3]);
    const std::vector<double> tokens(sums.begin() + 4, sums.end());
    // The auxiliary losses are the model's, as one process reports them (and Megatron, which
    // reduces them over the pipeline): the mean over every MoE layer-forward of every stage and
    // every data-parallel replica's microbatches.
    double model_aux[3] = {sums[0], sums[1], static_cast<double>(forwards)};  // load balancing, z, forwards
    if (groups.tokens != nullptr) groups.tokens->all_reduce(model_aux, 2);
    groups.pipeline.all_reduce(model_aux, 3);
    groups.data.all_reduce(model_aux, 3);
    if (forwards == 0) return std::vector<StepFigure>();
    // Each layer-forward's counts cover the rows of the EP group's ranks: per microbatch, divide
    // by EP and, when the token group splits the microbatch's rows (TP under sequence parallel,
    // CP), multiply by its size. The losses are per layer-forward.
    const double per_microbatch = (groups.tokens != nullptr ? groups.tokens->size() : 1) /
                                  static_cast<double>(forwards * groups.expert_parallel);
    const double min = *std::min_element(tokens.begin(), tokens.end()) * per_microbatch;
    const double max = *std::max_element(tokens.begin(), tokens.end()) * per_microbatch;
    double sum = 0;
    for (double x : tokens) sum += x;
    const double mean = sum / tokens.size() * per_microbatch;
    const double dropped_tokens = static_cast<double>(dropped) * per_microbatch;
    const double balancing = model_aux[0] / model_aux[2], z = model_aux[1] / model_aux[2];
    StepFigure aux{fmt::format("aux {:.4f}", balancing + z), false,
                   {{"aux_loss", balancing + z}, {"load_balancing_loss", balancing}},
                   {{"load_balancing_loss", balancing}}};
    if (z_loss) {
      aux.json.emplace_back("z_loss", z);
      aux.tensorboard.emplace_back("z_loss", z);
    }
    return std::vector<StepFigure>{
        {fmt::format("experts {:.0f}/{:.1f}/{:.0f} tok", min, mean, max), false,
         {{"expert_tokens.min", min}, {"expert_tokens.mean", mean}, {"expert_tokens.max", max}}},
        {fmt::format("dropped {:.1f}", dropped_tokens), false, {{"dropped_tokens", dropped_tokens}}},
        aux};
  };
  return t;
}

// Each depth's loss of the iteration: the last stage's sums over DP × CP, over the counted tokens.
StepTerm mtp_losses(std::vector<double> sums, float scaling_factor) {
  const int D = static_cast<int>(sums.size());
  StepTerm t{.name = "mtp", .sums = std::move(sums), .weight = scaling_factor / static_cast<float>(D)};
  for (int d = 1; d <= D; ++d) t.counted_from.push_back(d);
  t.figures = [](std::vector<double> sums, const std::vector<double>& counted, const TermGroups& groups) {
    groups.pipeline.all_reduce(sums.data(), static_cast<int64_t>(sums.size()));
    groups.data_context.all_reduce(sums.data(), static_cast<int64_t>(sums.size()));
    std::vector<StepFigure> figures;
    for (size_t d = 0; d < sums.size(); ++d) {
      const double loss = sums[d] / std::max(counted[d], 1.0);
      figures.push_back({fmt::format("mtp_{} loss {:.4f}", d + 1, loss), true, {{"mtp_losses[]", loss}},
                         {{fmt::format("mtp_{} loss", d + 1), loss}}});
    }
    return figures;
  };
  return t;
}

}  // namespace tessel
