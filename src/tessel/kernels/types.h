// The small types kernel arguments carry, shared by every backend.
#pragma once

#include <cstdint>

namespace tessel {

// Weight layouts: InOut is GPT-2's Conv1D [in, out] (y = x·W); OutIn is nn.Linear [out, in]
// (y = x·Wᵀ). Both are the Hugging Face tensors as stored, so names and shapes match files.
enum class WeightLayout : uint8_t { InOut, OutIn };

// The arithmetic of a kernel table's GEMMs (--bf16, --fp16): fp32 operands, or operands rounded
// to bf16 (kernels/bf16.h) or to fp16 (kernels/fp16.h) with fp32 accumulation and fp32 results.
// Nothing else of a table changes.
enum class Precision : uint8_t { FP32, BF16, FP16 };

// How a Mixture-of-Experts router scores the experts (Megatron's --moe-router-score-function).
enum class RouterScore : uint8_t { Softmax, Sigmoid };

// The gated delta rule's chunk (cpu/kernels.h, gated_delta_rule_forward): its rows, and the chunks
// of a sequence of T rows (the last one padded), which size the saved Ainv.
constexpr int64_t kDeltaChunk = 64;
inline int64_t delta_rule_chunks(int64_t T) { return (T + kDeltaChunk - 1) / kDeltaChunk; }

// Every gemm call's floating-point operations and the seconds spent, summed over calling threads,
// since accounting was switched on (tessel train --profile-report).
struct GemmStats {
  double flops = 0;
  double seconds = 0;
  int64_t calls = 0;
};

}  // namespace tessel
