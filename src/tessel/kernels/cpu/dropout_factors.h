// Dropout's factors for a run of consecutive features of one row, exactly kernels/dropout.h's
// element by element, drawn the way a CPU does it fast: one Philox block gives the bits of four
// consecutive features (its four lanes, feature % 4), and sixteen blocks are computed side by
// side so that the rounds' 32×32-bit products run in vector registers. Drawn element by element
// (a whole block per element, one lane kept), the residual and attention-probability masks cost
// 15 % of a small GPT's step (issue 44).
#pragma once

#include <algorithm>
#include <cstdint>

#include "tessel/kernels/dropout.h"

namespace tessel::cpu {

// factors[i] for i in [0, count): the factor of feature first + i of the row at (sample,
// position) of site word `site`: 0 where dropped, keep_scale otherwise.
inline void dropout_factors(float* factors, uint64_t seed, uint32_t site, int32_t sample, int32_t position,
                            int64_t first, int64_t count, uint32_t threshold, float keep_scale) {
  constexpr int64_t kBlocks = 16;
  uint32_t bits[4 * kBlocks];  // the blocks' lanes in feature order
  const int64_t end = first + count;
  for (int64_t f = first; f < end;) {
    const int64_t block0 = f >> 2;
#pragma omp simd
    for (int64_t j = 0; j < kBlocks; ++j) {
      uint32_t c0 = static_cast<uint32_t>(block0 + j), c1 = static_cast<uint32_t>(position),
               c2 = static_cast<uint32_t>(sample), c3 = site;
      philox4x32_rounds(c0, c1, c2, c3, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
      bits[4 * j] = c0;
      bits[4 * j + 1] = c1;
      bits[4 * j + 2] = c2;
      bits[4 * j + 3] = c3;
    }
    const int64_t stop = std::min(end, (block0 + kBlocks) * 4);
    const int64_t bits_first = block0 * 4;  // the feature of bits[0]
#pragma omp simd
    for (int64_t g = f; g < stop; ++g) factors[g - first] = bits[g - bits_first] < threshold ? 0.0f : keep_scale;
    f = stop;
  }
}

// The factors of features [first, first + count) of a residual site's row `row` (features
// counted from site.feature_offset), as dropout_factor(site, row, feature) gives each.
inline void dropout_row_factors(float* factors, const DropoutSite& site, int64_t row, int64_t first, int64_t count) {
  dropout_factors(factors, site.seed, site.site, site.samples[row], site.positions[row],
                  site.feature_offset + first, count, site.threshold(), site.keep_scale());
}

}  // namespace tessel::cpu
