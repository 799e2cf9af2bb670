// The kernel table of an FP8 run (--fp8-format with --fp8-recipe tensorwise, blockwise or mxfp8):
// a backend's table in its precision (fp32, or --bf16) whose linear layers run in FP8
// (kernels/fp8_gemm.h), every other slot its own, as Megatron runs only Transformer Engine's
// linear layers under fp8_autocast. Current scaling only: delayed scaling's amax histories belong
// to each layer, not to a table.
#pragma once

#include "tessel/kernels/fp8_scaling.h"
#include "tessel/kernels/kernels.h"

namespace tessel {

// Throws tessel::Error for a device without FP8 GEMMs (CUDA's cuBLASLt ones are not built yet).
const Kernels& fp8_kernels_for(Device device, Precision precision, const Fp8Recipe& recipe);

}  // namespace tessel
