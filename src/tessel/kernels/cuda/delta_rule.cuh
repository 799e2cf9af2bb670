// What the CUDA chunked gated delta rule's files share (delta_rule.cu, delta_rule_backward.cu):
// the kernel's arguments, the scratch every phase reads and writes, per chunk or per sequence.
#pragma once

#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"
#include "tessel/kernels/packed_documents.h"

namespace tessel::cuda {

constexpr int64_t kC = kDeltaChunk;
constexpr int kDeltaThreads = 256;  // threads per block of every phase

// The rule's inputs and sizes (cpu/kernels.h), with the rows of value head j's sequence.
struct DeltaArgs {
  const float* q;
  const float* k;
  const float* v;
  const float* beta;
  const float* g;
  const int32_t* key_start;
  int64_t B, T, Hk, Hv, Dk, Dv, qk_ld, v_ld, chunks;
  __device__ const float* q_row(int64_t b, int64_t t, int64_t j) const {
    return q + (b * T + t) * qk_ld + j / (Hv / Hk) * Dk;
  }
  __device__ const float* k_row(int64_t b, int64_t t, int64_t j) const {
    return k + (b * T + t) * qk_ld + j / (Hv / Hk) * Dk;
  }
  __device__ const float* v_row(int64_t b, int64_t t, int64_t j) const {
    return v + (b * T + t) * v_ld + j * Dv;
  }
};

// A chunk's vectors (cpu/delta_rule.h's names): c, the chunk row that began each row's document
// (−1: none, as a float), β, ec, kd, and gamma.
struct ChunkVectors {
  static constexpr int64_t kFloats = 5 * kC + 1;
  float* cum;
  float* first;
  float* beta;
  float* ec;
  float* kd;
  float* gamma;
  // D[r, c] = e^{c_r − c_c} within one document, c ≤ r; else 0.
  __device__ float decay(int64_t r, int64_t c) const {
    return c <= r && first[c] == first[r] ? expf(cum[r] - cum[c]) : 0.0f;
  }
};

// Device pointers into the scratch (per chunk idx = (b·Hv + j)·chunks + n unless said).
struct DeltaScratch {
  float* P = nullptr;    // (C, C) per chunk
  float* KKD = nullptr;  // (C, C)
  float* W = nullptr;    // (C, Dk)
  float* U0 = nullptr;   // (C, Dv)
  float* vector_data = nullptr;
  float* state = nullptr;    // (Dk, Dv) per sequence: the running S, or dS
  float* U = nullptr;        // (C, Dv) per sequence (forward) or per chunk (backward)
  float* states = nullptr;   // (Dk, Dv) per chunk: its start state (backward)
  float* dstates = nullptr;  // (Dk, Dv) per chunk: the gradient of the state after it
  float* dU = nullptr;       // (C, Dv) per chunk
  float* local = nullptr;    // local_floats per chunk: the local gradients' matrices
  float* dq_heads = nullptr;  // (B, T, Hv, Dk): dq per value head, before the sum over r
  float* dk_heads = nullptr;
  __host__ __device__ ChunkVectors vectors(int64_t idx) const {
    float* p = vector_data + idx * ChunkVectors::kFloats;
    return {p, p + kC, p + 2 * kC, p + 3 * kC, p + 4 * kC, p + 5 * kC};
  }
  // dX (C, Dv), dQc, dKd, dR2 (C, Dk), dP, dA (C, C).
  __host__ __device__ static int64_t local_floats(const DeltaArgs& a) {
    return kC * a.Dv + 3 * kC * a.Dk + 2 * kC * kC;
  }
};

// The buffers behind DeltaScratch, grown once to the largest call.
struct DeltaScratchSpace {
  CudaScratch P, KKD, W, U0, vectors, state, U, states, dstates, dU, local, dq_heads, dk_heads;
};

// Every gradient a chunk's inputs get from its own rows (delta_rule_backward.cu): dv, dbeta, dg
// added in place, dq and dk per value head into the scratch.
void local_gradients(const DeltaScratch& s, const float* Ainv, const float* dout, float* dv,
                     float* dbeta, float* dg, const DeltaArgs& a);

}  // namespace tessel::cuda
