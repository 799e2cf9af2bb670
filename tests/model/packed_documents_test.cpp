// Packed documents (Megatron's --reset-position-ids, --reset-attention-mask,
// --eod-mask-loss): a sample holding two documents gives each document the loss
// and the gradients it has when it is trained alone, at the start of its own
// sequence — both architectures (learned positions and RoPE). The rows come
// from data/batches.h's sample_rows, as the trainer makes them.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/printers.h"
#include "support/tiny_model.h"
#include "tessel/core/philox.h"
#include "tessel/data/batches.h"
#include "tessel/model/transformer.h"

namespace tessel {
namespace {

constexpr int32_t kEod = 10;  // the tiny vocabulary's last id
constexpr int64_t kSeq = 12;

struct Rows {
  std::vector<int32_t> inputs, targets, position_ids, key_start;
};

// One sample of kSeq + 1 tokens through sample_rows.
Rows rows_of(const std::vector<int32_t> &tokens, const Packing &packing) {
  EXPECT_EQ(static_cast<int64_t>(tokens.size()), kSeq + 1);
  Rows r;
  r.inputs.resize(kSeq);
  r.targets.resize(kSeq);
  if (packing.documents()) {
    r.position_ids.resize(kSeq);
    r.key_start.resize(kSeq);
  }
  sample_rows(tokens, packing, r.inputs.data(), r.targets.data(),
              r.position_ids.empty() ? nullptr : r.position_ids.data(),
              r.key_start.empty() ? nullptr : r.key_start.data());
  return r;
}

struct Result {
  double loss_sum;
  std::vector<float> grads;
};

class PackedModel {
 public:
  explicit PackedModel(Arch arch)
      : cfg_(config(arch)),
        chunk_(k(), params_, cfg_, {.spec = ChunkSpec{0, cfg_.num_layers, true, true}},
               ChunkGroups::one_process(k())) {
    params_.finalize();
    chunk_.bind(params_);
    params_.init_values(3);
    // Away from the 0.02 initialisation, so that positions and attention
    // matter.
    for (Param &p : params_.params())
      if (p.init == ParamInit::Normal)
        for (int64_t i = 0; i < p.numel(); ++i) p.value[i] *= 10.0f;
    acts_ = chunk_.make_activations();
  }

  // Σ token losses and the gradient of that sum.
  Result run(const Rows &rows) {
    params_.zero_grads();
    InputRows inputs{{"tokens", rows.inputs.data()}, {"targets", rows.targets.data()}};
    if (!rows.position_ids.empty()) inputs["position_ids"] = rows.position_ids.data();
    if (!rows.key_start.empty()) inputs["key_start"] = rows.key_start.data();
    Result r;
    r.loss_sum = chunk_.forward(acts_, inputs, nullptr, 1.0f);
    chunk_.backward(acts_, nullptr, nullptr);
    r.grads.assign(params_.grads(), params_.grads() + params_.numel());
    return r;
  }

 private:
  static const Kernels &k() { return cpu_kernels(); }
  static ModelConfig config(Arch arch) {
    ModelConfig c = testing::tiny_config(arch);
    c.seq_length = kSeq;
    return c;
  }
  ModelConfig cfg_;
  ParamRegistry params_;
  TransformerChunk chunk_;
  ChunkActivations acts_;
};

std::vector<int32_t> random_tokens(int64_t n, uint64_t stream) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i)
    t.push_back(static_cast<int32_t>(random_bits(9, stream, i) % kEod));
  return t;
}

// Document `doc` (ending in an eod or not) at the start of a sequence, the rest
// junk whose targets are left out of the loss: the document alone.
Rows alone(const std::vector<int32_t> &doc) {
  std::vector<int32_t> tokens = doc;
  const std::vector<int32_t> junk = random_tokens(kSeq + 1 - static_cast<int64_t>(doc.size()), 7);
  tokens.insert(tokens.end(), junk.begin(), junk.end());
  Rows r = rows_of(tokens, Packing{.eod_mask_loss = true, .eod = kEod});
  for (size_t t = doc.size() - 1; t < r.targets.size(); ++t) r.targets[t] = -1;
  return r;
}

