// The whole model: its gradient against finite differences, the backward halves against the
// combined backward, the untrained loss, and the training loop's determinism, overfitting and
// microbatch-split invariance — both architectures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "tessel/parallel/groups.h"
#include "tessel/core/philox.h"
#include "tessel/infer/generate.h"
#include "tessel/model/transformer.h"
#include "support/param_gradient_check.h"
#include "support/printers.h"
#include "support/tiny_model.h"
#include "tessel/train/trainer.h"

namespace tessel {
namespace {

using testing::tiny_config;
using testing::TinyModel;

// Both architectures, and llama with each attention option (--add-qkv-bias, --qk-layernorm) and
// with both; and Qwen3-Next's attention options.
struct Variant {
  const char* name;
  Arch arch;
  bool qkv_bias = false;
  bool qk_layernorm = false;
  void (*qwen3_next)(ModelConfig&) = nullptr;
};

// Qwen3-Next's attention: the output gate, zero-centred norms (the QK-norm's too), a head
// dimension of its own (--kv-channels 8, not hidden / heads = 4) and RoPE on half of it. (Its
// Gated DeltaNet layers: the fp32 loss's central differences are too coarse for the l2norms and
// decays of a 6-token model, so the mixer is checked against its double reference in
// gated_delta_net_test.cpp and the model with it below, SplitBackwardWithGdnLayers.)
void qwen3_next_attention(ModelConfig& c) {
  c.attention_output_gate = true;
  c.layernorm_1p = true;
  c.kv_channels = 8;
  c.rotary_percent = 0.5f;
}

const Variant kVariants[] = {{"gpt2", Arch::GPT2},
                             {"llama", Arch::Llama},
                             {"llama_qkv_bias", Arch::Llama, true, false},
                             {"llama_qk_layernorm", Arch::Llama, false, true},
                             {"llama_qkv_bias_qk_layernorm", Arch::Llama, true, true},
                             {"qwen3_next_attention", Arch::Llama, false, true, qwen3_next_attention}};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

ModelConfig variant_config(const Variant& v) {
  ModelConfig c = tiny_config(v.arch);
  c.add_qkv_bias = v.qkv_bias;
  c.qk_layernorm = v.qk_layernorm;
  if (v.qwen3_next != nullptr) v.qwen3_next(c);
  return c;
}

class ModelGradient : public ::testing::TestWithParam<Variant> {};

// Every parameter's gradient against central differences of the fp32 loss, the weights spread
// (TinyModel::spread_weights).
TEST_P(ModelGradient, MatchesFiniteDifferences) {
  ModelConfig cfg = variant_config(GetParam());
  TinyModel m(cfg, 2);
  m.spread_weights();

  m.params.zero_grads();
  const float scale = 1.0f / m.tokens.size();
  m.chunk.forward(m.acts, {{"tokens", m.tokens.data()}, {"targets", m.targets.data()}}, nullptr, scale);
  m.chunk.backward(m.acts, nullptr, nullptr);

  for (const Param& p : m.params.params()) {
    const auto [error, norm] = testing::check_param_gradient(p, [&] { return m.loss(); }, 3e-3f);
    EXPECT_LT(error, 2e-3 * norm + 1e-5) << p.name;
  }
}

// At initialisation the logits are nearly uniform: the loss is ln(vocab).
TEST_P(ModelGradient, UntrainedLossIsLogVocab) {
  ModelConfig cfg = variant_config(GetParam());
  cfg.vocab_size = 256;
  cfg.hidden_size = 64;
  cfg.seq_length = 32;
  TinyModel m(cfg, 4);
  EXPECT_NEAR(m.loss(), std::log(256.0), 0.05);
}

// The backward halves against the combined backward, on two microbatches, for a whole model
// (embedding, head and loss) and for a middle chunk (input and output gradients from neighbours).
// Combined: F0 F1 B0 B1. Split in the zero-bubble order: F0 F1 I0 I1 W0 W1 — W0 running after
// I1 needs microbatch 0's saved output gradients to be its own. The halves run the same kernels
// on the same operands in the same order per gradient, so everything must match bitwise. The
// second microbatch reports to grad_ready, as the executor's last microbatch does: every
// parameter exactly once, and its gradient must already be final when reported.
void check_split_backward(const ModelConfig& cfg, ChunkSpec spec) {
  const int64_t batch = 2, n = batch * cfg.seq_length, C = cfg.hidden_size;
  ParamRegistry params;
  const Kernels& k = cpu_kernels();
  TransformerChunk chunk(k, params, cfg, {.spec = spec, .micro_batch = batch}, ChunkGroups::one_process(k));
  params.finalize();
  chunk.bind(params);
  params.init_values(7);
  const float scale = 1.0f / (2 * n);
  ChunkActivations acts[2] = {chunk.make_activations(), chunk.make_activations()};
  std::vector<int32_t> tokens[2], targets[2];
  std::vector<float> input[2], d_output[2], d_input[2];
  for (int mb = 0; mb < 2; ++mb) {
    for (int64_t i = 0; i < n; ++i) {
      tokens[mb].push_back(static_cast<int32_t>(random_bits(3, 1 + 2 * mb, i) % cfg.vocab_size));
      targets[mb].push_back(static_cast<int32_t>(random_bits(3, 2 + 2 * mb, i) % cfg.vocab_size));
    }
    for (int64_t i = 0; i < n * C; ++i) {
      input[mb].push_back(random_normal(4, mb, i));
      d_output[mb].push_back(0.01f * random_normal(5, mb, i));
    }
    d_input[mb].assign(n * C, 0.0f);
  }
  auto forward = [&](int mb) {
    InputRows rows;
    if (spec.has_embedding) rows["tokens"] = tokens[mb].data();
    if (spec.has_head) rows["targets"] = targets[mb].data();
    chunk.forward(acts[mb], rows, spec.has_embedding ? nullptr : input[mb].data(), scale);
  };
  const bool gives_d_input = !spec.has_embedding;
  auto d_in = [&](int mb) { return gives_d_input ? d_input[mb].data() : nullptr; };

  params.zero_grads();
  forward(0);
  forward(1);
  chunk.backward(acts[0], d_output[0].data(), d_in(0));
  chunk.backward(acts[1], d_output[1].data(), d_in(1));
  const std::vector<float> grads(params.grads(), params.grads() + params.numel());
  const std::vector<float> d_input_combined[2] = {d_input[0], d_input[1]};

  params.zero_grads();
  for (std::vector<float>& d : d_input) std::fill(d.begin(), d.end(), 0.0f);
  std::vector<std::vector<float>> reported(params.params().size());
  const std::function<void(int)> grad_ready = [&](int index) {
    const Param& p = params.params()[index];
    EXPECT_TRUE(reported[index].empty()) << p.name << " reported twice";
    reported[index].assign(p.grad, p.grad + p.numel());
  };
  forward(0);
  forward(1);
  chunk.backward_input(acts[0], d_output[0].data(), d_in(0));
  chunk.backward_input(acts[1], d_output[1].data(), d_in(1), grad_ready);
  chunk.backward_weight(acts[0]);
  chunk.backward_weight(acts[1], grad_ready);

  for (const Param& p : params.params()) {
    int64_t differ = 0;
    for (int64_t i = 0; i < p.numel(); ++i) differ += p.grad[i] != grads[p.offset + i];
    EXPECT_EQ(differ, 0) << p.name << ": gradient elements that differ from the combined backward";
    const std::vector<float>& at_report = reported[&p - params.params().data()];
    ASSERT_EQ(static_cast<int64_t>(at_report.size()), p.numel()) << p.name << " never reported";
    EXPECT_TRUE(std::equal(at_report.begin(), at_report.end(), p.grad))
        << p.name << " changed after it was reported final";
  }
  EXPECT_NE(grads, std::vector<float>(grads.size(), 0.0f));
  if (gives_d_input) {
    for (int mb = 0; mb < 2; ++mb) {
      EXPECT_EQ(d_input[mb], d_input_combined[mb]) << "microbatch " << mb;
      EXPECT_NE(d_input[mb], std::vector<float>(n * C, 0.0f));
    }
  }
}

TEST_P(ModelGradient, SplitBackwardMatchesCombinedWholeModel) {
  check_split_backward(variant_config(GetParam()), ChunkSpec{0, 2, true, true});
}

TEST_P(ModelGradient, SplitBackwardMatchesCombinedMiddleChunk) {
  check_split_backward(variant_config(GetParam()), ChunkSpec{0, 2, false, false});
}

// Qwen3-Next's layers: a Gated DeltaNet layer (2 key heads, 4 value heads) then gated attention.
TEST(Qwen3NextModel, SplitBackwardWithGdnLayersAndUntrainedLoss) {
  ModelConfig c = tiny_config(Arch::Llama);
  c.qk_layernorm = true;
  qwen3_next_attention(c);
  c.linear = {.layer_pattern = {1, 0}, .conv_kernel_dim = 3, .key_head_dim = 4, .value_head_dim = 4,
              .num_key_heads = 2, .num_value_heads = 4};
  check_split_backward(c, ChunkSpec{0, 2, true, true});
  check_split_backward(c, ChunkSpec{0, 2, false, false});
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.seq_length = 80;  // two delta-rule chunks
  TinyModel m(c, 2);
  EXPECT_NEAR(m.loss(), std::log(256.0), 0.05);
}

INSTANTIATE_TEST_SUITE_P(Arches, ModelGradient, ::testing::ValuesIn(kVariants),
                         [](const auto& info) { return std::string(info.param.name); });

// The options' parameters: Hugging Face names and shapes, their initial values (biases 0, norm
// weights 1), no weight decay, the q/k/v biases split over TP like their weights' output rows and
// the QK-norm weights replicated; and the parameter count agrees with the config's.
TEST(ModelParams, AttentionOptionsDeclareQwenParameters) {
  ModelConfig cfg = variant_config(kVariants[4]);
  cfg.make_vocab_size_divisible_by = 1;  // no padding rows: the count is the config's
  const int64_t D = cfg.head_dim(), G = cfg.query_groups();
  ParamRegistry params;
  const Kernels& k = cpu_kernels();
  TransformerChunk chunk(k, params, cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}, .micro_batch = 2},
                         ChunkGroups::one_process(k));
  params.finalize();
  params.init_values(3);
  EXPECT_EQ(params.numel(), cfg.num_parameters());
  const Param& qb = params.get("model.layers.1.self_attn.q_proj.bias");
  const Param& kb = params.get("model.layers.1.self_attn.k_proj.bias");
  const Param& vb = params.get("model.layers.0.self_attn.v_proj.bias");
  const Param& qn = params.get("model.layers.1.self_attn.q_norm.weight");
  const Param& kn = params.get("model.layers.0.self_attn.k_norm.weight");
  EXPECT_EQ(qb.global_shape, (Shape{cfg.hidden_size}));
  EXPECT_EQ(kb.global_shape, (Shape{G * D}));
  EXPECT_EQ(vb.global_shape, (Shape{G * D}));
  EXPECT_EQ(qn.global_shape, (Shape{D}));
  EXPECT_EQ(kn.global_shape, (Shape{D}));
  for (const Param* p : {&qb, &kb, &vb}) {
    EXPECT_EQ(p->shard.dim, 0) << p->name;
    EXPECT_EQ(p->shard.group, ShardGroup::TP) << p->name;
  }
  EXPECT_TRUE(qn.replicated());
  EXPECT_TRUE(kn.replicated());
  for (const Param* p : {&qb, &kb, &vb, &qn, &kn}) {
    EXPECT_FALSE(p->weight_decay) << p->name;
    const float want = p == &qn || p == &kn ? 1.0f : 0.0f;
    for (int64_t i = 0; i < p->numel(); ++i) ASSERT_EQ(p->value[i], want) << p->name;
  }
  ModelConfig plain = cfg;
  plain.add_qkv_bias = plain.qk_layernorm = false;
  EXPECT_EQ(cfg.num_parameters() - plain.num_parameters(),
            cfg.num_layers * (cfg.hidden_size + 2 * G * D + 2 * D));
}

