// Multi-token prediction (model/mtp.h): the shifted rows and their counts, the module's gradient
// against finite differences of the whole objective (LM loss + s/D · Σ depth losses) on a tiny
// model with two depths, its split backward equal to the combined one, and its parameters under
// Hugging Face's names.
#include <gtest/gtest.h>

#include <cmath>

#include "support/param_gradient_check.h"
#include "support/tiny_model.h"
#include "tessel/core/philox.h"
#include "tessel/data/batches.h"
#include "tessel/model/transformer.h"

namespace tessel {
namespace {

// The depths' loss sums since the last take (model/step_terms.h's "mtp" term).
std::vector<double> mtp_sums(TransformerChunk& chunk) {
  for (const StepTerm& t : chunk.take_step_terms())
    if (t.name == "mtp") return t.sums;
  return {};
}

TEST(MtpRows, ShiftWithinEachSequenceAndCountTheLoss) {
  const std::vector<int32_t> rows = {1, 2, 3, 4, 5, 6, 7, 8};  // (2, 4)
  std::vector<int32_t> out(8);
  shift_rows(rows.data(), out.data(), 2, 4, 1, 0);
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 4, 0, 6, 7, 8, 0}));
  shift_rows(rows.data(), out.data(), 2, 4, 2, -1);
  EXPECT_EQ(out, (std::vector<int32_t>{3, 4, -1, -1, 7, 8, -1, -1}));
  const std::vector<int32_t> targets = {1, -1, 3, 4, 5, 6, -1, 8};
  EXPECT_EQ(count_targets_from(targets.data(), 2, 4, 0), 6);
  EXPECT_EQ(count_targets_from(targets.data(), 2, 4, 1), 4);   // 3, 4 | 6, 8
  EXPECT_EQ(count_targets_from(targets.data(), 2, 4, 2), 3);   // 3, 4 | 8
}

// Qwen3-Next's attention options (gate, zero-centred norms, head dimension of its own, partial
// RoPE) and two MTP depths, each with its own fc, norms and layer.
ModelConfig mtp_config() {
  ModelConfig c = testing::tiny_config(Arch::Llama);
  c.qk_layernorm = true;
  c.attention_output_gate = true;
  c.layernorm_1p = true;
  c.kv_channels = 8;
  c.rotary_percent = 0.5f;
  c.mtp_num_layers = 2;
  c.mtp_loss_scaling_factor = 1.0f;  // gradients large enough for fp32 central differences
  return c;
}

struct MtpModel {
  ParamRegistry params;
  TransformerChunk chunk;
  ChunkActivations acts;
  std::vector<int32_t> tokens, targets, mtp_tokens, mtp_targets;
  std::vector<float> scales;
  float scale = 0;

  MtpModel(const ModelConfig& cfg, int64_t B)
      : chunk(cpu_kernels(), params, cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}, .micro_batch = B},
              ChunkGroups::one_process(cpu_kernels())) {
    params.finalize();
    chunk.bind(params);
    params.init_values(7);
    acts = chunk.make_activations();
    const int64_t T = cfg.seq_length, n = B * T;
    for (int64_t i = 0; i < n; ++i) {
      tokens.push_back(static_cast<int32_t>(random_bits(3, 1, i) % cfg.vocab_size));
      // Some targets out of the loss, as --eod-mask-loss leaves them.
      targets.push_back(i % 5 == 3 ? -1 : static_cast<int32_t>(random_bits(3, 2, i) % cfg.vocab_size));
    }
    std::vector<int32_t> shifted(n);
    for (int d = 1; d <= cfg.mtp_num_layers; ++d) {
      shift_rows(tokens.data(), shifted.data(), B, T, d, 0);
      mtp_tokens.insert(mtp_tokens.end(), shifted.begin(), shifted.end());
      shift_rows(targets.data(), shifted.data(), B, T, d, -1);
      mtp_targets.insert(mtp_targets.end(), shifted.begin(), shifted.end());
      scales.push_back(cfg.mtp_loss_scaling_factor / cfg.mtp_num_layers /
                       count_targets_from(targets.data(), B, T, d));
    }
    scale = 1.0f / count_targets_from(targets.data(), B, T, 0);
    chunk.set_loss_scales("mtp", scales);
  }
  double forward() {
    mtp_sums(chunk);
    return chunk.forward(acts,
                         {{"tokens", tokens.data()},
                          {"targets", targets.data()},
                          {"shifted_tokens", mtp_tokens.data()},
                          {"shifted_targets", mtp_targets.data()}},
                         nullptr, scale);
  }
  // The objective: the LM loss plus each depth's loss at its weight.
  double objective() {
    double j = forward() * scale;
    const std::vector<double> sums = mtp_sums(chunk);
    for (size_t d = 0; d < sums.size(); ++d) j += scales[d] * sums[d];
    return j;
  }
};

