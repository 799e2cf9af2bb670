// Qwen3-Next's gated attention (model/attention.h with --attention-output-gate, --qk-layernorm,
// --apply-layernorm-1p, --rotary-percent and --kv-channels), in one process: its output against a
// double-precision reference written from Hugging Face's Qwen3NextAttention (q_proj's rows per
// head [q_h | g_h]; zero-centred QK-norm before RoPE; RoPE on the first rotary dims with
// inv_freq = θ^(−2i/rot); causal GQA; o_proj(attn · sigmoid(g))), and every gradient against
// central differences of that reference.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/gradient_check.h"
#include "support/layer_gradient_check.h"
#include "tessel/core/philox.h"
#include "tessel/model/attention.h"

namespace tessel {
namespace {

using testing::Floats;
using testing::Vec;

constexpr uint64_t kSeed = 23002;
constexpr int64_t B = 2, T = 5, C = 8, H = 4, G = 2, D = 6, kRot = 4;
constexpr double kTheta = 10000.0, kEps = 1e-6;

// in: x (B·T, C), q_proj [2·H·D, C], k_proj, v_proj [G·D, C], o_proj [C, H·D], q_norm, k_norm [D].
Vec reference(const std::vector<Vec>& in) {
  const Vec &x = in[0], &Wq = in[1], &Wk = in[2], &Wv = in[3], &Wo = in[4], &qn = in[5], &kn = in[6];
  const int64_t N = B * T;
  auto project = [&](const Vec& W, int64_t rows) {
    Vec y(N * rows, 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t c = 0; c < C; ++c) y[n * rows + o] += x[n * C + c] * W[o * C + c];
    return y;
  };
  const Vec qg = project(Wq, 2 * H * D), kk = project(Wk, G * D), vv = project(Wv, G * D);
  // Zero-centred RMSNorm over a head's D values, then RoPE on its first kRot (rotate-half).
  auto norm_rope = [&](const double* head, const Vec& w, int64_t t) {
    Vec y(D);
    double ms = 0;
    for (int64_t d = 0; d < D; ++d) ms += head[d] * head[d] / D;
    for (int64_t d = 0; d < D; ++d) y[d] = head[d] / std::sqrt(ms + kEps) * (1 + w[d]);
    Vec r = y;
    for (int64_t i = 0; i < kRot / 2; ++i) {
      const double angle = t * std::pow(kTheta, -2.0 * i / kRot);
      r[i] = y[i] * std::cos(angle) - y[i + kRot / 2] * std::sin(angle);
      r[i + kRot / 2] = y[i + kRot / 2] * std::cos(angle) + y[i] * std::sin(angle);
    }
    return r;
  };
  Vec gated(N * H * D, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t n = b * T + t;
        const Vec q = norm_rope(&qg[n * 2 * H * D + h * 2 * D], qn, t);
        std::vector<double> scores(t + 1);
        double top = -1e300;
        for (int64_t s = 0; s <= t; ++s) {
          const Vec k = norm_rope(&kk[(b * T + s) * G * D + g * D], kn, s);
          double dotqk = 0;
          for (int64_t d = 0; d < D; ++d) dotqk += q[d] * k[d];
          scores[s] = dotqk / std::sqrt(double(D));
          top = std::max(top, scores[s]);
        }
        double total = 0;
        for (double& s : scores) total += s = std::exp(s - top);
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t s = 0; s <= t; ++s) o += scores[s] / total * vv[(b * T + s) * G * D + g * D + d];
          const double gate = qg[n * 2 * H * D + h * 2 * D + D + d];
          gated[n * H * D + h * D + d] = o / (1 + std::exp(-gate));
        }
      }
    }
  Vec out(N * C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * D; ++i) out[n * C + c] += gated[n * H * D + i] * Wo[c * H * D + i];
  return out;
}

TEST(GatedAttention, MatchesTheReference) {
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  cfg.num_layers = 1;
  cfg.hidden_size = C;
  cfg.num_attention_heads = H;
  cfg.num_query_groups = G;
  cfg.kv_channels = D;  // not hidden / heads = 2
  cfg.rotary_percent = static_cast<float>(kRot) / D;
  cfg.rotary_base = static_cast<float>(kTheta);
  cfg.norm_epsilon = static_cast<float>(kEps);
  cfg.qk_layernorm = true;
  cfg.layernorm_1p = true;
  cfg.attention_output_gate = true;
  cfg.seq_length = T;
  cfg.ffn_hidden_size = 16;  // not read by the attention
  ASSERT_TRUE(cfg.violations().empty()) << cfg.violations().front();
  ASSERT_EQ(cfg.rotary_dim(), kRot);
  const Kernels& k = cpu_kernels();
  TensorList tables, kept;
  Tensor positions, cos, sin;
  tables.add(positions, {B * T}, "positions", DType::I32);
  tables.add(cos, {T, kRot / 2}, "cos");
  tables.add(sin, {T, kRot / 2}, "sin");
  tables.allocate(k);
  for (int64_t n = 0; n < B * T; ++n) positions.ints()[n] = static_cast<int32_t>(n % T);
  k.rope_tables(cos.data(), sin.data(), T, kRot, cfg.rotary_base);
  ParamRegistry registry;
  TensorList scratch, shared;
  LayerContext ctx = one_process_context(k, registry, cfg, LayerBuffers{scratch, shared}, B, T);
  ctx.positions = positions;
  ctx.rope_cos = cos;
  ctx.rope_sin = sin;
  Attention attention(ctx, 0);
  registry.finalize();
  registry.init_values(kSeed);
  for (Param& p : registry.params())
    for (int64_t i = 0; i < p.numel(); ++i)
      p.value[i] = p.init == ParamInit::Normal ? p.value[i] * 25.0f : 0.3f * random_normal(kSeed, 7 + p.offset, i);
  Attention::Saved s;
  SavedLists lists{kept, kept};
  attention.list_saved(s, lists, LayerRecompute{});
  kept.allocate(k);

  const int64_t N = B * T;
  Floats x(N * C), w(N * C);
  for (int64_t i = 0; i < N * C; ++i) {
    x[i] = random_normal(kSeed, 1, i);
    w[i] = random_normal(kSeed, 2, i);
  }
  Floats out(N * C), dx(N * C, 0.0f), partial(N * C), d_heads(N * H * D), d_attn(N * H * D);
  registry.zero_grads();
  attention.forward(s, out.data(), x.data(), partial.data(), PackedRows{});
  attention.backward_input(s, dx.data(), w.data(), x.data(), d_heads.data(), d_attn.data());
  attention.backward_weight(s, x.data());

  const std::string p = "model.layers.0.self_attn.";
  const char* const names[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                               "q_norm.weight", "k_norm.weight"};
  EXPECT_EQ(registry.get(p + "q_proj.weight").global_shape, (Shape{2 * H * D, C}));
  EXPECT_EQ(registry.get(p + "o_proj.weight").global_shape, (Shape{C, H * D}));
  testing::expect_layer_matches_reference(registry, p, names, reference, x, out, dx, w);
}

}  // namespace
}  // namespace tessel
