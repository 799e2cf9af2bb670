// What `tessel plan` prints: one layout's memory per stage and step-time parts, every figure with
// its formula (--explain), the search's ranked table and rejected layouts, JSON, and two SVG
// drawings (memory per stage, step-time breakdown).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>

#include "tessel/plan/search.h"

namespace tessel {

// The FLOP convention every TFLOP/s and MFU figure follows, stated in the output.
extern const char* const kFlopConvention;

void print_estimate(const PlanModel& model, const Cluster& cluster, const Estimate& est);
void print_explain(const PlanModel& model, const Cluster& cluster, const Estimate& est);
// A layout that does not fit: the changes that make it fit (memory_fixes), with their cost.
void print_memory_fixes(const Estimate& est, const std::vector<MemoryFix>& fixes);
void print_search(const PlanModel& model, const Cluster& cluster, const SearchResult& result, bool all_rejected);

nlohmann::json estimate_json(const Estimate& est);
nlohmann::json search_json(const PlanModel& model, const Cluster& cluster, const SearchResult& result);
nlohmann::json single_json(const PlanModel& model, const Cluster& cluster, const Estimate& est);

// Stacked bars of each stage's memory (weights, gradients, optimizer, activations, buffers,
// runtime) against the device's memory; and the step time's parts as one bar.
std::string memory_svg(const Estimate& est, const Cluster& cluster, const std::string& title);
std::string time_svg(const Estimate& est, const std::string& title);

// Rank kinds: the first, middle (the fullest) and last pipeline stage's peak, in GiB.
struct RankKinds {
  double first = 0, middle = 0, last = 0;
};
RankKinds rank_kinds(const Estimate& est);

}  // namespace tessel
