// The kernel table: every operation a backend provides, one slot each. The model, the
// parallelisms and the optimizer are given a table and call nothing else for compute, so a second
// backend (CUDA) or precision adds implementations, never a second copy of the model.
//
// Each slot is typed from the CPU reference (kernels/cpu/kernels.h, the readable specification of
// every op: its arguments, shapes and accumulation rules), so an implementation whose arguments
// differ does not compile. Pointers are the backend's device memory; `memory` allocates it and
// moves bytes to and from the host (core/device.h).
#pragma once

#include <algorithm>
#include <vector>

#include "tessel/core/device.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/cpu/gemm.h"
#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/linear_products.h"
#include "tessel/kernels/types.h"

namespace tessel {

// Every slot, in kernels/cpu/kernels.h's order; X(name) once each. The table's declaration, the
// CPU entry and the test that every backend fills every slot all expand this one list.
#define TESSEL_KERNEL_SLOTS(X)                                                                  \
  X(scale) X(sum_squares) X(find_out_of_range)                                                  \
  X(embedding_forward) X(embedding_backward) X(embedding_shard_ids)                             \
  X(residual_forward) X(dropout_add_forward) X(dropout_add_backward)                            \
  X(layernorm_forward) X(layernorm_backward) X(rmsnorm_forward) X(rmsnorm_backward)             \
  X(gated_rmsnorm_forward) X(gated_rmsnorm_backward) X(l2norm_forward) X(l2norm_backward)       \
  X(gelu_forward) X(gelu_backward) X(gelu_erf_forward) X(gelu_erf_backward)                     \
  X(sigmoid_gate_forward) X(sigmoid_gate_backward)                                              \
  X(output_gate_forward) X(output_gate_backward) X(swiglu_forward) X(swiglu_backward)           \
  X(linear_forward) X(linear_backward) X(bias_forward) X(bias_backward)                         \
  X(rope_tables) X(rope_forward) X(rope_backward)                                               \
  X(causal_conv1d_silu_forward) X(causal_conv1d_silu_backward) X(gdn_gate_forward)              \
  X(gdn_gate_backward) X(gated_delta_rule_forward) X(gated_delta_rule_backward)                 \
  X(gated_delta_rule_step)                                                                      \
  X(attention_forward) X(attention_backward) X(attention_block_forward)                         \
  X(attention_block_backward) X(attention_merge)                                                \
  X(cross_entropy_partial_forward) X(cross_entropy_rescale) X(cross_entropy_finish)             \
  X(cross_entropy_backward)                                                                     \
  X(moe_topk_forward) X(moe_topk_backward) X(moe_aux_scores_forward) X(moe_aux_loss_forward)    \
  X(moe_aux_loss_backward) X(moe_z_loss_forward) X(moe_z_loss_backward) X(moe_capacity_drop)    \
  X(moe_random_logits)                                                                          \
  X(moe_count_assignments) X(moe_assign_slots) X(moe_permute_forward) X(moe_permute_backward)   \
  X(moe_unpermute_forward) X(moe_unpermute_backward) X(moe_pack_choices) X(moe_unpack_choices)  \
  X(cp_take_rows) X(cp_pack_kv) X(cp_unpack_add_kv) X(cp_rows_to_global) X(cp_rows_from_global) \
  X(cp_columns_to_ranks) X(cp_columns_from_ranks)                                               \
  X(adamw_update)                                                                               \
  X(gemm) X(gemm_stats_enable) X(gemm_stats) X(gemm_stats_reset)

// The rows a buffer holding `held` rows keeps after Kernels::reserve asks for `needed`: the same
// when they suffice, else half as large again or the need, whichever is more. Integer rows for
// the buffers themselves; the planner applies it to the fractional rows a run's routing load
// brings (plan/tessel_chunks.cpp).
template <typename Rows>
Rows reserved_rows(Rows held, Rows needed) {
  return needed <= held ? held : std::max(needed, held * 3 / 2);
}

struct Kernels {
  const char* name = nullptr;  // "cpu", "cpu-bf16", "cuda", "cuda-bf16"
  Precision precision = Precision::FP32;
  DeviceMemory memory;
#define TESSEL_KERNEL_SLOT(op) decltype(&cpu::op) op = nullptr;
  TESSEL_KERNEL_SLOTS(TESSEL_KERNEL_SLOT)
#undef TESSEL_KERNEL_SLOT

  // A zero-filled tensor in this backend's memory.
  Tensor zeros(Shape shape, DType dtype = DType::F32) const {
    return Tensor::zeros(std::move(shape), dtype, memory);
  }
  // t holds at least rows × cols elements afterwards: reallocated to reserved_rows when short
  // (never shrinks), so buffers whose size depends on the data — dropless MoE routing — settle at
  // the largest size seen. The contents are not kept. Returns t's first element.
  float* reserve(Tensor& t, int64_t rows, int64_t cols) const;
  int32_t* reserve_ints(Tensor& t, int64_t rows, int64_t cols) const;
  // Zeroes n floats at p.
  void zero(float* p, int64_t n) const { memory.zero(p, n * 4); }
  // Copies n floats within the device.
  void copy(float* dst, const float* src, int64_t n) const { memory.copy(dst, src, n * 4); }
};

// A backend's table made its bf16 or fp16 twin (--bf16, --fp16): the slots that are GEMMs — gemm,
// linear_forward, linear_backward — run on operands rounded to `precision` through the backend's
// GemmRounded; every other slot is the fp32 one.
template <GemmFn GemmRounded, auto BiasForward, auto BiasBackward>
void use_rounded_gemms(Kernels& k, Precision precision, const char* name) {
  k.name = name;
  k.precision = precision;
  k.gemm = GemmRounded;
  k.linear_forward = &linear_forward_via<GemmRounded, BiasForward>;
  k.linear_backward = &linear_backward_via<GemmRounded, BiasBackward>;
}

// The CPU backend: the reference kernels of kernels/cpu/; with BF16 or FP16 its emulation of
// bf16 or fp16 GEMMs.
const Kernels& cpu_kernels(Precision precision = Precision::FP32);
// The table of `device` in `precision` (tessel train --device, --bf16, --fp16). Throws tessel::Error when
// this build has no such backend or this machine no such device.
const Kernels& kernels_for(Device device, Precision precision);
// Every backend compiled into this build and usable on this machine, the CPU first, in the given
// precision.
std::vector<const Kernels*> available_kernels(Precision precision = Precision::FP32);
// The names of the slots a table leaves empty (none for a complete backend).
std::vector<const char*> missing_kernel_slots(const Kernels& k);

}  // namespace tessel
