// The Gated DeltaNet mixer (model/gated_delta_net.h), in one process: its output against a
// double-precision reference written from Hugging Face's Qwen3NextGatedDeltaNet in the
// recurrent form (one token at a time: S ← e^g S; u = β(v − Sᵀk); S += k uᵀ; o = Sᵀ q/√dk; the
// layer runs the chunked form), and every gradient against central differences of that reference;
// with two chunks and a padded tail, several value heads per key head, and packed documents.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/gradient_check.h"
#include "support/layer_gradient_check.h"
#include "tessel/core/philox.h"
#include "tessel/model/gated_delta_net.h"

namespace tessel {
namespace {

using testing::Floats;
using testing::Vec;

constexpr uint64_t kSeed = 23001;

struct Sizes {
  int64_t B = 2, T = 70, C = 8, Hk = 2, Hv = 4, dk = 4, dv = 3, K = 3;
  int64_t key_dim() const { return Hk * dk; }
  int64_t value_dim() const { return Hv * dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};
constexpr double kEps = 1e-6;

double silu(double x) { return x / (1 + std::exp(-x)); }
double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

// The mixer's output (B·T, C) from x and the parameters in Hugging Face order (in[0] x, then
// in_proj_qkv, z, b, a, conv1d, dt_bias, A_log, norm, out_proj). doc_start (B·T): each row's
// document's first position; the conv and the state restart there.
Vec reference(const Sizes& z, const std::vector<int32_t>& doc_start, const std::vector<Vec>& in) {
  const Vec &x = in[0], &Wqkv = in[1], &Wz = in[2], &Wb = in[3], &Wa = in[4], &conv = in[5],
            &dt_bias = in[6], &A_log = in[7], &norm = in[8], &Wout = in[9];
  const int64_t N = z.B * z.T, CD = z.conv_dim(), VD = z.value_dim(), r = z.Hv / z.Hk;
  auto project = [&](const Vec& W, int64_t rows) {
    Vec y(N * rows, 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t c = 0; c < z.C; ++c) y[n * rows + o] += x[n * z.C + c] * W[o * z.C + c];
    return y;
  };
  const Vec raw = project(Wqkv, CD), gate_in = project(Wz, VD), b = project(Wb, z.Hv), a = project(Wa, z.Hv);
  Vec out(N * z.C, 0.0);
  for (int64_t bi = 0; bi < z.B; ++bi) {
    std::vector<Vec> S(z.Hv, Vec(z.dk * z.dv, 0.0));
    for (int64_t t = 0; t < z.T; ++t) {
      const int64_t n = bi * z.T + t;
      const int64_t start = doc_start[n];
      if (t == start) for (Vec& s : S) s.assign(s.size(), 0.0);
      Vec y(CD);
      for (int64_t c = 0; c < CD; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < z.K; ++j) {
          const int64_t src = t - z.K + 1 + j;
          if (src >= start) acc += conv[c * z.K + j] * raw[(bi * z.T + src) * CD + c];
        }
        y[c] = silu(acc);
      }
      auto l2 = [&](int64_t offset) {
        for (int64_t h = 0; h < z.Hk; ++h) {
          double ss = 0;
          for (int64_t i = 0; i < z.dk; ++i) ss += y[offset + h * z.dk + i] * y[offset + h * z.dk + i];
          for (int64_t i = 0; i < z.dk; ++i) y[offset + h * z.dk + i] /= std::sqrt(ss + 1e-6);
        }
      };
      l2(0);
      l2(z.key_dim());
      Vec o(VD);
      for (int64_t j = 0; j < z.Hv; ++j) {
        const double beta = 1 / (1 + std::exp(-b[n * z.Hv + j]));
        const double g = -std::exp(A_log[j]) * softplus(a[n * z.Hv + j] + dt_bias[j]);
        const double* q = &y[(j / r) * z.dk];
        const double* k = &y[z.key_dim() + (j / r) * z.dk];
        const double* v = &y[2 * z.key_dim() + j * z.dv];
        Vec& s = S[j];
        for (double& e : s) e *= std::exp(g);
        for (int64_t e = 0; e < z.dv; ++e) {
          double sk = 0;
          for (int64_t i = 0; i < z.dk; ++i) sk += s[i * z.dv + e] * k[i];
          const double u = beta * (v[e] - sk);
          for (int64_t i = 0; i < z.dk; ++i) s[i * z.dv + e] += k[i] * u;
        }
        for (int64_t e = 0; e < z.dv; ++e) {
          double acc = 0;
          for (int64_t i = 0; i < z.dk; ++i) acc += s[i * z.dv + e] * q[i] / std::sqrt(double(z.dk));
          o[j * z.dv + e] = acc;
        }
        double ms = 0;
        for (int64_t e = 0; e < z.dv; ++e) ms += o[j * z.dv + e] * o[j * z.dv + e] / z.dv;
        for (int64_t e = 0; e < z.dv; ++e)
          o[j * z.dv + e] *= norm[e] / std::sqrt(ms + kEps) * silu(gate_in[n * VD + j * z.dv + e]);
      }
      for (int64_t c = 0; c < z.C; ++c)
        for (int64_t i = 0; i < VD; ++i) out[n * z.C + c] += o[i] * Wout[c * VD + i];
    }
  }
  return out;
}

const char* const kNames[] = {"in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight",
                              "in_proj_a.weight",   "conv1d.weight",    "dt_bias",
                              "A_log",              "norm.weight",      "out_proj.weight"};

void check_mixer(const Sizes& z, const std::vector<int32_t>& doc_start, bool packed) {
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  cfg.hidden_size = static_cast<int>(z.C);
  cfg.num_layers = 1;
  cfg.norm_epsilon = static_cast<float>(kEps);
  cfg.linear = {.layer_pattern = {1}, .conv_kernel_dim = int(z.K), .key_head_dim = int(z.dk),
                .value_head_dim = int(z.dv), .num_key_heads = int(z.Hk), .num_value_heads = int(z.Hv)};
  const Kernels& k = cpu_kernels();
  ParamRegistry registry;
  TensorList scratch, shared, kept;
  GatedDeltaNet mixer(one_process_context(k, registry, cfg, LayerBuffers{scratch, shared}, z.B, z.T), 0);
  scratch.allocate(k);
  registry.finalize();
  registry.init_values(kSeed);
  // Weights scaled up from 0.02 so that the nonlinearities are far from linear; the gains and
  // biases moved off their initial values.
  for (Param& p : registry.params())
    for (int64_t i = 0; i < p.numel(); ++i) {
      if (p.init == ParamInit::Normal) p.value[i] *= 20.0f;
      if (p.init == ParamInit::Ones) p.value[i] += 0.3f * random_normal(kSeed, 99 + p.offset, i);
    }
  GatedDeltaNet::Saved s;
  SavedLists lists{kept, kept};
  mixer.list_saved(s, lists, LayerRecompute{});
  kept.allocate(k);

  const int64_t N = z.B * z.T;
  Floats x(N * z.C), w(N * z.C);
  for (int64_t i = 0; i < N * z.C; ++i) {
    x[i] = random_normal(kSeed, 1, i);
    w[i] = random_normal(kSeed, 2, i);
  }
  std::vector<int32_t> starts = doc_start;
  PackedRows rows;
  if (packed) rows.key_start = starts.data();
  Floats out(N * z.C), dx(N * z.C, 0.0f), partial(N * z.C);
  registry.zero_grads();
  mixer.forward(s, out.data(), x.data(), partial.data(), rows);
  mixer.backward_input(s, dx.data(), w.data(), x.data());
  mixer.backward_weight(s, x.data());

  const std::string p = "model.layers.0.linear_attn.";
  auto f = [&](const std::vector<Vec>& in) { return reference(z, doc_start, in); };
  testing::expect_layer_matches_reference(registry, p, kNames, f, x, out, dx, w);
}

std::vector<int32_t> one_document(const Sizes& z) {
  std::vector<int32_t> starts(z.B * z.T);
  for (int64_t b = 0; b < z.B; ++b)
    for (int64_t t = 0; t < z.T; ++t) starts[b * z.T + t] = 0;
  return starts;
}

// Two chunks of 64 (the second padded), two value heads per key head.
TEST(GatedDeltaNet, MatchesTheRecurrentReference) {
  const Sizes z;
  check_mixer(z, one_document(z), false);
}

// Packed documents: sequence 0 holds documents from 0, 9 and 66 (one inside the first chunk,
// one past it); sequence 1 one document. Nothing crosses a document's start.
TEST(GatedDeltaNet, PackedDocumentsRestartTheConvAndTheState) {
  Sizes z;
  z.Hv = 2;  // one value head per key head
  std::vector<int32_t> starts = one_document(z);
  for (int64_t t = 0; t < z.T; ++t) starts[t] = t >= 66 ? 66 : t >= 9 ? 9 : 0;
  check_mixer(z, starts, true);
}

TEST(GatedDeltaNet, ParametersHaveHuggingFaceNamesAndInitialisation) {
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  cfg.hidden_size = 16;
  cfg.num_layers = 4;
  cfg.linear = {.layer_pattern = {1, 1, 1, 0}, .conv_kernel_dim = 4, .key_head_dim = 8, .value_head_dim = 4,
                .num_key_heads = 2, .num_value_heads = 6};
  const Kernels& k = cpu_kernels();
  ParamRegistry registry;
  TensorList scratch, shared;
  GatedDeltaNet mixer(one_process_context(k, registry, cfg, LayerBuffers{scratch, shared}, 1, 4), 2);
  registry.finalize();
  registry.init_values(1);
  const std::string p = "model.layers.2.linear_attn.";
  std::vector<std::string> names;
  for (const Param& param : registry.params()) names.push_back(param.name);
  std::vector<std::string> want;
  for (const char* n : {"in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight",
                        "conv1d.weight", "dt_bias", "A_log", "norm.weight", "out_proj.weight"})
    want.push_back(p + n);
  EXPECT_EQ(names, want);
  EXPECT_EQ(registry.get(p + "in_proj_qkv.weight").global_shape, (Shape{2 * 16 + 24, 16}));
  EXPECT_EQ(registry.get(p + "in_proj_z.weight").global_shape, (Shape{24, 16}));
  EXPECT_EQ(registry.get(p + "in_proj_b.weight").global_shape, (Shape{6, 16}));
  EXPECT_EQ(registry.get(p + "conv1d.weight").global_shape, (Shape{56, 1, 4}));
  EXPECT_EQ(registry.get(p + "norm.weight").global_shape, (Shape{4}));
  EXPECT_EQ(registry.get(p + "out_proj.weight").global_shape, (Shape{16, 24}));
  const Param& A_log = registry.get(p + "A_log");
  for (int64_t i = 0; i < A_log.numel(); ++i) EXPECT_LT(A_log.value[i], std::log(16.0f) + 1e-6f);
  EXPECT_FALSE(A_log.weight_decay);
  EXPECT_EQ(registry.get(p + "dt_bias").value[0], 1.0f);
  EXPECT_EQ(registry.get(p + "norm.weight").value[3], 1.0f);  // a plain gain
  // qkv, z, b, a, conv, dt_bias, A_log, norm, out_proj.
  EXPECT_EQ(registry.numel(), 56 * 16 + 24 * 16 + 2 * 6 * 16 + 56 * 4 + 6 + 6 + 4 + 16 * 24);
}

}  // namespace
}  // namespace tessel
