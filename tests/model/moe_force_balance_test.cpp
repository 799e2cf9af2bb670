// --moe-router-force-load-balancing in one process (Megatron's RandomSTE): the router's logits are
// the keyed standard normal values whatever the input and the gate weight, and the gradient of
// everything after them — the experts' weighting, the load-balancing loss, the z-loss — reaches
// the gate weight and the input straight through, against finite differences of the double
// reference (support/moe_reference.h). The values themselves: tests/kernels/router_test.cpp. Every
// layout drawing the same: tests/parallel/equivalence_force_balance_test.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/gradient_check.h"
#include "support/moe_reference.h"
#include "tessel/core/error.h"
#include "tessel/core/philox.h"
#include "tessel/kernels/kernels.h"
#include "tessel/kernels/router_rows.h"
#include "tessel/model/moe/moe.h"
#include "tessel/model/transformer.h"

namespace tessel::testing {
namespace {

constexpr uint64_t kSeed = 5150;
constexpr int kLayer = 1;
constexpr int64_t N = 10, C = 6, F = 5, E = 4;

Floats normals(int64_t n, uint64_t stream, float scale = 1.0f) {
  Floats x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = scale * random_normal(kSeed, stream, i);
  return x;
}

// A forced MoE layer of one process over N rows: two sequences of 5 (samples 40 and 41), whose
// rows sit at positions 3..7 of their sequences, and the run's seed.
struct ForcedLayer {
  ModelConfig model;
  ParamRegistry registry;
  TensorList scratch, shared;
  Tensor positions = cpu_kernels().zeros({N}, DType::I32);
  std::vector<int32_t> samples;
  std::unique_ptr<MoeLayer> layer;

