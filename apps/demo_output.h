// What every `tessel demo` shares: its two ranks and their process groups, its flags' lists of
// numbers, and its printing — rank 0 prints every rank's lines in rank order, so that the two
// ranks' stories read side by side rather than interleaved by mpirun.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/comm/mpi.h"
#include "tessel/parallel/groups.h"
#include "tessel/parallel/layout.h"

namespace tessel {

constexpr int kDemoRanks = 2;  // every demo is the seed's two-GPU picture

// The demo's layout on its 2 ranks: `config`'s parallel sizes, world set to 2. A ConfigError
// saying how to run it when this run has another number of ranks.
ProcessGroups demo_groups(const MpiRuntime& runtime, const std::string& name,
                          ParallelConfig config);

// "1,2,3,4" -> {1, 2, 3, 4}; a ConfigError naming the flag otherwise.
std::vector<float> parse_floats(const std::string& text, const char* flag);

// "[1, 2.5, -3]": n values, 4 significant digits.
std::string list_text(const float* values, int64_t n);
// The largest |a − b|; a NaN on either side counts as an infinite difference (a result that is
// not a number is never confirmed), equal infinities as none.
float max_abs_difference(const float* a, const float* b, int64_t n);

// Rank 0 prints every rank's text, in rank order. Collective over `world`.
void print_by_rank(Comm& world, const std::string& text);
// A line every rank would say alike, printed once. Collective over `world`.
void print_from_rank0(Comm& world, const std::string& text);

// The check every demo ends with: when any rank's `difference` from the one-process result is
// over 1e-5, every rank throws the same JobError ("RESULT differs from one process's by D"), so
// rank 0 reports it once and all exit 1. Collective over `world`.
void check_against_one_process(Comm& world, float difference, const std::string& result);

}  // namespace tessel
