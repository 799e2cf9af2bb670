// The chunked gated delta rule, backward (§7 of docs/QWEN3_NEXT.md; FLA's chunk_gated_delta_rule_bwd):
// the chunk-start states are recomputed by re-running the forward's state recurrence from the
// saved Ainv (no triangular solve again), then the chunks are swept in reverse carrying dS, the
// gradient of the next chunk's start state. Each (batch, key head) runs in one thread, its r
// value heads in order, so dq and dk sum over them without races and in a fixed order.
//
// Per chunk, with X = R1 − R2 S (so U = Ainv X):
//   dU = Pᵀ dO + Kd dS;  dX = Ainvᵀ dU;  dA = strict_lower(−dX Uᵀ)  (dAinv = dU Xᵀ through the
//   inverse); dS_prev = gamma dS + Qcᵀ dO − Wᵀ dU; and every input through the products that
//   built P, Qc, Kd, R1, R2, A and the decays, the log-decay gradient dc reverse-summed into dg.
#include <algorithm>
#include <cmath>

#include "tessel/kernels/cpu/delta_rule.h"
#include "tessel/kernels/cpu/gemm.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

namespace {
constexpr int64_t C = kDeltaChunk;

void grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
}

// The backward's own scratch for one chunk, sized once per thread.
struct ChunkGrads {
  std::vector<float> dO, dU, dX;          // (C, Dv)
  std::vector<float> dQc, dKd, dR2, dQ, dK;  // (C, Dk)
  std::vector<float> dP, dA;              // (C, C)
  std::vector<float> dS_prev;             // (Dk, Dv)
  void reserve(int64_t Dk, int64_t Dv) {
    for (auto* m : {&dO, &dU, &dX}) grow(*m, C * Dv);
    for (auto* m : {&dQc, &dKd, &dR2, &dQ, &dK}) grow(*m, C * Dk);
    for (auto* m : {&dP, &dA}) grow(*m, C * C);
    grow(dS_prev, Dk * Dv);
  }
};

inline float row_dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// p + n, or nullptr for a gradient not asked for.
inline float* offset(float* p, int64_t n) { return p != nullptr ? p + n : nullptr; }

// One chunk's backward. S is its start state, dS the gradient of the state after it (replaced by
// the gradient of S). Adds into the head's rows of dq, dk, dv, dbeta, dg (t0 the chunk's first).
struct HeadGrads {
  float* dq;     // row t at dq + t·qk_ld (this key head)
  float* dk;
  float* dv;     // row t at dv + t·v_ld (this value head)
  float* dbeta;  // row t at dbeta + t·Hv
  float* dg;
};

