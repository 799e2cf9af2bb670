// The Mixture-of-Experts layer, in one process: every float result against a double-precision
// reference from Megatron-LM's definitions (the router's in support/reference.h; get_capacity and
// Qwen2-MoE's shared expert here), and every gradient against central finite differences of that
// reference. The router kernels alone: tests/kernels/router_test.cpp. Multi-rank expert
// parallelism: tests/mpi/model/moe_mpi_test.cpp.
#include "tessel/train/plan.h"
#include "tessel/model/moe/moe.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/gradient_check.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "support/moe_reference.h"
#include "support/reference.h"
#include "support/tiny_model.h"
#include "tessel/core/error.h"
#include "tessel/core/philox.h"
#include "tessel/kernels/kernels.h"
#include "tessel/train/trainer.h"

namespace tessel {
namespace {

using ref::Vec;
using Floats = std::vector<float>;

constexpr uint64_t kSeed = 77001;
constexpr double kForwardTolerance = 1e-5;
constexpr double kGradientTolerance = 1e-4;

Floats random_floats(int64_t n, uint64_t stream, float scale = 1.0f) {
  Floats x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = scale * random_normal(kSeed, stream, i);
  return x;
}

Vec to_double(const Floats& x) { return Vec(x.begin(), x.end()); }

using tessel::testing::dot;
using tessel::testing::numerical_gradient;
using tessel::testing::Reference;
using tessel::testing::relative_error;
using tessel::testing::ref_layer;

TEST(MoeRouter, CapacityIsMegatronsFormula) {
  EXPECT_EQ(moe_expert_capacity(10, 4, 2, 1.0), 5);  // 20 / 4
  EXPECT_EQ(moe_expert_capacity(10, 4, 2, 1.1), 6);  // ceil(5.5)
  EXPECT_EQ(moe_expert_capacity(10, 8, 2, 1.0), 3);  // ceil(2.5)
  EXPECT_EQ(moe_expert_capacity(12, 4, 1, 0.5), 2);  // ceil(1.5)
  EXPECT_EQ(moe_expert_capacity(6, 2, 2, 4.0), 6);   // 24 capped at the 6 tokens
  // Python's float: (200 / 4) · 1.1 = 55.00000000000001, so Megatron rounds up to 56.
  EXPECT_EQ(moe_expert_capacity(100, 4, 2, 1.1), 56);
}

// ---- the layer ---------------------------------------------------------------------------------

// A one-process MoE layer (EP = 1) with its own registry; parameters set by init_values and then
// scaled, so routing is decisive and the outputs are not tiny.
struct Fixture {
  ModelConfig model;
  MoeConfig moe;
  ParamRegistry registry;
  std::unique_ptr<MoeLayer> layer;
  int64_t N = 0;

