// The CUDA kernels (built with TESSEL_CUDA): one implementation of every slot of the kernel table
// (kernels/kernels.h), file for file as kernels/cpu/. The CPU reference (kernels/cpu/kernels.h,
// cpu/gemm.h) is the specification — arguments, shapes, what accumulates, which pointers may be
// nullptr — and each function here is declared with exactly its type, so a signature that drifts
// fails to link. Every pointer is device memory (cuda_memory()); everything runs on cuda_stream()
// in call order. Functions that return a host value (sum_squares, find_out_of_range,
// cross_entropy_finish, moe_aux_loss_forward, moe_z_loss_forward, moe_capacity_drop) wait for
// the stream before returning.
#pragma once

#include "tessel/kernels/kernels.h"

namespace tessel {

namespace cuda {
#define TESSEL_CUDA_DECLARE(op) decltype(::tessel::cpu::op) op;
TESSEL_KERNEL_SLOTS(TESSEL_CUDA_DECLARE)
#undef TESSEL_CUDA_DECLARE
// cpu::gemm_bf16's contract: both operands rounded to bf16 (cuBLASLt bf16 inputs), fp32
// accumulation and C.
decltype(::tessel::cpu::gemm_bf16) gemm_bf16;
// cpu::gemm_fp16's: both operands rounded to fp16 (cuBLASLt fp16 inputs), fp32 accumulation and C.
decltype(::tessel::cpu::gemm_fp16) gemm_fp16;
}  // namespace cuda

// The CUDA backend's table (BF16, FP16: its GEMMs on bf16 or fp16 operands). Building it touches no device, so
// it exists (and can be checked for empty slots) on a machine without one; calling its kernels
// needs a device.
const Kernels& cuda_kernels(Precision precision = Precision::FP32);

}  // namespace tessel
