// Linear layers: every product is one cuBLASLt GEMM (gemm.cu); only the bias is done here. The
// same calls as kernels/cpu/linear.cpp, operand for operand. (A fused bias epilogue is where a
// measurement would have to show it pays.)
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

__global__ void bias_forward_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  TESSEL_GRID_LOOP(i, N * OC) out[i] += bias[i % OC];
}

CudaScratch bias_scratch;

}  // namespace

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t IC, int64_t OC, WeightLayout layout) {
  if (layout == WeightLayout::InOut) {
    gemm(false, false, N, OC, IC, 1.0f, inp, IC, weight, OC, 0.0f, out, OC);  // inp · W
  } else {
    gemm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);  // inp · Wᵀ
  }
  if (bias != nullptr) bias_forward(out, bias, N, OC);
}

void bias_forward(float* out, const float* bias, int64_t N, int64_t OC) {
  launch_n("bias_forward", bias_forward_kernel, N * OC, out, bias, N, OC);
}

// Column sums in a fixed order: the same bits on every run.
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t OC) {
  column_sums(dbias, RowValue{dout, OC}, N, OC, bias_scratch);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IC, int64_t OC, WeightLayout layout) {
  const bool in_out = layout == WeightLayout::InOut;
  if (dinp != nullptr) {
    if (in_out) {
      gemm(false, true, N, IC, OC, 1.0f, dout, OC, weight, OC, 1.0f, dinp, IC);  // dout · Wᵀ
    } else {
      gemm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 1.0f, dinp, IC);  // dout · W
    }
  }
  if (dweight != nullptr) {
    if (in_out) {
      gemm(true, false, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dweight, OC);  // inpᵀ · dout
    } else {
      gemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);  // doutᵀ · inp
    }
  }
  if (dbias != nullptr) bias_backward(dbias, dout, N, OC);
}

}  // namespace tessel::cuda
