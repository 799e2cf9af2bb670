// The chunked gated delta rule's pieces shared by its forward (delta_rule.cpp) and backward
// (delta_rule_backward.cpp): one chunk of kDeltaChunk rows of one (batch item, value head)
// sequence, loaded and prepared as §3.1 of docs/QWEN3_NEXT.md writes it. Matrices are row-major,
// kDeltaChunk rows; rows past the sequence's end are zero (β = 0, g = 0 padding).
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/packed_documents.h"

namespace tessel::cpu {

// Where one (batch item b, value head j) sequence lives in the kernel's arguments.
struct DeltaHead {
  const float* q;     // row t at q + t·qk_ld, this head's Dk values (key head j / r)
  const float* k;     // likewise
  const float* v;     // row t at v + t·v_ld, Dv values
  const float* beta;  // row t at beta + t·Hv
  const float* g;     // likewise
  const int32_t* key_start;  // the kernel's (B, T), or nullptr
  int64_t b, T, Hv, Dk, Dv, qk_ld, v_ld;
};

// The chunk as the forward and backward read it (C = kDeltaChunk, r, s rows of the chunk, L = C−1
// its last row). Within-chunk log decay c_r = Σ_{p≤r} g_p. With packed documents, a row that
// begins a document cuts the chunk: rows after it see neither the chunk's start state nor
// earlier rows. So
//   ec_r  = e^{c_r} if row r sees the start state, else 0;
//   kd_s  = e^{c_L − c_s} if row s is in the last row's document, else 0;
//   gamma = e^{c_L} if the last row sees the start state, else 0;
//   D[r, s] = e^{c_r − c_s} for s ≤ r in one document, else 0 (masked before exp).
struct DeltaChunk {
  int64_t rows = 0;  // rows inside the sequence (the rest is padding)
  float gamma = 0;
  std::vector<float> Q;       // (C, Dk), q · Dk^-½
  std::vector<float> K;       // (C, Dk)
  std::vector<float> V;       // (C, Dv)
  std::vector<float> beta;    // (C)
  std::vector<float> ec, kd;  // (C) each
  std::vector<float> D;       // (C, C)
  std::vector<float> P;       // (C, C) lower(Q Kᵀ ⊙ D), diagonal included
  std::vector<float> KKD;     // (C, C) strict_lower(K Kᵀ ⊙ D)
  std::vector<float> Qc;      // (C, Dk) ec ⊙ Q
  std::vector<float> Kd;      // (C, Dk) kd ⊙ K
  std::vector<float> R1;      // (C, Dv) β ⊙ V
  std::vector<float> R2;      // (C, Dk) β ec ⊙ K
  std::vector<float> U0;      // (C, Dv) Ainv R1
  std::vector<float> W;       // (C, Dk) Ainv R2 (Hugging Face's k_cumdecay)
  std::vector<float> U;       // (C, Dv) U0 − W S: the u_t of the recurrence (HF's v_new)

  // Grows the buffers to Dk, Dv (never shrinks): no allocation once the sizes have been seen.
  void reserve(int64_t Dk, int64_t Dv);
};

// Loads the chunk of rows [t0, t0 + C) and computes everything above but U0, W, U.
void load_chunk(DeltaChunk& ch, const DeltaHead& h, int64_t t0);
// Ainv (C, C) = (I + diag(β) KKD)⁻¹, unit lower triangular, by forward substitution.
void invert_chunk(float* Ainv, const DeltaChunk& ch);
// U0 = Ainv R1, W = Ainv R2, then U = U0 − W S for the chunk's start state S (Dk, Dv).
void chunk_transform(DeltaChunk& ch, const float* Ainv, const float* S, int64_t Dk, int64_t Dv);
// The state after the chunk: S (Dk, Dv) ← gamma · S + Kdᵀ U.
void advance_state(float* S, const DeltaChunk& ch, int64_t Dk, int64_t Dv);

// The sequence of (b, value head j) as DeltaHead.
inline DeltaHead delta_head(const float* q, const float* k, const float* v, const float* beta,
                            const float* g, const int32_t* key_start, int64_t b, int64_t j,
                            int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                            int64_t qk_ld, int64_t v_ld) {
  const int64_t h = j / (Hv / Hk);
  return {q + b * T * qk_ld + h * Dk,
          k + b * T * qk_ld + h * Dk,
          v + b * T * v_ld + j * Dv,
          beta + b * T * Hv + j,
          g + b * T * Hv + j,
          key_start,
          b, T, Hv, Dk, Dv, qk_ld, v_ld};
}

}  // namespace tessel::cpu