TEST(Mtp, GradientMatchesFiniteDifferences) {
  MtpModel m(mtp_config(), 2);
  for (Param& p : m.params.params())
    if (p.init == ParamInit::Normal)
      for (int64_t i = 0; i < p.numel(); ++i) p.value[i] *= 8.0f;  // softer attention than model_test's 15: the MTP layer deepens it
    else
      for (int64_t i = 0; i < p.numel(); ++i) p.value[i] += 0.3f * random_normal(5, p.offset, i);
  m.params.zero_grads();
  m.forward();
  const std::vector<double> sums = mtp_sums(m.chunk);
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_GT(sums[0], 0.0);
  EXPECT_GT(sums[1], 0.0);
  m.chunk.backward(m.acts, nullptr, nullptr);

  const float h = 3e-3f;
  int mtp_params = 0;
  for (const Param& p : m.params.params()) {
    mtp_params += p.name.starts_with("mtp.");
    const auto [error, norm] = testing::check_param_gradient(p, [&] { return m.objective(); }, h);
    EXPECT_GT(norm, 0.0) << p.name << " has no gradient";
    // The floor: the fp32 objective (≈ 5, rounding 3e-7) over 2h, for ~48 elements ≈ 1e-4.
    EXPECT_LT(error, 2e-3 * norm + 1e-4) << p.name;
  }
  EXPECT_GT(mtp_params, 10);
}

// backward_input then backward_weight adds the same gradients as backward, bitwise, and every
// parameter is reported once its gradient is final.
TEST(Mtp, SplitBackwardMatchesCombined) {
  MtpModel m(mtp_config(), 2);
  m.params.zero_grads();
  m.forward();
  m.chunk.backward(m.acts, nullptr, nullptr);
  std::vector<std::vector<float>> combined;
  for (const Param& p : m.params.params()) combined.emplace_back(p.grad, p.grad + p.numel());
  m.params.zero_grads();
  m.forward();
  std::vector<int> reports(m.params.params().size(), 0);
  const GradReady ready = [&](int i) { ++reports[i]; };
  m.chunk.backward_input(m.acts, nullptr, nullptr, ready);
  m.chunk.backward_weight(m.acts, ready);
  for (const Param& p : m.params.params()) {
    const size_t i = &p - m.params.params().data();
    EXPECT_TRUE(std::equal(combined[i].begin(), combined[i].end(), p.grad)) << p.name;
    EXPECT_EQ(reports[i], 1) << p.name;
  }
}

TEST(Mtp, ParametersUnderHuggingFaceNames) {
  ModelConfig c = mtp_config();
  c.mtp_num_layers = 1;
  c.moe = {.num_experts = 4, .topk = 2, .ffn_hidden_size = 8, .shared_expert_size = 8, .shared_expert_gate = true};
  ParamRegistry params;
  TransformerChunk::declare(c, {.spec = ChunkSpec{0, c.num_layers, true, true}, .micro_batch = 2}, ChunkPlace{},
                            params);
  for (const char* name :
       {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.fc.weight", "mtp.norm.weight",
        "mtp.layers.0.input_layernorm.weight", "mtp.layers.0.self_attn.q_proj.weight",
        "mtp.layers.0.self_attn.q_norm.weight", "mtp.layers.0.post_attention_layernorm.weight",
        "mtp.layers.0.mlp.gate.weight", "mtp.layers.0.mlp.experts.3.down_proj.weight",
        "mtp.layers.0.mlp.shared_expert.up_proj.weight", "mtp.layers.0.mlp.shared_expert_gate.weight"})
    EXPECT_TRUE(params.has(name)) << name;
  EXPECT_EQ(params.get("mtp.fc.weight").global_shape, Shape({c.hidden_size, 2 * c.hidden_size}));
  // The MTP layer's parameters, as the config counts them, are the declared ones.
  auto declared = [](const ModelConfig& m) {
    ParamRegistry r;
    TransformerChunk::declare(m, {.spec = ChunkSpec{0, m.num_layers, true, true}, .micro_batch = 2}, ChunkPlace{}, r);
    int64_t n = 0;
    for (const Param& p : r.params()) n += p.numel();
    return n;
  };
  ModelConfig without = c;
  without.mtp_num_layers = 0;
  EXPECT_EQ(declared(c) - declared(without), c.num_parameters() - without.num_parameters());
}

}  // namespace
}  // namespace tessel