  Fixture(const MoeConfig& m, int64_t C, int64_t F, int64_t tokens) : moe(m), N(tokens) {
    model.arch = Arch::Llama;
    model.hidden_size = static_cast<int>(C);
    model.num_attention_heads = 1;
    model.ffn_hidden_size = static_cast<int>(F);
    model.num_layers = 2;
    TensorList scratch, shared;
    model.moe = moe;
    LayerContext ctx = one_process_context(cpu_kernels(), registry, model, LayerBuffers{scratch, shared});
    layer = std::make_unique<MoeLayer>(ctx, 1, N);
    scratch.allocate(cpu_kernels());
    shared.allocate(cpu_kernels());
    registry.finalize();
    registry.init_values(kSeed);
    for (Param& p : registry.params())
      for (int64_t i = 0; i < p.numel(); ++i) p.value[i] *= 20.0f;  // std 0.4 (down: less)
    layer->bind(registry);
  }
  const std::string prefix = "model.layers.1.mlp.";
  Floats values(const std::string& name) const {
    const Param& p = registry.get(prefix + name);
    return Floats(p.value, p.value + p.numel());
  }
  Floats grads(const std::string& name) const {
    const Param& p = registry.get(prefix + name);
    return Floats(p.grad, p.grad + p.numel());
  }
  float* value(const std::string& name) { return registry.get(prefix + name).value; }
  // The names of the layer's parameters in the order of ref_layer's inputs (after x).
  std::vector<std::string> names() const {
    std::vector<std::string> n = {"gate.weight"};
    for (int e = 0; e < moe.num_experts; ++e)
      for (const char* w : {"gate_proj", "up_proj", "down_proj"})
        n.push_back(fmt::format("experts.{}.{}.weight", e, w));
    if (moe.shared_expert_size > 0)
      for (const char* w : {"shared_expert.gate_proj.weight", "shared_expert.up_proj.weight",
                            "shared_expert.down_proj.weight"})
        n.push_back(w);
    if (moe.shared_expert_gate) n.push_back("shared_expert_gate.weight");
    return n;
  }
};

struct LayerRun {
  Floats out, dx;
  double aux_return = 0;
  RouterStats stats;
};

// forward + backward with dout = w; the registry's gradients start at zero.
LayerRun run_layer(Fixture& f, const Floats& x, const Floats& w, float grad_scale) {
  const int64_t C = f.model.hidden_size;
  LayerRun r{Floats(f.N * C), Floats(f.N * C, 0.0f)};
  f.registry.zero_grads();
  MoeLayer::Saved saved = f.layer->make_saved();
  r.aux_return = f.layer->forward(saved, r.out.data(), x.data(), f.N, grad_scale);
  f.layer->backward(saved, r.dx.data(), w.data(), x.data());
  r.stats = saved.stats;
  return r;
}

// The whole layer against the reference: output, the auxiliary losses' value, and the gradients
// of x and of every parameter. `prepare` may rig x and the parameters for an edge case.
void check_layer(const MoeConfig& moe, int64_t N,
                 const std::function<void(Fixture&, Floats&)>& prepare = {}) {
  const int64_t C = 6, F = 5;
  const float grad_scale = 0.25f;
  Fixture f(moe, C, F, N);
  Floats x = random_floats(N * C, 10);
  if (prepare) prepare(f, x);
  const Floats w = random_floats(N * C, 11);
  const LayerRun run = run_layer(f, x, w, grad_scale);

  std::vector<Vec> inputs = {to_double(x)};
  for (const std::string& name : f.names()) inputs.push_back(to_double(f.values(name)));
  auto reference = [&](const std::vector<Vec>& in) {
    return ref_layer(moe, N, C, F, grad_scale, in);
  };
  const Vec want = reference(inputs);
  EXPECT_LT(relative_error(run.out, Vec(want.begin(), want.end() - 1)), kForwardTolerance);
  EXPECT_NEAR(run.aux_return * grad_scale, want.back(), 1e-6 * std::abs(want.back()) + 1e-12);

  Vec weights = to_double(w);
  weights.push_back(1.0);
  EXPECT_LT(relative_error(run.dx, numerical_gradient(reference, inputs, 0, weights)),
            kGradientTolerance)
      << "d x";
  const std::vector<std::string> names = f.names();
  for (size_t i = 0; i < names.size(); ++i) {
    const Vec fd = numerical_gradient(reference, inputs, i + 1, weights);
    const Floats got = f.grads(names[i]);
    if (dot(fd, fd) == 0) {  // an expert no token reached: exactly nothing
      EXPECT_EQ(got, Floats(got.size(), 0.0f)) << names[i];
    } else {
      EXPECT_LT(relative_error(got, fd), kGradientTolerance) << names[i];
    }
  }
}

MoeConfig base_config() {
  MoeConfig m;
  m.num_experts = 4;
  m.topk = 2;
  m.ffn_hidden_size = 5;
  return m;
}

TEST(MoeLayer, ParametersHaveHuggingFaceNames) {
  MoeConfig moe = base_config();
  moe.shared_expert_size = 3;
  moe.shared_expert_gate = true;
  Fixture f(moe, 6, 5, 4);
  std::vector<std::string> names;
  for (const Param& p : f.registry.params()) names.push_back(p.name);
  std::vector<std::string> want;
  for (const std::string& n : f.names()) want.push_back(f.prefix + n);
  EXPECT_EQ(names, want);
  EXPECT_EQ(f.registry.get(f.prefix + "gate.weight").global_shape, (Shape{4, 6}));
  EXPECT_EQ(f.registry.get(f.prefix + "experts.2.gate_proj.weight").global_shape, (Shape{5, 6}));
  EXPECT_EQ(f.registry.get(f.prefix + "experts.2.down_proj.weight").global_shape, (Shape{6, 5}));
  EXPECT_EQ(f.registry.get(f.prefix + "shared_expert.up_proj.weight").global_shape, (Shape{3, 6}));
  EXPECT_EQ(f.registry.get(f.prefix + "shared_expert_gate.weight").global_shape, (Shape{1, 6}));
  for (const Param& p : f.registry.params()) {
    EXPECT_EQ(is_expert_param(p), p.name.find(".experts.") != std::string::npos) << p.name;
    EXPECT_LT(p.shard.dim, 0) << p.name;  // whole tensors: experts are split by declaring fewer
  }
  EXPECT_EQ(f.layer->param_indices().size(), f.registry.params().size());
}

TEST(MoeLayer, SoftmaxTop2WithAuxZLossAndSharedExpertMatchesReference) {
  MoeConfig moe = base_config();
  moe.aux_loss_coeff = 0.1f;
  moe.z_loss_coeff = 0.01f;
  moe.shared_expert_size = 3;
  moe.shared_expert_gate = true;
  check_layer(moe, 7);
}

TEST(MoeLayer, PreSoftmaxTop1MatchesReference) {
  MoeConfig moe = base_config();
  moe.topk = 1;
  moe.pre_softmax = true;
  moe.aux_loss_coeff = 0.05f;
  check_layer(moe, 9);
}

TEST(MoeLayer, SigmoidTop3WithCapacityMatchesReference) {
  MoeConfig moe = base_config();
  moe.topk = 3;
  moe.score_sigmoid = true;
  moe.capacity_factor = 0.6;
  moe.aux_loss_coeff = 0.1f;
  check_layer(moe, 10);
}

TEST(MoeLayer, CapacityWithPaddingMatchesReference) {
  MoeConfig moe = base_config();
  moe.capacity_factor = 0.8;
  moe.pad_to_capacity = true;
  moe.shared_expert_size = 2;  // ungated: Megatron's default shared expert, its output added as it is
  check_layer(moe, 11);
}

// x's first channel is large and positive; the router's first column then decides.
void route_by_first_channel(Fixture& f, Floats& x, const std::vector<float>& column) {
  const int64_t C = f.model.hidden_size;
  for (int64_t n = 0; n < f.N; ++n) x[n * C] = 3.0f + 0.1f * x[n * C];
  float* router = f.value("gate.weight");
  for (size_t e = 0; e < column.size(); ++e) router[e * C] = column[e];
}

TEST(MoeLayer, ExpertWithoutTokensGetsNoGradientAndNoHarm) {
  MoeConfig moe = base_config();
  moe.aux_loss_coeff = 0.1f;
  moe.shared_expert_size = 3;
  check_layer(moe, 8, [](Fixture& f, Floats& x) {
    route_by_first_channel(f, x, {0.0f, 0.0f, -8.0f, 0.0f});  // expert 2: never in a top-2
  });
}

TEST(MoeLayer, EveryTokenToOneExpert) {
  MoeConfig moe = base_config();
  moe.topk = 1;
  moe.pre_softmax = true;
  moe.aux_loss_coeff = 0.1f;
  moe.z_loss_coeff = 0.001f;
  check_layer(moe, 8, [](Fixture& f, Floats& x) {
    route_by_first_channel(f, x, {-1.5f, 1.5f, -1.5f, -1.5f});
  });
  moe.capacity_factor = 1.0;  // capacity 2 of the 8 tokens: the 6 least sure are dropped
  check_layer(moe, 8, [](Fixture& f, Floats& x) {
    route_by_first_channel(f, x, {-1.5f, 1.5f, -1.5f, -1.5f});
  });
}

TEST(MoeLayer, StatsCountKeptAndDroppedAssignments) {
  MoeConfig moe = base_config();
  moe.capacity_factor = 0.5;
  moe.aux_loss_coeff = 0.2f;
  moe.z_loss_coeff = 0.03f;
  const int64_t N = 12, C = 6;
  Fixture f(moe, C, 5, N);
  const Floats x = random_floats(N * C, 12);
  const LayerRun run = run_layer(f, x, random_floats(N * C, 13), 1.0f);

  std::vector<Vec> inputs = {to_double(x)};
  for (const std::string& name : f.names()) inputs.push_back(to_double(f.values(name)));
  std::vector<int32_t> keep;
  ref_layer(moe, N, C, 5, 1.0, inputs, &keep);
  const ref::Routing routing =
      ref::topk({.E = 4, .k = 2}, ref::linear(inputs[0], inputs[1], {}, N, C, 4, false), N);
  std::vector<double> kept(4, 0.0);
  for (size_t a = 0; a < keep.size(); ++a) kept[routing.experts[a]] += keep[a];
  EXPECT_EQ(run.stats.tokens_per_expert, kept);
  EXPECT_EQ(run.stats.dropped, std::count(keep.begin(), keep.end(), 0));
  EXPECT_GT(run.stats.dropped, 0);  // capacity 3 for 24 assignments over 4 experts
  EXPECT_GT(run.stats.aux_loss, 0);
  EXPECT_GT(run.stats.z_loss, 0);
  EXPECT_NEAR(run.aux_return, N * (run.stats.aux_loss + run.stats.z_loss), 1e-9);
}

// backward = backward_input then backward_weight, bitwise; gradients accumulate (+=); several
// microbatches may be in flight, each with its own Saved.
TEST(MoeLayer, SplitBackwardAndMicrobatchesInFlight) {
  MoeConfig moe = base_config();
  moe.aux_loss_coeff = 0.1f;
  moe.shared_expert_size = 3;
  const int64_t N = 10, C = 6;
  Fixture f(moe, C, 5, N);
  const Floats x1 = random_floats(N * C, 20), x2 = random_floats(N * C, 21);
  const Floats w1 = random_floats(N * C, 22), w2 = random_floats(N * C, 23);
  auto grads = [&] { return Floats(f.registry.grads(), f.registry.grads() + f.registry.numel()); };

  // One after the other, combined backward.
  const LayerRun a = run_layer(f, x1, w1, 0.5f);
  const Floats grads_a = grads();
  MoeLayer::Saved s = f.layer->make_saved();
  Floats out(N * C), dx2(N * C, 0.0f);
  f.layer->forward(s, out.data(), x2.data(), N, 0.5f);
  f.layer->backward(s, dx2.data(), w2.data(), x2.data());
  const Floats grads_ab = grads();

  // Interleaved: F1 F2 B2(input) B1(input) B1(weight) B2(weight), all halves.
  f.registry.zero_grads();
  MoeLayer::Saved s1 = f.layer->make_saved(), s2 = f.layer->make_saved();
  Floats o1(N * C), o2(N * C), d1(N * C, 0.0f), d2(N * C, 0.0f);
  f.layer->forward(s1, o1.data(), x1.data(), N, 0.5f);
  f.layer->forward(s2, o2.data(), x2.data(), N, 0.5f);
  f.layer->backward_input(s2, d2.data(), w2.data(), x2.data());
  f.layer->backward_input(s1, d1.data(), w1.data(), x1.data());
  EXPECT_EQ(grads(), Floats(grads().size(), 0.0f));  // input halves touch no parameter
  std::vector<int> reported;
  f.layer->backward_weight(s1, x1.data(), [&](int i) { reported.push_back(i); });
  EXPECT_EQ(grads(), grads_a);
  f.layer->backward_weight(s2, x2.data());
  EXPECT_EQ(o1, a.out);
  EXPECT_EQ(d1, a.dx);
  EXPECT_EQ(d2, dx2);
  const Floats g = grads();
  ASSERT_EQ(g.size(), grads_ab.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(g[i], grads_ab[i]) << i;
  std::sort(reported.begin(), reported.end());
  std::vector<int> all = f.layer->param_indices();
  std::sort(all.begin(), all.end());
  EXPECT_EQ(reported, all);
}

TEST(MoeLayer, NoRowsIsANoOp) {
  MoeConfig moe = base_config();
  moe.aux_loss_coeff = 0.1f;
  moe.z_loss_coeff = 0.1f;
  moe.shared_expert_size = 2;
  Fixture f(moe, 6, 5, 4);
  MoeLayer::Saved s = f.layer->make_saved();
  f.registry.zero_grads();
  float out = 0, dx = 0;
  EXPECT_EQ(f.layer->forward(s, &out, &out, 0, 1.0f), 0.0);
  f.layer->backward(s, &dx, &out, &out);
  EXPECT_EQ(Floats(f.registry.grads(), f.registry.grads() + f.registry.numel()),
            Floats(f.registry.numel(), 0.0f));
  EXPECT_EQ(s.stats.tokens_per_expert, std::vector<double>(4, 0.0));
}

TEST(MoeLayer, BadSettingsAreClearErrors) {
  ModelConfig model;
  model.arch = Arch::Llama;
  model.num_layers = 2;
  MoeConfig moe = base_config();
  moe.topk = 5;
  ParamRegistry registry;
  TensorList scratch, shared;
  try {
    model.moe = moe;
    LayerContext ctx = one_process_context(cpu_kernels(), registry, model, LayerBuffers{scratch, shared});
    MoeLayer layer(ctx, 0, 8);
    FAIL() << "top-k 5 of 4 experts was accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("--moe-router-topk 5 must be between 1 and --num-experts 4"),
        std::string::npos)
        << e.what();
  }
  moe = base_config();
  EXPECT_TRUE(moe.violations(2, 2).empty());
  EXPECT_EQ(moe.violations(3, 2).size(), 1u);  // 4 experts over EP 3
  moe.topk = 1;
  EXPECT_EQ(moe.violations(1, 2).size(), 1u);  // top-1 softmax without pre-softmax
  moe.pre_softmax = true;
  moe.pad_to_capacity = true;
  EXPECT_EQ(moe.violations(1, 2).size(), 1u);  // padding without a capacity
  moe.pad_to_capacity = false;
  moe.layer_pattern = {1, 0, 1};
  EXPECT_EQ(moe.violations(1, 2).size(), 1u);  // 3 entries for 2 layers
}

// The training rules of MoE under tensor parallelism, each named in the one message that lists
// every violated rule.
TEST(MoeConfig, TensorParallelRulesAreNamed) {
  ModelConfig model = testing::tiny_config(Arch::Llama);
  model.vocab_size = 256;  // the byte tokenizer's
  model.moe = base_config();
  model.moe.ffn_hidden_size = 8;
  TrainOptions o;
  o.data.path = {"corpus.txt"};
  o.batch.micro_batch_size = 2;
  o.batch.global_batch_size = 6;
  ParallelConfig& layout = o.parallel.layout;
  layout.world = 6;
  layout.tp = 2;
  auto message = [&] {
    try {
      plan_training(model, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message(), "invalid configuration: --num-experts with --tensor-model-parallel-size 2 "
                       "needs --sequence-parallel");
  layout.sequence_parallel = true;
  EXPECT_EQ(message(), "");  // ETP = TP by default
  layout.etp = 1;
  EXPECT_EQ(message(), "");
  layout.etp = 3;  // neither 1 nor TP
  model.moe.shared_expert_size = 33;
  model.moe.ffn_hidden_size = 100;
  const std::string all = message();
  for (const char* rule :
       {"--expert-tensor-parallel-size 3 must be 1 or the TP size 2",
        "the expert size (--moe-ffn-hidden-size) 100 is not divisible by "
        "--expert-tensor-parallel-size 3",
        "--moe-shared-expert-intermediate-size 33 is not divisible by "
        "--tensor-model-parallel-size 2"})
    EXPECT_NE(all.find(rule), std::string::npos) << all;
}

TEST(MoeConfig, LayerFrequency) {
  EXPECT_EQ(parse_moe_layer_freq("1", 3), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(parse_moe_layer_freq("2", 5), (std::vector<int>{1, 0, 1, 0, 1}));
  EXPECT_EQ(parse_moe_layer_freq("[0, 1,1]", 3), (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(parse_moe_layer_freq("([1]*3+[0]*1)*2", 8), (std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(parse_moe_layer_freq("[0]+[1]*2", 3), (std::vector<int>{0, 1, 1}));
  for (const char* bad : {"0", "[1,0]", "[1,2,1]", "abc", "[1,0,1", "[1]*3+", ""}) {
    EXPECT_THROW(parse_moe_layer_freq(bad, 3), Error) << bad;
  }
  MoeConfig moe = base_config();
  moe.layer_pattern = {0, 1};
  EXPECT_FALSE(moe.is_moe_layer(0));
  EXPECT_TRUE(moe.is_moe_layer(1));
}

}  // namespace
}  // namespace tessel