// A small text file for training-loop tests, written once into the test's temp folder.
std::string write_text(const std::string& name, const std::string& text) {
  std::filesystem::path path = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path.string();
}

std::vector<IterationStats> train(const ModelConfig& cfg, const TrainOptions& o) {
  ProcessGroups groups = ProcessGroups::single();
  return tessel::train(plan_training(cfg, o), groups);
}

std::string corpus_path() { return std::string(TESSEL_SOURCE_DIR) + "/data/kjv-genesis-esther.txt"; }

TrainOptions small_run(const ModelConfig& cfg, int64_t iters) {
  TrainOptions o;
  o.data.path = {corpus_path()};
  o.batch.micro_batch_size = 4;
  o.batch.global_batch_size = 8;
  o.log.interval = 1000;
  o.eval.iters = 0;  // no validation: these runs train only
  o.optim.lr = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup_iters = 2, .train_iters = iters,
          .style = LrDecayStyle::Cosine};
  return o;
}

ModelConfig byte_config(Arch arch) {
  ModelConfig c = tiny_config(arch);
  c.vocab_size = 256;
  c.hidden_size = 32;
  c.seq_length = 32;
  return c;
}

class TrainLoop : public ::testing::TestWithParam<Arch> {};

TEST_P(TrainLoop, SameSeedGivesBitwiseIdenticalLosses) {
  ModelConfig cfg = byte_config(GetParam());
  TrainOptions o = small_run(cfg, 5);
  std::vector<IterationStats> a = train(cfg, o), b = train(cfg, o);
  ASSERT_EQ(a.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].loss, b[i].loss) << "iteration " << i + 1;
  o.seed += 1;
  std::vector<IterationStats> c = train(cfg, o);
  EXPECT_NE(a[0].loss, c[0].loss);
}