void chunk_backward(ChunkGrads& w, float* dS, const DeltaChunk& ch, const float* Ainv,
                    const float* S, const float* dout, const HeadGrads& out, const DeltaHead& h,
                    int64_t t0) {
  const int64_t Dk = h.Dk, Dv = h.Dv, L = C - 1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dk));
  for (int64_t r = 0; r < C; ++r) {
    for (int64_t e = 0; e < Dv; ++e)
      w.dO[r * Dv + e] = r < ch.rows ? dout[((h.b * h.T + t0 + r) * h.Hv) * Dv + e] : 0.0f;
  }
  float* dO = w.dO.data();
  // dU = Pᵀ dO + Kd dS; dX = Ainvᵀ dU.
  gemm(true, false, C, Dv, C, 1.0f, ch.P.data(), C, dO, Dv, 0.0f, w.dU.data(), Dv);
  gemm(false, false, C, Dv, Dk, 1.0f, ch.Kd.data(), Dk, dS, Dv, 1.0f, w.dU.data(), Dv);
  gemm(true, false, C, Dv, C, 1.0f, Ainv, C, w.dU.data(), Dv, 0.0f, w.dX.data(), Dv);
  // dQc = dO Sᵀ, dP = dO Uᵀ, dKd = U dSᵀ, dR2 = −dX Sᵀ, dA = −dX Uᵀ.
  gemm(false, true, C, Dk, Dv, 1.0f, dO, Dv, S, Dv, 0.0f, w.dQc.data(), Dk);
  gemm(false, true, C, C, Dv, 1.0f, dO, Dv, ch.U.data(), Dv, 0.0f, w.dP.data(), C);
  gemm(false, true, C, Dk, Dv, 1.0f, ch.U.data(), Dv, dS, Dv, 0.0f, w.dKd.data(), Dk);
  gemm(false, true, C, Dk, Dv, -1.0f, w.dX.data(), Dv, S, Dv, 0.0f, w.dR2.data(), Dk);
  gemm(false, true, C, C, Dv, -1.0f, w.dX.data(), Dv, ch.U.data(), Dv, 0.0f, w.dA.data(), C);

  // dc, the gradient of the within-chunk cumsum c: the start-state decay first.
  float dc[C] = {};
  dc[L] += ch.gamma * row_dot(dS, S, Dk * Dv);
  // dS_prev = gamma dS + Qcᵀ dO − Wᵀ dU.
  float* dS_prev = w.dS_prev.data();
  for (int64_t i = 0; i < Dk * Dv; ++i) dS_prev[i] = ch.gamma * dS[i];
  gemm(true, false, Dk, Dv, C, 1.0f, ch.Qc.data(), Dk, dO, Dv, 1.0f, dS_prev, Dv);
  gemm(true, false, Dk, Dv, C, -1.0f, ch.W.data(), Dk, w.dU.data(), Dv, 1.0f, dS_prev, Dv);
  std::copy(dS_prev, dS_prev + Dk * Dv, dS);

  float* dP = w.dP.data();
  float* dA = w.dA.data();
  for (int64_t r = 0; r < C; ++r) {
    const float* K_r = ch.K.data() + r * Dk;
    // From Qc = ec ⊙ Q, R2 = β ec ⊙ K (ec_r = e^{c_r}) and Kd = kd ⊙ K (kd_r = e^{c_L − c_r}).
    dc[r] += ch.ec[r] * (row_dot(w.dQc.data() + r * Dk, ch.Q.data() + r * Dk, Dk) +
                         ch.beta[r] * row_dot(w.dR2.data() + r * Dk, K_r, Dk));
    const float t = ch.kd[r] * row_dot(w.dKd.data() + r * Dk, K_r, Dk);
    dc[r] -= t;
    dc[L] += t;
    // dβ from R1 = β ⊙ V, R2 and A = β_r KKD.
    float dbeta = row_dot(ch.V.data() + r * Dv, w.dX.data() + r * Dv, Dv) +
                  ch.ec[r] * row_dot(K_r, w.dR2.data() + r * Dk, Dk);
    for (int64_t s = 0; s < r; ++s) dbeta += dA[r * C + s] * ch.KKD[r * C + s];
    if (r < ch.rows && out.dbeta != nullptr) out.dbeta[(t0 + r) * h.Hv] += dbeta;
    // From D = e^{c_r − c_s}: E = dP ⊙ P + β_r dA ⊙ KKD adds to dc_r and takes from dc_s. Then
    // the products' own gradients: M = dP ⊙ D (lower) for P, Gm = β_r dA ⊙ D (strict) for A.
    for (int64_t s = 0; s <= r; ++s) {
      const float Dsr = ch.D[r * C + s];
      const float a = s < r ? dA[r * C + s] : 0.0f;
      const float E = dP[r * C + s] * ch.P[r * C + s] + ch.beta[r] * a * ch.KKD[r * C + s];
      dc[r] += E;
      dc[s] -= E;
      dP[r * C + s] *= Dsr;
      dA[r * C + s] = ch.beta[r] * a * Dsr;
    }
    for (int64_t s = r + 1; s < C; ++s) dP[r * C + s] = dA[r * C + s] = 0.0f;
  }
  // dQ = ec ⊙ dQc + M K; dK = Mᵀ Q + kd ⊙ dKd + β ec ⊙ dR2 + Gm K + Gmᵀ K.
  for (int64_t r = 0; r < C; ++r) {
    for (int64_t i = 0; i < Dk; ++i) {
      w.dQ[r * Dk + i] = ch.ec[r] * w.dQc[r * Dk + i];
      w.dK[r * Dk + i] =
          ch.kd[r] * w.dKd[r * Dk + i] + ch.beta[r] * ch.ec[r] * w.dR2[r * Dk + i];
    }
  }
  gemm(false, false, C, Dk, C, 1.0f, dP, C, ch.K.data(), Dk, 1.0f, w.dQ.data(), Dk);
  gemm(true, false, C, Dk, C, 1.0f, dP, C, ch.Q.data(), Dk, 1.0f, w.dK.data(), Dk);
  gemm(false, false, C, Dk, C, 1.0f, dA, C, ch.K.data(), Dk, 1.0f, w.dK.data(), Dk);
  gemm(true, false, C, Dk, C, 1.0f, dA, C, ch.K.data(), Dk, 1.0f, w.dK.data(), Dk);

  // c_r = Σ_{p≤r} g_p: dg_p = Σ_{r≥p} dc_r.
  float dg_sum = 0.0f;
  for (int64_t r = C - 1; r >= 0; --r) {
    dg_sum += dc[r];
    if (r >= ch.rows) continue;
    const int64_t t = t0 + r;
    if (out.dg != nullptr) out.dg[t * h.Hv] += dg_sum;
    for (int64_t i = 0; i < Dk; ++i) {
      if (out.dq != nullptr) out.dq[t * h.qk_ld + i] += scale * w.dQ[r * Dk + i];
      if (out.dk != nullptr) out.dk[t * h.qk_ld + i] += w.dK[r * Dk + i];
    }
    if (out.dv == nullptr) continue;
    for (int64_t e = 0; e < Dv; ++e) out.dv[t * h.v_ld + e] += ch.beta[r] * w.dX[r * Dv + e];
  }
}

}  // namespace

