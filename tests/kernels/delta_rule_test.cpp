// Kernel cases: the chunked gated delta rule (forward, hand-written backward) against its
// token-by-token recurrence in double and finite differences of it, and the decoding step. The
// shapes cover 3+ chunks with padding (T not a multiple of 64), r = Hv/Hk > 1, an initial state,
// a non-zero final-state gradient, q/k/v read from one [q | k | v] buffer as the conv leaves it,
// and packed documents (one starting exactly at a chunk boundary, one a single row long).
#include "kernels/gated_delta_reference.h"
#include "kernels/harness.h"

namespace tessel::testing {
namespace {

struct DeltaInputs {
  gdn_ref::DeltaShape d;
  Floats qkv, beta, g, initial;
  Ints key_start;  // empty: not packed
};

DeltaInputs delta_inputs(int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                         bool packed, uint64_t stream) {
  const int64_t ld = 2 * Hk * Dk + Hv * Dv;
  DeltaInputs in{{B, T, Hk, Hv, Dk, Dv, ld, 0, Hk * Dk, 2 * Hk * Dk}, {}, {}, {}, {}, {}};
  // q, k of norm about 1 (the model l2-normalises them), β in (0, 1), g a mild decay (≤ 0).
  in.qkv = random_floats(B * T * ld, stream, 1.0f / std::sqrt(static_cast<float>(Dk)));
  in.beta = random_floats(B * T * Hv, stream + 1);
  for (float& x : in.beta) x = 1.0f / (1.0f + std::exp(-x));
  in.g = random_floats(B * T * Hv, stream + 2, 0.03f, -0.06f);
  in.initial = random_floats(B * Hv * Dk * Dv, stream + 3, 0.5f);
  if (packed) {  // the last sequence: documents from rows 0, 40, 64, 100 and 101
    in.key_start.assign(B * T, 0);
    for (int64_t t = 0; t < T; ++t) {
      int32_t start = 0;
      for (int32_t s : {40, 64, 100, 101})
        if (t >= s) start = s;
      in.key_start[(B - 1) * T + t] = start;
    }
  }
  return in;
}

Vec reference_of(const DeltaInputs& in, const std::vector<Vec>& x) {
  return gdn_ref::delta_rule(in.d, x[0], x[1], x[2], x[3], in.key_start);
}

void delta_rule_case(const Kernels& k, int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t Dk,
                     int64_t Dv, bool packed, bool gradients) {
  const DeltaInputs in = delta_inputs(B, T, Hk, Hv, Dk, Dv, packed, 100);
  const gdn_ref::DeltaShape& d = in.d;
  const FloatBuffer qkv(k, in.qkv), beta(k, in.beta), g(k, in.g), initial(k, in.initial);
  const IntBuffer key_start(k, packed ? in.key_start : Ints{0});
  const int32_t* ks = packed ? key_start.data() : nullptr;
  const int64_t n_out = B * T * Hv * Dv, n_state = B * Hv * Dk * Dv;
  FloatBuffer out(k, n_out, NAN), final_state(k, n_state, NAN);
  FloatBuffer Ainv(k, B * Hv * delta_rule_chunks(T) * kDeltaChunk * kDeltaChunk);
  k.gated_delta_rule_forward(out.data(), final_state.data(), Ainv.data(), qkv.data(),
                             qkv.data() + d.k_at, qkv.data() + d.v_at, beta.data(), g.data(),
                             initial.data(), ks, B, T, Hk, Hv, Dk, Dv, d.ld, d.ld);
  const Vec want = reference_of(in, {to_double(in.qkv), to_double(in.beta), to_double(in.g),
                                     to_double(in.initial)});
  Floats got = out.host();
  for (float x : final_state.host()) got.push_back(x);
  EXPECT_LT(relative_error(got, want), kForwardTolerance);
  if (!gradients) return;

  const Floats w = random_floats(n_out + n_state, 110);
  const FloatBuffer dout(k, Floats(w.begin(), w.begin() + n_out)),
      dfinal(k, Floats(w.begin() + n_out, w.end()));
  check_backward(
      k, [&](const std::vector<Vec>& x) { return reference_of(in, x); },
      {in.qkv, in.beta, in.g, in.initial}, to_double(w), [&](const std::vector<float*>& grad) {
        float* dqkv = grad[0];
        k.gated_delta_rule_backward(dqkv, dqkv != nullptr ? dqkv + d.k_at : nullptr,
                                    dqkv != nullptr ? dqkv + d.v_at : nullptr, grad[1], grad[2],
                                    grad[3], dout.data(), dfinal.data(), Ainv.data(), qkv.data(),
                                    qkv.data() + d.k_at, qkv.data() + d.v_at, beta.data(),
                                    g.data(), initial.data(), ks, B, T, Hk, Hv, Dk, Dv, d.ld,
                                    d.ld);
      });
}

// Small heads so that finite differences over every input stay quick; 150 rows = 3 chunks.
void delta_rule(const Kernels& k) { delta_rule_case(k, 2, 150, 1, 2, 4, 3, false, true); }
void delta_rule_packed(const Kernels& k) { delta_rule_case(k, 2, 150, 1, 2, 4, 3, true, true); }
// Wider heads (the products' real shapes), forward only: 4 chunks, r = 2.
void delta_rule_wide(const Kernels& k) { delta_rule_case(k, 1, 200, 2, 4, 32, 24, true, false); }

// The chunked form's algebra (document cuts, padding, the inverse) equals the recurrence in
// double, to rounding: checked on the references alone, independently of float kernels.
TEST(GatedDeltaReference, ChunkedFormEqualsRecurrence) {
  for (const bool packed : {false, true}) {
    const DeltaInputs in = delta_inputs(2, 150, 2, 4, 8, 6, packed, 130);
    const std::vector<Vec> x = {to_double(in.qkv), to_double(in.beta), to_double(in.g),
                                to_double(in.initial)};
    const Vec recurrent = reference_of(in, x);
    const Vec chunked = gdn_ref::chunked_delta_rule(in.d, x[0], x[1], x[2], x[3], in.key_start,
                                                    kDeltaChunk);
    double err = 0, scale = 0;
    for (size_t i = 0; i < recurrent.size(); ++i) {
      err = std::max(err, std::abs(chunked[i] - recurrent[i]));
      scale = std::max(scale, std::abs(recurrent[i]));
    }
    EXPECT_LT(err / scale, 1e-12) << (packed ? "packed" : "one document per sequence");
  }
}

// The decoding step T times from the initial state equals the recurrence (and so the chunked
// forward); its state is the final state.
void delta_rule_step(const Kernels& k) {
  const int64_t B = 2, T = 9, Hk = 2, Hv = 4, Dk = 8, Dv = 6;
  const DeltaInputs in = delta_inputs(B, T, Hk, Hv, Dk, Dv, false, 120);
  const gdn_ref::DeltaShape& d = in.d;
  const Vec want = reference_of(in, {to_double(in.qkv), to_double(in.beta), to_double(in.g),
                                     to_double(in.initial)});
  FloatBuffer state(k, in.initial), out(k, B * Hv * Dv, NAN);
  Floats got(B * T * Hv * Dv);
  for (int64_t t = 0; t < T; ++t) {
    // Row t of every sequence, as a decoder holds them: (B, ld) and (B, Hv).
    Floats rows, beta, g;
    for (int64_t b = 0; b < B; ++b) {
      rows.insert(rows.end(), in.qkv.begin() + (b * T + t) * d.ld,
                  in.qkv.begin() + (b * T + t + 1) * d.ld);
      beta.insert(beta.end(), in.beta.begin() + (b * T + t) * Hv,
                  in.beta.begin() + (b * T + t + 1) * Hv);
      g.insert(g.end(), in.g.begin() + (b * T + t) * Hv, in.g.begin() + (b * T + t + 1) * Hv);
    }
    const FloatBuffer d_rows(k, rows), d_beta(k, beta), d_g(k, g);
    k.gated_delta_rule_step(out.data(), state.data(), d_rows.data(), d_rows.data() + d.k_at,
                            d_rows.data() + d.v_at, d_beta.data(), d_g.data(), B, Hk, Hv, Dk, Dv,
                            d.ld, d.ld);
    const Floats o = out.host();
    for (int64_t b = 0; b < B; ++b)
      std::copy(o.begin() + b * Hv * Dv, o.begin() + (b + 1) * Hv * Dv,
                got.begin() + (b * T + t) * Hv * Dv);
  }
  for (float x : state.host()) got.push_back(x);
  EXPECT_LT(relative_error(got, want), kForwardTolerance);
}

const bool kRegistered = add_kernel_cases({
    {"gated_delta_rule",
     {"gated_delta_rule_forward", "gated_delta_rule_backward"},
     delta_rule},
    {"gated_delta_rule_packed",
     {"gated_delta_rule_forward", "gated_delta_rule_backward"},
     delta_rule_packed},
    {"gated_delta_rule_wide", {"gated_delta_rule_forward"}, delta_rule_wide},
    {"gated_delta_rule_step", {"gated_delta_rule_step"}, delta_rule_step},
});

}  // namespace
}  // namespace tessel::testing
