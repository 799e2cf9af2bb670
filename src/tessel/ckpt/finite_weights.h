// Weights read from a file (a save, Hugging Face weights) or about to be written must be finite:
// a NaN trains or samples garbage without a word.
#pragma once

#include <string>

#include "tessel/core/params.h"
#include "tessel/kernels/kernels.h"

namespace tessel {

// The first non-finite element of n floats of device memory, or -1. Σx² over floats is finite
// exactly when every x is (in double precision no square of a float overflows), so one pass of
// the kernel table's sum_squares tells; the element is looked for only then.
int64_t first_non_finite(const Kernels& k, const float* x, int64_t n);

// Throws tessel::Error naming `source` (a file, a save), the first parameter holding a NaN or an
// infinity and the element. Reads every value once (through the kernel table).
void require_finite_weights(const Kernels& k, const ParamRegistry& params, const std::string& source);

}  // namespace tessel
