// The chunked gated delta rule on the GPU, forward and backward, the same math as the CPU
// reference (cpu/delta_rule.h names every matrix). The straightforward version, fp32 on the CUDA
// cores, in the phases FLA splits it into:
//   prepare (per chunk, in parallel): cumsum c, document masks, P, KKD, Ainv (by forward
//     substitution; the backward reads the saved one), U0 = Ainv R1, W = Ainv R2;
//   recurrence (per sequence, one block, chunks in order): U = U0 − W S, O = Qc S + P U,
//     S ← gamma S + Kdᵀ U — the backward reruns it to store every chunk's start state and U;
//   state gradient (per sequence, chunks in reverse): dU = Pᵀ dO + Kd dS, dS ← gamma dS + Qcᵀ dO
//     − Wᵀ dU, each chunk's dS and dU stored;
//   local gradients (per chunk, in parallel): everything else (delta_rule_backward.cu);
// then dq, dk summed over the value heads of each key head in a fixed order. Scratch is device
// memory sized once to the largest call (CudaScratch).
#include "tessel/kernels/cuda/delta_rule.cuh"

namespace tessel::cuda {

namespace {

// Prepare one chunk: block (b·Hv + j)·chunks + n, kDeltaThreads threads. Ainv_out (forward):
// the inverse is computed into it; else the saved Ainv is read.
__global__ void prepare_kernel(DeltaScratch s, const float* Ainv, float* Ainv_out, DeltaArgs a) {
  const int64_t idx = blockIdx.x, n = idx % a.chunks, bj = idx / a.chunks;
  const int64_t b = bj / a.Hv, j = bj % a.Hv, t0 = n * kC;
  const int64_t rows = min(kC, a.T - t0);
  __shared__ float cum[kC], beta[kC], ec[kC];
  __shared__ int first[kC];
  ChunkVectors v = s.vectors(idx);
  if (threadIdx.x == 0) {
    float c = 0.0f;
    int doc = -1;
    for (int r = 0; r < kC; ++r) {
      const bool real = r < rows;
      if (real && starts_document(a.key_start, b, a.T, t0 + r)) doc = r;
      c += real ? a.g[(b * a.T + t0 + r) * a.Hv + j] : 0.0f;
      cum[r] = c;
      first[r] = doc;
      beta[r] = real ? a.beta[(b * a.T + t0 + r) * a.Hv + j] : 0.0f;
    }
  }
  __syncthreads();
  const int L = kC - 1;
  for (int r = threadIdx.x; r < kC; r += blockDim.x) {
    ec[r] = first[r] < 0 ? expf(cum[r]) : 0.0f;
    v.cum[r] = cum[r];
    v.first[r] = static_cast<float>(first[r]);
    v.beta[r] = beta[r];
    v.ec[r] = ec[r];
    v.kd[r] = first[r] == first[L] ? expf(cum[L] - cum[r]) : 0.0f;
  }
  if (threadIdx.x == 0) *v.gamma = first[L] < 0 ? expf(cum[L]) : 0.0f;
  __syncthreads();
  // P = lower(Q Kᵀ ⊙ D) with Q = q / sqrt(Dk); KKD = strict_lower(K Kᵀ ⊙ D).
  float* P = s.P + idx * kC * kC;
  float* KKD = s.KKD + idx * kC * kC;
  const float scale = rsqrtf(static_cast<float>(a.Dk));
  for (int64_t x = threadIdx.x; x < kC * kC; x += blockDim.x) {
    const int r = static_cast<int>(x / kC), c = static_cast<int>(x % kC);
    float p = 0.0f, kk = 0.0f;
    if (c <= r && r < rows && first[c] == first[r]) {
      const float* qr = a.q_row(b, t0 + r, j);
      const float* kr = a.k_row(b, t0 + r, j);
      const float* kc = a.k_row(b, t0 + c, j);
      for (int64_t i = 0; i < a.Dk; ++i) {
        p += qr[i] * kc[i];
        kk += kr[i] * kc[i];
      }
      const float decay = expf(cum[r] - cum[c]);
      p *= scale * decay;
      kk = c < r ? kk * decay : 0.0f;
    }
    P[x] = p;
    KKD[x] = kk;
  }
  __syncthreads();
  // Ainv = (I + diag(β) KKD)⁻¹ row by row: row r = e_r − Σ_{c<r} β_r KKD[r, c] · row c.
  const float* A = (Ainv_out != nullptr ? Ainv_out : Ainv) + idx * kC * kC;
  if (Ainv_out != nullptr) {
    float* inverse = Ainv_out + idx * kC * kC;
    for (int r = 0; r < kC; ++r) {
      for (int p = threadIdx.x; p < kC; p += blockDim.x) {
        float x = p == r ? 1.0f : 0.0f;
        for (int c = p; c < r; ++c) x -= beta[r] * KKD[r * kC + c] * inverse[c * kC + p];
        inverse[r * kC + p] = p <= r ? x : 0.0f;
      }
      __syncthreads();
    }
  }
  // U0 = Ainv (β ⊙ V), W = Ainv (β ec ⊙ K).
  float* U0 = s.U0 + idx * kC * a.Dv;
  float* W = s.W + idx * kC * a.Dk;
  for (int64_t x = threadIdx.x; x < kC * a.Dv; x += blockDim.x) {
    const int r = static_cast<int>(x / a.Dv);
    const int64_t e = x % a.Dv;
    float u = 0.0f;
    for (int c = 0; c <= r && c < rows; ++c) u += A[r * kC + c] * beta[c] * a.v_row(b, t0 + c, j)[e];
    U0[x] = u;
  }
  for (int64_t x = threadIdx.x; x < kC * a.Dk; x += blockDim.x) {
    const int r = static_cast<int>(x / a.Dk);
    const int64_t i = x % a.Dk;
    float w = 0.0f;
    for (int c = 0; c <= r && c < rows; ++c)
      w += A[r * kC + c] * beta[c] * ec[c] * a.k_row(b, t0 + c, j)[i];
    W[x] = w;
  }
}

// The state recurrence of one sequence: block b·Hv + j. out (forward) gets the chunk outputs;
// states (backward) every chunk's start state; U per chunk at U + n·u_chunk_stride (0: one
// buffer reused, the forward's).
__global__ void recurrence_kernel(DeltaScratch s, float* out, float* final_state, float* states,
                                  int64_t u_chunk_stride, const float* initial_state,
                                  DeltaArgs a) {
  const int64_t bj = blockIdx.x, b = bj / a.Hv, j = bj % a.Hv, KV = a.Dk * a.Dv;
  float* S = s.state + bj * KV;
  const float scale = rsqrtf(static_cast<float>(a.Dk));
  for (int64_t x = threadIdx.x; x < KV; x += blockDim.x)
    S[x] = initial_state != nullptr ? initial_state[bj * KV + x] : 0.0f;
  __syncthreads();
  for (int64_t n = 0; n < a.chunks; ++n) {
    const int64_t idx = bj * a.chunks + n, t0 = n * kC, rows = min(kC, a.T - t0);
    const ChunkVectors v = s.vectors(idx);
    const float* P = s.P + idx * kC * kC;
    const float* W = s.W + idx * kC * a.Dk;
    const float* U0 = s.U0 + idx * kC * a.Dv;
    float* U = s.U + bj * (u_chunk_stride == 0 ? kC * a.Dv : a.chunks * u_chunk_stride) +
               n * u_chunk_stride;
    for (int64_t x = threadIdx.x; x < kC * a.Dv; x += blockDim.x) {  // U = U0 − W S
      const int64_t r = x / a.Dv, e = x % a.Dv;
      float u = U0[x];
      for (int64_t i = 0; i < a.Dk; ++i) u -= W[r * a.Dk + i] * S[i * a.Dv + e];
      U[x] = u;
    }
    if (states != nullptr)
      for (int64_t x = threadIdx.x; x < KV; x += blockDim.x) states[idx * KV + x] = S[x];
    __syncthreads();
    if (out != nullptr) {  // O = Qc S + P U
      for (int64_t x = threadIdx.x; x < rows * a.Dv; x += blockDim.x) {
        const int64_t r = x / a.Dv, e = x % a.Dv;
        const float* qr = a.q_row(b, t0 + r, j);
        float o = 0.0f;
        for (int64_t i = 0; i < a.Dk; ++i) o += qr[i] * S[i * a.Dv + e];
        o *= v.ec[r] * scale;
        for (int64_t c = 0; c <= r; ++c) o += P[r * kC + c] * U[c * a.Dv + e];
        out[((b * a.T + t0 + r) * a.Hv + j) * a.Dv + e] = o;
      }
      __syncthreads();
    }
    const float gamma = *v.gamma;
    for (int64_t x = threadIdx.x; x < KV; x += blockDim.x) {  // S ← gamma S + Kdᵀ U
      const int64_t i = x / a.Dv, e = x % a.Dv;
      float acc = gamma * S[x];
      for (int64_t r = 0; r < rows; ++r) acc += v.kd[r] * a.k_row(b, t0 + r, j)[i] * U[r * a.Dv + e];
      S[x] = acc;
    }
    __syncthreads();
  }
  if (final_state != nullptr)
    for (int64_t x = threadIdx.x; x < KV; x += blockDim.x) final_state[bj * KV + x] = S[x];
}

// The reverse sweep of one sequence: block b·Hv + j. Stores dS_after (the gradient of the state
// after chunk n) and dU per chunk; adds the gradient of the initial state.
__global__ void state_gradient_kernel(DeltaScratch s, float* dinitial_state, const float* dout,
                                      const float* dfinal_state, DeltaArgs a) {
  const int64_t bj = blockIdx.x, b = bj / a.Hv, j = bj % a.Hv, KV = a.Dk * a.Dv;
  float* dS = s.state + bj * KV;
  const float scale = rsqrtf(static_cast<float>(a.Dk));
  for (int64_t x = threadIdx.x; x < KV; x += blockDim.x)
    dS[x] = dfinal_state != nullptr ? dfinal_state[bj * KV + x] : 0.0f;
  __syncthreads();
  for (int64_t n = a.chunks - 1; n >= 0; --n) {
    const int64_t idx = bj * a.chunks + n, t0 = n * kC, rows = min(kC, a.T - t0);
    const ChunkVectors v = s.vectors(idx);
    const float* P = s.P + idx * kC * kC;
    const float* W = s.W + idx * kC * a.Dk;
    float* dU = s.dU + idx * kC * a.Dv;
    for (int64_t x = threadIdx.x; x < KV; x += blockDim.x) s.dstates[idx * KV + x] = dS[x];
    for (int64_t x = threadIdx.x; x < kC * a.Dv; x += blockDim.x) {  // dU = Pᵀ dO + Kd dS
      const int64_t c = x / a.Dv, e = x % a.Dv;
      float acc = 0.0f;
      for (int64_t r = c; r < rows; ++r)
        acc += P[r * kC + c] * dout[((b * a.T + t0 + r) * a.Hv + j) * a.Dv + e];
      if (c < rows) {
        const float* kc = a.k_row(b, t0 + c, j);
        float kdS = 0.0f;
        for (int64_t i = 0; i < a.Dk; ++i) kdS += kc[i] * dS[i * a.Dv + e];
        acc += v.kd[c] * kdS;
      }
      dU[x] = acc;
    }
    __syncthreads();
    const float gamma = *v.gamma;
    for (int64_t x = threadIdx.x; x < KV; x += blockDim.x) {  // dS ← gamma dS + Qcᵀ dO − Wᵀ dU
      const int64_t i = x / a.Dv, e = x % a.Dv;
      float acc = gamma * dS[x];
      for (int64_t r = 0; r < rows; ++r)
        acc += v.ec[r] * scale * a.q_row(b, t0 + r, j)[i] *
               dout[((b * a.T + t0 + r) * a.Hv + j) * a.Dv + e];
      for (int64_t r = 0; r < kC; ++r) acc -= W[r * a.Dk + i] * dU[r * a.Dv + e];
      dS[x] = acc;
    }
    __syncthreads();
  }
  if (dinitial_state != nullptr)
    for (int64_t x = threadIdx.x; x < KV; x += blockDim.x) dinitial_state[bj * KV + x] += dS[x];
}

// dq, dk (b, t, key head h) += Σ over h's value heads of the per-value-head rows, in order.
__global__ void sum_value_heads_kernel(float* dq, float* dk, const float* dq_heads,
                                       const float* dk_heads, DeltaArgs a) {
  const int64_t r = a.Hv / a.Hk;
  TESSEL_GRID_LOOP(x, a.B * a.T * a.Hk * a.Dk) {
    const int64_t i = x % a.Dk, h = x / a.Dk % a.Hk, bt = x / (a.Dk * a.Hk);
    float sq = 0.0f, sk = 0.0f;
    for (int64_t j = h * r; j < (h + 1) * r; ++j) {
      sq += dq_heads[(bt * a.Hv + j) * a.Dk + i];
      sk += dk_heads[(bt * a.Hv + j) * a.Dk + i];
    }
    if (dq != nullptr) dq[bt * a.qk_ld + h * a.Dk + i] += sq;
    if (dk != nullptr) dk[bt * a.qk_ld + h * a.Dk + i] += sk;
  }
}

DeltaScratch scratch(DeltaScratchSpace& space, const DeltaArgs& a, bool backward) {
  const int64_t blocks = a.B * a.Hv * a.chunks, heads = a.B * a.Hv, KV = a.Dk * a.Dv;
  DeltaScratch s;
  s.P = space.P.reserve<float>(blocks * kC * kC);
  s.KKD = space.KKD.reserve<float>(blocks * kC * kC);
  s.W = space.W.reserve<float>(blocks * kC * a.Dk);
  s.U0 = space.U0.reserve<float>(blocks * kC * a.Dv);
  s.vector_data = space.vectors.reserve<float>(blocks * ChunkVectors::kFloats);
  s.state = space.state.reserve<float>(heads * KV);
  s.U = space.U.reserve<float>(backward ? blocks * kC * a.Dv : heads * kC * a.Dv);
  if (backward) {
    s.states = space.states.reserve<float>(blocks * KV);
    s.dstates = space.dstates.reserve<float>(blocks * KV);
    s.dU = space.dU.reserve<float>(blocks * kC * a.Dv);
    s.local = space.local.reserve<float>(blocks * DeltaScratch::local_floats(a));
    s.dq_heads = space.dq_heads.reserve<float>(a.B * a.T * a.Hv * a.Dk);
    s.dk_heads = space.dk_heads.reserve<float>(a.B * a.T * a.Hv * a.Dk);
  }
  return s;
}

DeltaScratchSpace forward_space, backward_space;

}  // namespace

void gated_delta_rule_forward(float* out, float* final_state, float* Ainv, const float* q,
                              const float* k, const float* v, const float* beta, const float* g,
                              const float* initial_state, const int32_t* key_start, int64_t B,
                              int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                              int64_t qk_ld, int64_t v_ld) {
  const DeltaArgs a{q, k, v, beta, g, key_start, B, T, Hk, Hv, Dk, Dv, qk_ld, v_ld,
                    delta_rule_chunks(T)};
  if (B * Hv * T == 0) return;
  const DeltaScratch s = scratch(forward_space, a, false);
  launch("gated_delta_rule_forward", prepare_kernel, dim3(static_cast<unsigned>(B * Hv * a.chunks)),
         kDeltaThreads, 0, s, static_cast<const float*>(nullptr), Ainv, a);
  launch("gated_delta_rule_forward", recurrence_kernel, dim3(static_cast<unsigned>(B * Hv)),
         kDeltaThreads, 0, s, out, final_state, static_cast<float*>(nullptr), int64_t{0},
         initial_state, a);
}

void gated_delta_rule_backward(float* dq, float* dk, float* dv, float* dbeta, float* dg,
                               float* dinitial_state, const float* dout, const float* dfinal_state,
                               const float* Ainv, const float* q, const float* k, const float* v,
                               const float* beta, const float* g, const float* initial_state,
                               const int32_t* key_start, int64_t B, int64_t T, int64_t Hk,
                               int64_t Hv, int64_t Dk, int64_t Dv, int64_t qk_ld, int64_t v_ld) {
  const DeltaArgs a{q, k, v, beta, g, key_start, B, T, Hk, Hv, Dk, Dv, qk_ld, v_ld,
                    delta_rule_chunks(T)};
  if (B * Hv * T == 0) return;
  DeltaScratch s = scratch(backward_space, a, true);
  const dim3 chunk_grid(static_cast<unsigned>(B * Hv * a.chunks));
  const dim3 head_grid(static_cast<unsigned>(B * Hv));
  launch("gated_delta_rule_backward", prepare_kernel, chunk_grid, kDeltaThreads, 0, s, Ainv,
         static_cast<float*>(nullptr), a);
  launch("gated_delta_rule_backward", recurrence_kernel, head_grid, kDeltaThreads, 0, s,
         static_cast<float*>(nullptr), static_cast<float*>(nullptr), s.states, kC * Dv,
         initial_state, a);
  launch("gated_delta_rule_backward", state_gradient_kernel, head_grid, kDeltaThreads, 0, s,
         dinitial_state, dout, dfinal_state, a);
  local_gradients(s, Ainv, dout, dv, dbeta, dg, a);
  if (dq != nullptr || dk != nullptr)
    launch_n("gated_delta_rule_backward", sum_value_heads_kernel, B * T * Hk * Dk, dq, dk,
             s.dq_heads, s.dk_heads, a);
}

}  // namespace tessel::cuda
