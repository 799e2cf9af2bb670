// The chunked gated delta rule, forward (Hugging Face's torch_chunk_gated_delta_rule, FLA's
// chunk_gated_delta_rule_fwd): per chunk of 64 rows the in-chunk UT transform (one triangular
// inverse) turns the recurrence into matrix products, and only the state passes from chunk to
// chunk. The chunk's matrix products go through gemm (oneDNN); (batch, key head) sequences run in
// parallel, each thread with its own scratch, sized once.
#include "tessel/kernels/cpu/delta_rule.h"

#include <algorithm>
#include <cmath>

#include "tessel/kernels/cpu/gemm.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

namespace {
constexpr int64_t C = kDeltaChunk;

void grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
}
}  // namespace

void DeltaChunk::reserve(int64_t Dk, int64_t Dv) {
  for (auto* m : {&Q, &K, &Qc, &Kd, &R2, &W}) grow(*m, C * Dk);
  for (auto* m : {&V, &R1, &U0, &U}) grow(*m, C * Dv);
  for (auto* m : {&D, &P, &KKD}) grow(*m, C * C);
  for (auto* m : {&beta, &ec, &kd}) grow(*m, C);
}

void load_chunk(DeltaChunk& ch, const DeltaHead& h, int64_t t0) {
  const int64_t Dk = h.Dk, Dv = h.Dv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dk));
  ch.rows = std::min(C, h.T - t0);
  // c (the within-chunk cumsum of g) and each row's document: the chunk row that began it, or
  // -1 for the document the chunk started in.
  float c[C];
  int64_t first[C];
  float cum = 0.0f;
  int64_t doc = -1;
  for (int64_t r = 0; r < C; ++r) {
    const bool real = r < ch.rows;
    const int64_t t = t0 + r;
    if (real && starts_document(h.key_start, h.b, h.T, t)) doc = r;
    cum += real ? h.g[t * h.Hv] : 0.0f;
    c[r] = cum;
    first[r] = doc;
    ch.beta[r] = real ? h.beta[t * h.Hv] : 0.0f;
    for (int64_t i = 0; i < Dk; ++i) {
      ch.Q[r * Dk + i] = real ? h.q[t * h.qk_ld + i] * scale : 0.0f;
      ch.K[r * Dk + i] = real ? h.k[t * h.qk_ld + i] : 0.0f;
    }
    for (int64_t e = 0; e < Dv; ++e) ch.V[r * Dv + e] = real ? h.v[t * h.v_ld + e] : 0.0f;
  }
  const int64_t L = C - 1;
  ch.gamma = first[L] < 0 ? std::exp(c[L]) : 0.0f;
  for (int64_t r = 0; r < C; ++r) {
    ch.ec[r] = first[r] < 0 ? std::exp(c[r]) : 0.0f;
    ch.kd[r] = first[r] == first[L] ? std::exp(c[L] - c[r]) : 0.0f;
    // Masked to -inf before the exponential (e^{+big} would overflow above the diagonal);
    // exp_approx vectorises and gives exactly 0 there.
    float* D = ch.D.data() + r * C;
#pragma omp simd
    for (int64_t s = 0; s < C; ++s)
      D[s] = exp_approx(s <= r && first[s] == first[r] ? c[r] - c[s] : -INFINITY);
    for (int64_t i = 0; i < Dk; ++i) {
      ch.Qc[r * Dk + i] = ch.ec[r] * ch.Q[r * Dk + i];
      ch.Kd[r * Dk + i] = ch.kd[r] * ch.K[r * Dk + i];
      ch.R2[r * Dk + i] = ch.beta[r] * ch.ec[r] * ch.K[r * Dk + i];
    }
    for (int64_t e = 0; e < Dv; ++e) ch.R1[r * Dv + e] = ch.beta[r] * ch.V[r * Dv + e];
  }
  // P = lower(Q Kᵀ ⊙ D), KKD = strict_lower(K Kᵀ ⊙ D).
  gemm(false, true, C, C, Dk, 1.0f, ch.Q.data(), Dk, ch.K.data(), Dk, 0.0f, ch.P.data(), C);
  gemm(false, true, C, C, Dk, 1.0f, ch.K.data(), Dk, ch.K.data(), Dk, 0.0f, ch.KKD.data(), C);