// The loss is the mean over the global batch however it is cut into microbatches.
TEST_P(TrainLoop, MicrobatchSplitDoesNotChangeTheTrajectory) {
  ModelConfig cfg = byte_config(GetParam());
  TrainOptions whole = small_run(cfg, 4);
  whole.batch.micro_batch_size = 8;
  TrainOptions split = whole;
  split.batch.micro_batch_size = 2;
  std::vector<IterationStats> a = train(cfg, whole), b = train(cfg, split);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i].loss, b[i].loss, 1e-5 * a[i].loss) << "iteration " << i + 1;
    EXPECT_NEAR(a[i].grad_norm, b[i].grad_norm, 1e-4 * a[i].grad_norm) << "iteration " << i + 1;
  }
}

// One document exactly one sample long, so every sample is that document (samples overlap by one
// token: sample k starts at token 32k of the repeated document): the model memorises it.
TEST_P(TrainLoop, OverfitsOneBatch) {
  ModelConfig cfg = byte_config(GetParam());
  cfg.hidden_size = 64;
  cfg.hidden_dropout = cfg.attention_dropout = 0.0f;  // memorising needs every unit every step
  TrainOptions o = small_run(cfg, 150);
  // One file per architecture: ctest runs the two cases side by side.
  o.data.path = {write_text("tessel_overfit_" + arch_name(GetParam()) + ".txt",
                           "In the beginning God created the")};  // 32 bytes
  o.batch.micro_batch_size = 1;
  o.batch.global_batch_size = 1;
  o.optim.lr = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup_iters = 5, .train_iters = 150,
          .style = LrDecayStyle::Cosine};
  std::vector<IterationStats> h = train(cfg, o);
  EXPECT_GT(h.front().loss, 5.0);
  EXPECT_LT(h.back().loss, 0.05);
}

