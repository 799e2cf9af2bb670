// Linear layers: the products are linear_products.h's, as on the CPU, each one cuBLASLt GEMM
// (gemm.cu); the bias is here. (A fused bias epilogue is where a measurement would have to show it
// pays.)
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"
#include "tessel/kernels/linear_products.h"

namespace tessel::cuda {

namespace {

__global__ void bias_forward_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  TESSEL_GRID_LOOP(i, N * OC) out[i] += bias[i % OC];
}

CudaScratch bias_scratch;

}  // namespace

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t IC, int64_t OC, WeightLayout layout) {
  linear_forward_via<gemm, bias_forward>(out, inp, weight, bias, N, IC, OC, layout);
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
  linear_backward_via<gemm, bias_backward>(dinp, dweight, dbias, dout, inp, weight, N, IC, OC,
                                           layout);
}

}  // namespace tessel::cuda