#pragma omp simd
  for (int64_t i = 0; i < C * C; ++i) {
    ch.P[i] *= ch.D[i];
    ch.KKD[i] *= ch.D[i];
  }
  for (int64_t r = 0; r < C; ++r) ch.KKD[r * C + r] = 0.0f;  // strictly lower
}

void invert_chunk(float* Ainv, const DeltaChunk& ch) {
  // Row r of (I + A)⁻¹ = e_r − Σ_{s<r} A[r, s] · row s, A[r, s] = β_r KKD[r, s].
  for (int64_t r = 0; r < C; ++r) {
    float* row = Ainv + r * C;
    std::fill(row, row + C, 0.0f);
    row[r] = 1.0f;
    for (int64_t s = 0; s < r; ++s) {
      const float a = ch.beta[r] * ch.KKD[r * C + s];
      if (a == 0.0f) continue;
      const float* other = Ainv + s * C;
#pragma omp simd
      for (int64_t p = 0; p <= s; ++p) row[p] -= a * other[p];
    }
  }
}

void chunk_transform(DeltaChunk& ch, const float* Ainv, const float* S, int64_t Dk, int64_t Dv) {
  gemm(false, false, C, Dv, C, 1.0f, Ainv, C, ch.R1.data(), Dv, 0.0f, ch.U0.data(), Dv);
  gemm(false, false, C, Dk, C, 1.0f, Ainv, C, ch.R2.data(), Dk, 0.0f, ch.W.data(), Dk);
  std::copy(ch.U0.begin(), ch.U0.begin() + C * Dv, ch.U.begin());
  gemm(false, false, C, Dv, Dk, -1.0f, ch.W.data(), Dk, S, Dv, 1.0f, ch.U.data(), Dv);
}

void advance_state(float* S, const DeltaChunk& ch, int64_t Dk, int64_t Dv) {
  gemm(true, false, Dk, Dv, C, 1.0f, ch.Kd.data(), Dk, ch.U.data(), Dv, ch.gamma, S, Dv);
}

void gated_delta_rule_forward(float* out, float* final_state, float* Ainv, const float* q,
                              const float* k, const float* v, const float* beta, const float* g,
                              const float* initial_state, const int32_t* key_start, int64_t B,
                              int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                              int64_t qk_ld, int64_t v_ld) {
  const int64_t chunks = delta_rule_chunks(T);
#pragma omp parallel for collapse(2) schedule(static) if (worth_parallel(B * Hv * T * Dk * Dv))
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < Hv; ++j) {
      thread_local DeltaChunk ch;
      thread_local std::vector<float> state, o;
      ch.reserve(Dk, Dv);
      grow(state, Dk * Dv);
      grow(o, C * Dv);
      float* S = state.data();  // (Dk, Dv)
      const float* S0 = initial_state != nullptr ? initial_state + (b * Hv + j) * Dk * Dv : nullptr;
      for (int64_t i = 0; i < Dk * Dv; ++i) S[i] = S0 != nullptr ? S0[i] : 0.0f;
      const DeltaHead h = delta_head(q, k, v, beta, g, key_start, b, j, T, Hk, Hv, Dk, Dv, qk_ld,
                                     v_ld);
      for (int64_t n = 0; n < chunks; ++n) {
        float* A = Ainv + ((b * Hv + j) * chunks + n) * C * C;  // (C, C)
        load_chunk(ch, h, n * C);
        invert_chunk(A, ch);
        chunk_transform(ch, A, S, Dk, Dv);
        // O = Qc S + P U (C, Dv), then its rows inside the sequence to out.
        gemm(false, false, C, Dv, Dk, 1.0f, ch.Qc.data(), Dk, S, Dv, 0.0f, o.data(), Dv);
        gemm(false, false, C, Dv, C, 1.0f, ch.P.data(), C, ch.U.data(), Dv, 1.0f, o.data(), Dv);
        for (int64_t r = 0; r < ch.rows; ++r) {
          std::copy(o.begin() + r * Dv, o.begin() + (r + 1) * Dv,
                    out + ((b * T + n * C + r) * Hv + j) * Dv);
        }
        advance_state(S, ch, Dk, Dv);
      }
      if (final_state != nullptr)
        std::copy(S, S + Dk * Dv, final_state + (b * Hv + j) * Dk * Dv);
    }
  }
}

}  // namespace tessel::cpu