// Relative distance between two gradients.
double distance(const std::vector<float> &a, const std::vector<float> &b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

class PackedDocuments : public ::testing::TestWithParam<Arch> {};

// Document A: 5 tokens and its eod; document B: the 7 tokens after it. Rows
// 0..5 read A (row 5, whose input is the eod, is masked: it would predict B's
// first token), rows 6..11 read B.
TEST_P(PackedDocuments, EachDocumentTrainsAsAlone) {
  PackedModel model(GetParam());
  std::vector<int32_t> a = random_tokens(5, 1), b = random_tokens(7, 2);
  a.push_back(kEod);
  std::vector<int32_t> sample = a;
  sample.insert(sample.end(), b.begin(), b.end());
  const Packing packing{
      .reset_position_ids = true, .reset_attention_mask = true, .eod_mask_loss = true, .eod = kEod};
  const Rows packed = rows_of(sample, packing);
  ASSERT_EQ(packed.targets[5], -1) << "the eod's target is left out of the loss";
  ASSERT_EQ(packed.position_ids[6], 0);
  ASSERT_EQ(packed.key_start[6], 6);

  // Each document's own targets only, in the packed sample and alone.
  Rows packed_a = packed, packed_b = packed;
  for (int64_t t = 0; t < kSeq; ++t) (t < 6 ? packed_b : packed_a).targets[t] = -1;
  const Result got_a = model.run(packed_a), want_a = model.run(alone(a));
  const Result got_b = model.run(packed_b), want_b = model.run(alone(b));
  EXPECT_NEAR(got_a.loss_sum, want_a.loss_sum, 1e-5 * want_a.loss_sum);
  EXPECT_NEAR(got_b.loss_sum, want_b.loss_sum, 1e-5 * want_b.loss_sum);
  EXPECT_LT(distance(got_a.grads, want_a.grads), 1e-5);
  EXPECT_LT(distance(got_b.grads, want_b.grads), 1e-5);

  // Both at once: the sums of the two.
  const Result both = model.run(packed);
  EXPECT_NEAR(both.loss_sum, want_a.loss_sum + want_b.loss_sum, 1e-5 * both.loss_sum);
  std::vector<float> sum = want_a.grads;
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += want_b.grads[i];
  EXPECT_LT(distance(both.grads, sum), 1e-5);

  // The test can fail: without the position reset and the mask, B sees A and
  // sits at 6..11.
  Rows unpacked_b = rows_of(sample, Packing{.eod_mask_loss = true, .eod = kEod});
  unpacked_b.targets = packed_b.targets;
  const Result mixed = model.run(unpacked_b);
  EXPECT_GT(std::abs(mixed.loss_sum - want_b.loss_sum), 1e-3 * want_b.loss_sum);
}

// Each flag does its part. Restarting the positions without the mask leaves B
// attending to A; the mask without restarting leaves B at positions 6..11:
// learned positions (GPT-2) see that, RoPE (Llama) does not — its scores depend
// only on distances — so there the mask alone suffices.
TEST_P(PackedDocuments, EachResetDoesItsPart) {
  PackedModel model(GetParam());
  std::vector<int32_t> a = random_tokens(5, 3), b = random_tokens(7, 4);
  a.push_back(kEod);
  std::vector<int32_t> sample = a;
  sample.insert(sample.end(), b.begin(), b.end());
  const double want = model.run(alone(b)).loss_sum;
  auto loss_of_b = [&](const Packing &p) {
    Rows rows = rows_of(sample, p);
    for (int64_t t = 0; t < 6; ++t) rows.targets[t] = -1;
    return model.run(rows).loss_sum;
  };
  const double positions_only =
      loss_of_b(Packing{.reset_position_ids = true, .eod_mask_loss = true, .eod = kEod});
  const double mask_only =
      loss_of_b(Packing{.reset_attention_mask = true, .eod_mask_loss = true, .eod = kEod});
  EXPECT_GT(std::abs(positions_only - want), 1e-3 * want);
  if (GetParam() == Arch::GPT2)
    EXPECT_GT(std::abs(mask_only - want), 1e-3 * want);
  else
    EXPECT_NEAR(mask_only, want, 1e-5 * want);
}

INSTANTIATE_TEST_SUITE_P(Arches, PackedDocuments, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto &info) { return arch_name(info.param); });

}  // namespace
}  // namespace tessel
