// The demos of pipeline, expert and context parallelism, one file each (demo_pp.cpp,
// demo_ep.cpp, demo_cp.cpp); `tessel demo` (demo_command.h) checks their flags and calls them on
// the two ranks' process groups. Each prints what every rank holds, sends and computes, checks the
// result against the same computation in one process, and throws (exit 1) when it differs.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/parallel/groups.h"

namespace tessel {

// Seed example 7 (八): 8 layers over PP 2, activations [4, 4, 8] forward and their gradient back.
void demo_pp(ProcessGroups& groups, uint64_t seed);

// Seed example 10 (十六): kDemoExperts experts over EP 2. `best_experts`: each token's first choice
// (tokens A, B on rank 0, then C... on rank 1, one more per entry), which its input is built to
// make the router pick; `top_k` experts per token.
constexpr int kDemoExperts = 8;
void demo_ep(ProcessGroups& groups, const std::vector<int>& best_experts, int top_k, uint64_t seed);

// Seed example 11 (十七): a causal sequence of `T` positions over CP 2, attention by the K/V ring.
void demo_cp(ProcessGroups& groups, int64_t T, uint64_t seed);

}  // namespace tessel