  explicit ForcedLayer(const MoeConfig& moe) {
    model.arch = Arch::Llama;
    model.hidden_size = C;
    model.num_attention_heads = 1;
    model.ffn_hidden_size = F;
    model.num_layers = 2;
    model.moe = moe;
    for (int64_t n = 0; n < N; ++n) {
      positions.ints()[n] = static_cast<int32_t>(3 + n % 5);
      samples.push_back(static_cast<int32_t>(40 + n / 5));
    }
    LayerContext ctx = one_process_context(cpu_kernels(), registry, model, LayerBuffers{scratch, shared});
    ctx.positions = positions;
    ctx.seed = kSeed;
    layer = std::make_unique<MoeLayer>(ctx, kLayer, N);
    scratch.allocate(cpu_kernels());
    shared.allocate(cpu_kernels());
    registry.finalize();
    registry.init_values(kSeed);
    for (Param& p : registry.params())
      for (int64_t i = 0; i < p.numel(); ++i) p.value[i] *= 20.0f;  // outputs well above rounding
    layer->bind(registry);
  }
  // The layer's parameters in ref_layer's order (after x), and their values and gradients.
  std::vector<Param*> params() {
    std::vector<Param*> ps;
    for (int index : layer->param_indices()) ps.push_back(&registry.params()[index]);
    return ps;
  }
};

MoeConfig forced_config() {
  MoeConfig m;
  m.num_experts = E;
  m.topk = 2;
  m.ffn_hidden_size = F;
  m.aux_loss_coeff = 0.1f;
  m.z_loss_coeff = 0.01f;
  m.force_load_balancing = true;
  return m;
}

// Expert e's logit of row n as the kernels' row math draws it at `layer`.
float drawn_logit(const ForcedLayer& f, int layer, int64_t n, int64_t e) {
  return router_rows::random_logit(kSeed, router_rows::random_logits_site(layer), f.samples[n],
                                   f.positions.ints()[n], e);
}

TEST(MoeForceBalance, LogitsAreTheKeyedValuesWhateverTheInputAndWeight) {
  ForcedLayer f(forced_config());
  Floats out(N * C);
  MoeLayer::Saved s = f.layer->make_saved();
  f.layer->forward(s, out.data(), normals(N * C, 1).data(), N, 0.5f, f.samples.data());
  const Floats first(s.routing.logits.data(), s.routing.logits.data() + N * E);
  float* gate = f.registry.get("model.layers.1.mlp.gate.weight").value;
  for (int64_t i = 0; i < E * C; ++i) gate[i] = -3.0f * gate[i] + 1.0f;
  f.layer->forward(s, out.data(), normals(N * C, 2, 4.0f).data(), N, 0.5f, f.samples.data());
  EXPECT_EQ(Floats(s.routing.logits.data(), s.routing.logits.data() + N * E), first);
  int64_t same_as_layer0 = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e) {
      EXPECT_EQ(first[n * E + e], drawn_logit(f, kLayer, n, e)) << n << ", " << e;
      same_as_layer0 += first[n * E + e] == drawn_logit(f, 0, n, e);
    }
  EXPECT_EQ(same_as_layer0, 0);  // another layer draws other values
}

// The random logits' gradient, from the top-k weighting, the aux loss and the z-loss, becomes the
// gate output's: d(gate weight) = d(logits)ᵀ · x and dx gets d(logits) · W besides the experts'.
TEST(MoeForceBalance, GradientPassesStraightThroughToTheGate) {
  const MoeConfig moe = forced_config();
  ForcedLayer f(moe);
  const float grad_scale = 0.25f;
  const Floats x = normals(N * C, 3), w = normals(N * C, 4);
  Floats out(N * C), dx(N * C, 0.0f);
  f.registry.zero_grads();
  MoeLayer::Saved s = f.layer->make_saved();
  const double aux = f.layer->forward(s, out.data(), x.data(), N, grad_scale, f.samples.data());
  f.layer->backward(s, dx.data(), w.data(), x.data());

  std::vector<Vec> inputs = {Vec(x.begin(), x.end())};
  for (Param* p : f.params()) inputs.emplace_back(p->value, p->value + p->numel());
  ForcedLogits forced{Vec(N * E), ref::linear(inputs[0], inputs[1], {}, N, C, E, false)};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e) forced.values[n * E + e] = drawn_logit(f, kLayer, n, e);
  const Reference reference = [&](const std::vector<Vec>& in) {
    return ref_layer(moe, N, C, F, grad_scale, in, nullptr, &forced);
  };
  const Vec want = reference(inputs);
  EXPECT_LT(relative_error(out, Vec(want.begin(), want.end() - 1)), 1e-5);
  EXPECT_NEAR(aux * grad_scale, want.back(), 1e-6 * std::abs(want.back()));
  Vec weights(w.begin(), w.end());
  weights.push_back(1.0);
  EXPECT_LT(relative_error(dx, numerical_gradient(reference, inputs, 0, weights)), 1e-4) << "d x";
  const std::vector<Param*> params = f.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Vec fd = numerical_gradient(reference, inputs, i + 1, weights);
    const Floats got(params[i]->grad, params[i]->grad + params[i]->numel());
    if (dot(fd, fd) == 0)
      EXPECT_EQ(got, Floats(got.size(), 0.0f)) << params[i]->name;
    else
      EXPECT_LT(relative_error(got, fd), 1e-4) << params[i]->name;
  }
  const Param& gate = *params[0];
  EXPECT_GT(dot(Vec(gate.grad, gate.grad + gate.numel()), Vec(gate.grad, gate.grad + gate.numel())), 0.0);
}

// Without the rows' samples (generation) the random logits have no key: an error, not a guess.
TEST(MoeForceBalance, AForwardWithoutSamplesIsRefused) {
  ForcedLayer f(forced_config());
  Floats out(N * C);
  MoeLayer::Saved s = f.layer->make_saved();
  EXPECT_THROW(f.layer->forward(s, out.data(), normals(N * C, 5).data(), N, 0.0f), Error);
}

// Evaluation draws them too (as Megatron's router does): the router reads the samples in every
// forward, where dropout reads its own copy only in forwards with gradients.
TEST(MoeForceBalance, EvaluationReadsTheSamples) {
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  cfg.moe = forced_config();
  cfg.hidden_dropout = 0.1f;
  const MicrobatchShape shape{.tokens = 8};
  const ChunkSpec spec{0, cfg.num_layers, true, true};
  auto read_of = [&](const char* name) -> std::optional<InputRead> {
    for (const MicrobatchInput& i : TransformerChunk::microbatch_inputs(cfg, spec, shape))
      if (i.name == name) return i.read;
    return std::nullopt;
  };
  EXPECT_EQ(read_of("routing_sample_ids"), InputRead::Always);
  EXPECT_EQ(read_of("sample_ids"), InputRead::WithGradients);  // dropout's
  cfg.moe.force_load_balancing = false;
  EXPECT_EQ(read_of("routing_sample_ids"), std::nullopt);
  cfg.hidden_dropout = cfg.attention_dropout = 0;
  EXPECT_EQ(read_of("sample_ids"), std::nullopt);
}

}  // namespace
}  // namespace tessel::testing
