// The chunked gated delta rule's local gradients on the GPU: one block per chunk, once the state
// gradients are known (delta_rule.cu) — the CPU's chunk_backward (cpu/delta_rule_backward.cpp),
// phase by phase, its matrices in per-chunk scratch.
#include "tessel/kernels/cuda/delta_rule.cuh"

namespace tessel::cuda {

namespace {

__global__ void local_gradients_kernel(DeltaScratch s, const float* Ainv, const float* dout,
                                       float* dv, float* dbeta, float* dg, DeltaArgs a) {
  const int64_t idx = blockIdx.x, n = idx % a.chunks, bj = idx / a.chunks;
  const int64_t b = bj / a.Hv, j = bj % a.Hv, t0 = n * kC, rows = min(kC, a.T - t0);
  const int64_t Dk = a.Dk, Dv = a.Dv, KV = Dk * Dv, L = kC - 1;
  const float scale = rsqrtf(static_cast<float>(Dk));
  const ChunkVectors v = s.vectors(idx);
  const float* A = Ainv + idx * kC * kC;
  const float* P = s.P + idx * kC * kC;
  const float* KKD = s.KKD + idx * kC * kC;
  const float* S = s.states + idx * KV;
  const float* dS = s.dstates + idx * KV;  // the gradient of the state after this chunk
  const float* U = s.U + idx * kC * Dv;
  const float* dU = s.dU + idx * kC * Dv;
  float* dX = s.local + idx * DeltaScratch::local_floats(a);
  float* dQc = dX + kC * Dv;
  float* dKd = dQc + kC * Dk;
  float* dR2 = dKd + kC * Dk;
  float* dP = dR2 + kC * Dk;
  float* dA = dP + kC * kC;
  const auto dO = [&](int64_t r, int64_t e) {
    return r < rows ? dout[((b * a.T + t0 + r) * a.Hv + j) * Dv + e] : 0.0f;
  };
  const auto Q = [&](int64_t r, int64_t i) { return r < rows ? a.q_row(b, t0 + r, j)[i] * scale : 0.0f; };
  const auto K = [&](int64_t r, int64_t i) { return r < rows ? a.k_row(b, t0 + r, j)[i] : 0.0f; };

  // dX = Ainvᵀ dU, dQc = dO Sᵀ, dP = dO Uᵀ (lower), dKd = U dSᵀ.
  for (int64_t x = threadIdx.x; x < kC * Dv; x += blockDim.x) {
    const int64_t r = x / Dv, e = x % Dv;
    float acc = 0.0f;
    for (int64_t p = r; p < kC; ++p) acc += A[p * kC + r] * dU[p * Dv + e];
    dX[x] = acc;
  }
  for (int64_t x = threadIdx.x; x < kC * Dk; x += blockDim.x) {
    const int64_t r = x / Dk, i = x % Dk;
    float qc = 0.0f, kd = 0.0f;
    for (int64_t e = 0; e < Dv; ++e) {
      qc += dO(r, e) * S[i * Dv + e];
      kd += U[r * Dv + e] * dS[i * Dv + e];
    }
    dQc[x] = qc;
    dKd[x] = kd;
  }
  for (int64_t x = threadIdx.x; x < kC * kC; x += blockDim.x) {
    const int64_t r = x / kC, c = x % kC;
    float acc = 0.0f;
    if (c <= r && r < rows)
      for (int64_t e = 0; e < Dv; ++e) acc += dO(r, e) * U[c * Dv + e];
    dP[x] = acc;
  }
  // γ Σ dS ⊙ S: the start state's decay in c_L.
  __shared__ float reduce[kWarp];
  float part = 0.0f;
  for (int64_t x = threadIdx.x; x < KV; x += blockDim.x) part += dS[x] * S[x];
  const float state_term = *v.gamma * block_sum(part, reduce);  // syncs the block
  __syncthreads();
  // dR2 = −dX Sᵀ, dA = strict_lower(−dX Uᵀ).
  for (int64_t x = threadIdx.x; x < kC * Dk; x += blockDim.x) {
    const int64_t r = x / Dk, i = x % Dk;
    float acc = 0.0f;
    for (int64_t e = 0; e < Dv; ++e) acc -= dX[r * Dv + e] * S[i * Dv + e];
    dR2[x] = acc;
  }
  for (int64_t x = threadIdx.x; x < kC * kC; x += blockDim.x) {
    const int64_t r = x / kC, c = x % kC;
    float acc = 0.0f;
    if (c < r)
      for (int64_t e = 0; e < Dv; ++e) acc -= dX[r * Dv + e] * U[c * Dv + e];
    dA[x] = acc;
  }
  __syncthreads();
  // Per row r: dβ, and dc without the decay-to-end terms' sum; E = dP ⊙ P + β dA ⊙ KKD enters
  // dc as its row sum minus its column sum.
  __shared__ float dc[kC], t_end[kC];
  for (int64_t r = threadIdx.x; r < kC; r += blockDim.x) {
    float qdq = 0.0f, kdr2 = 0.0f, kdkd = 0.0f;
    for (int64_t i = 0; i < Dk; ++i) {
      qdq += dQc[r * Dk + i] * Q(r, i);
      kdr2 += dR2[r * Dk + i] * K(r, i);
      kdkd += dKd[r * Dk + i] * K(r, i);
    }
    float vdx = 0.0f;
    for (int64_t e = 0; e < Dv; ++e)
      vdx += (r < rows ? a.v_row(b, t0 + r, j)[e] : 0.0f) * dX[r * Dv + e];
    float row_E = 0.0f, col_E = 0.0f, da_kkd = 0.0f;
    for (int64_t c = 0; c <= r; ++c) {
      da_kkd += dA[r * kC + c] * KKD[r * kC + c];
      row_E += dP[r * kC + c] * P[r * kC + c] + v.beta[r] * dA[r * kC + c] * KKD[r * kC + c];
    }
    for (int64_t p = r; p < kC; ++p)
      col_E += dP[p * kC + r] * P[p * kC + r] + v.beta[p] * dA[p * kC + r] * KKD[p * kC + r];
    t_end[r] = v.kd[r] * kdkd;
    dc[r] = v.ec[r] * (qdq + v.beta[r] * kdr2) - t_end[r] + row_E - col_E;
    if (r < rows && dbeta != nullptr)
      dbeta[(b * a.T + t0 + r) * a.Hv + j] += vdx + v.ec[r] * kdr2 + da_kkd;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // dc_L gets the decay-to-end terms; dg = reverse cumsum of dc
    float t_sum = 0.0f;
    for (int64_t r = 0; r < kC; ++r) t_sum += t_end[r];
    dc[L] += t_sum + state_term;
    float sum = 0.0f;
    for (int64_t r = kC - 1; r >= 0; --r) {
      sum += dc[r];
      if (r < rows && dg != nullptr) dg[(b * a.T + t0 + r) * a.Hv + j] += sum;
    }
  }
  // M = dP ⊙ D (lower) and Gm = β_r dA ⊙ D (strict), in place.
  for (int64_t x = threadIdx.x; x < kC * kC; x += blockDim.x) {
    const int64_t r = x / kC, c = x % kC;
    const float d = v.decay(r, c);
    dP[x] *= d;
    dA[x] *= v.beta[r] * d;
  }
  __syncthreads();
  // dQ = ec ⊙ dQc + M K; dK = Mᵀ Q + kd ⊙ dKd + β ec ⊙ dR2 + Gm K + Gmᵀ K; dV = β ⊙ dX.
  for (int64_t x = threadIdx.x; x < rows * Dk; x += blockDim.x) {
    const int64_t r = x / Dk, i = x % Dk;
    float dq = v.ec[r] * dQc[x];
    float dk = v.kd[r] * dKd[x] + v.beta[r] * v.ec[r] * dR2[x];
    for (int64_t c = 0; c <= r; ++c) dq += dP[r * kC + c] * K(c, i);
    for (int64_t p = r; p < rows; ++p) dk += dP[p * kC + r] * Q(p, i);
    for (int64_t c = 0; c < r; ++c) dk += dA[r * kC + c] * K(c, i);
    for (int64_t p = r + 1; p < rows; ++p) dk += dA[p * kC + r] * K(p, i);
    const int64_t at = ((b * a.T + t0 + r) * a.Hv + j) * Dk + i;
    s.dq_heads[at] = dq * scale;
    s.dk_heads[at] = dk;
  }
  if (dv != nullptr) {
    for (int64_t x = threadIdx.x; x < rows * Dv; x += blockDim.x) {
      const int64_t r = x / Dv, e = x % Dv;
      dv[(b * a.T + t0 + r) * a.v_ld + j * Dv + e] += v.beta[r] * dX[x];
    }
  }
}

}  // namespace

void local_gradients(const DeltaScratch& s, const float* Ainv, const float* dout, float* dv,
                     float* dbeta, float* dg, const DeltaArgs& a) {
  launch("gated_delta_rule_backward", local_gradients_kernel,
         dim3(static_cast<unsigned>(a.B * a.Hv * a.chunks)), kDeltaThreads, 0, s, Ainv, dout, dv,
         dbeta, dg, a);
}

}  // namespace tessel::cuda
