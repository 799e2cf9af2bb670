// Where packed documents begin, as the Gated DeltaNet kernels read key_start (cpu/kernels.h): one
// definition for the CPU kernels and CUDA threads.
#pragma once

#include <cstdint>

#include "tessel/core/host_device.h"

namespace tessel {

// Row t > 0 of sequence b begins a new document: its key_start (B, T) differs from the row
// before. Never with key_start nullptr (one document per sequence), never at row 0.
TESSEL_HOST_DEVICE inline bool starts_document(const int32_t* key_start, int64_t b, int64_t T,
                                               int64_t t) {
  return key_start != nullptr && t > 0 && key_start[b * T + t] != key_start[b * T + t - 1];
}

}  // namespace tessel