INSTANTIATE_TEST_SUITE_P(Arches, TrainLoop, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return arch_name(info.param); });

// Initial values depend on (seed, name, element) only: a shard draws exactly its slice.
TEST(ParamRegistry, ShardInitialisesItsSliceOfTheGlobalTensor) {
  ParamRegistry whole, shard;
  whole.add("w", {6, 8}, ParamInit::Normal, 1.0f, true);
  shard.add("w", {6, 8}, ParamInit::Normal, 1.0f, true,
            ShardSpec{.dim = 1, .group = ShardGroup::TP, .index = 1, .count = 2, .sections = {4, 4}});
  whole.finalize();
  shard.finalize();
  whole.init_values(42);
  shard.init_values(42);
  const float* g = whole.get("w").value;
  const float* s = shard.get("w").value;
  // Columns split in two fused parts of 4; rank 1 of 2 holds columns {2,3} and {6,7}.
  const int cols[4] = {2, 3, 6, 7};
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(s[r * 4 + c], g[r * 8 + cols[c]]);
}

// Sampling draws each token with its softmax probability at the temperature, among the top k.
TEST(Generate, SampleTokenFollowsTheDistribution) {
  const float logits[4] = {0.0f, std::log(2.0f), std::log(4.0f), -50.0f};  // p ∝ 1, 2, 4, ~0
  std::vector<std::pair<float, int32_t>> scratch;
  int counts[4] = {0, 0, 0, 0};
  const int n = 7000;
  for (int i = 0; i < n; ++i) ++counts[sample_token(logits, 4, 1.0f, 0, (i + 0.5f) / n, scratch)];
  EXPECT_NEAR(counts[0], 1000, 2);
  EXPECT_NEAR(counts[1], 2000, 2);
  EXPECT_NEAR(counts[2], 4000, 2);
  // Temperature 2 flattens: p ∝ 1, √2, 2.
  int flat = 0;
  for (int i = 0; i < n; ++i) flat += sample_token(logits, 4, 2.0f, 0, (i + 0.5f) / n, scratch) == 2;
  EXPECT_NEAR(flat, n * 2 / (3 + std::sqrt(2.0)), 3);
  // Top-1 and temperature 0 are greedy.
  EXPECT_EQ(sample_token(logits, 4, 1.0f, 1, 0.01f, scratch), 2);
  EXPECT_EQ(sample_token(logits, 4, 0.0f, 0, 0.01f, scratch), 2);
  // Top-2 renormalises over {2, 1}: u below 4/6 gives 2.
  EXPECT_EQ(sample_token(logits, 4, 1.0f, 2, 0.6f, scratch), 2);
  EXPECT_EQ(sample_token(logits, 4, 1.0f, 2, 0.7f, scratch), 1);
}

}  // namespace
}  // namespace tessel