void gated_delta_rule_backward(float* dq, float* dk, float* dv, float* dbeta, float* dg,
                               float* dinitial_state, const float* dout, const float* dfinal_state,
                               const float* Ainv, const float* q, const float* k, const float* v,
                               const float* beta, const float* g, const float* initial_state,
                               const int32_t* key_start, int64_t B, int64_t T, int64_t Hk,
                               int64_t Hv, int64_t Dk, int64_t Dv, int64_t qk_ld, int64_t v_ld) {
  const int64_t chunks = delta_rule_chunks(T), r = Hv / Hk;
#pragma omp parallel for collapse(2) schedule(static) if (worth_parallel(B * Hv * T * Dk * Dv))
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t kh = 0; kh < Hk; ++kh) {
      thread_local DeltaChunk ch;
      thread_local ChunkGrads w;
      thread_local std::vector<float> states, state_grad;
      ch.reserve(Dk, Dv);
      w.reserve(Dk, Dv);
      grow(states, chunks * Dk * Dv);
      grow(state_grad, Dk * Dv);
      for (int64_t j = kh * r; j < (kh + 1) * r; ++j) {
        const DeltaHead h = delta_head(q, k, v, beta, g, key_start, b, j, T, Hk, Hv, Dk, Dv,
                                       qk_ld, v_ld);
        const float* A = Ainv + (b * Hv + j) * chunks * C * C;  // (chunks, C, C)
        // The chunk-start states, recomputed: states[n] (Dk, Dv) enters chunk n.
        float* S = states.data();
        const float* S0 = initial_state != nullptr ? initial_state + (b * Hv + j) * Dk * Dv : nullptr;
        for (int64_t i = 0; i < Dk * Dv; ++i) S[i] = S0 != nullptr ? S0[i] : 0.0f;
        for (int64_t n = 0; n + 1 < chunks; ++n) {
          load_chunk(ch, h, n * C);
          chunk_transform(ch, A + n * C * C, S + n * Dk * Dv, Dk, Dv);
          std::copy(S + n * Dk * Dv, S + (n + 1) * Dk * Dv, S + (n + 1) * Dk * Dv);
          advance_state(S + (n + 1) * Dk * Dv, ch, Dk, Dv);
        }
        float* dS = state_grad.data();
        const float* dS_last =
            dfinal_state != nullptr ? dfinal_state + (b * Hv + j) * Dk * Dv : nullptr;
        for (int64_t i = 0; i < Dk * Dv; ++i) dS[i] = dS_last != nullptr ? dS_last[i] : 0.0f;
        const HeadGrads grads{offset(dq, b * T * qk_ld + kh * Dk), offset(dk, b * T * qk_ld + kh * Dk),
                              offset(dv, b * T * v_ld + j * Dv), offset(dbeta, b * T * Hv + j),
                              offset(dg, b * T * Hv + j)};
        for (int64_t n = chunks - 1; n >= 0; --n) {
          load_chunk(ch, h, n * C);
          chunk_transform(ch, A + n * C * C, S + n * Dk * Dv, Dk, Dv);
          chunk_backward(w, dS, ch, A + n * C * C, S + n * Dk * Dv, dout + j * Dv, grads, h, n * C);
        }
        if (dinitial_state != nullptr) {
          float* dS0 = dinitial_state + (b * Hv + j) * Dk * Dv;
          for (int64_t i = 0; i < Dk * Dv; ++i) dS0[i] += dS[i];
        }
      }
    }
  }
}

}  // namespace tessel::cpu
