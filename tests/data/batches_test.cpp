// The training batches on the host: Megatron's masks and position ids of packed documents
// against a transcription of get_ltor_masks_and_position_ids with its full (S, S) attention mask,
// the sampler's dealing of samples to DP ranks and microbatches, and the prefetching loader.
#include <gtest/gtest.h>

#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/data/batches.h"

namespace tessel {
namespace {

constexpr int32_t kEod = 0;

// Megatron's loop over one sample's input tokens, as its Python writes it: a full lower-triangular
// mask with the blocks before each eod cut, positions shifted after each eod, the loss mask.
struct MegatronMasks {
  std::vector<std::vector<bool>> attention;  // [t][s]: t may attend to s
  std::vector<int32_t> position_ids;
  std::vector<bool> loss_mask;
};

MegatronMasks megatron_masks(const std::vector<int32_t>& data, bool reset_position_ids,
                             bool reset_attention_mask, bool eod_mask_loss) {
  const size_t S = data.size();
  MegatronMasks m;
  m.attention.assign(S, std::vector<bool>(S, false));
  for (size_t t = 0; t < S; ++t)
    for (size_t s = 0; s <= t; ++s) m.attention[t][s] = true;
  m.loss_mask.assign(S, true);
  if (eod_mask_loss)
    for (size_t i = 0; i < S; ++i)
      if (data[i] == kEod) m.loss_mask[i] = false;
  m.position_ids.resize(S);
  std::iota(m.position_ids.begin(), m.position_ids.end(), 0);
  std::vector<int32_t> eod_index;
  for (size_t i = 0; i < S; ++i)
    if (data[i] == kEod) eod_index.push_back(static_cast<int32_t>(i));
  int32_t prev_index = 0;
  for (int32_t i : eod_index) {
    if (reset_attention_mask)
      for (size_t t = i + 1; t < S; ++t)
        for (int32_t s = 0; s <= i; ++s) m.attention[t][s] = false;
    if (reset_position_ids) {
      for (size_t t = i + 1; t < S; ++t) m.position_ids[t] -= i + 1 - prev_index;
      prev_index = i + 1;
    }
  }
  return m;
}

// Samples of seq_length + 1 tokens with documents of varied lengths (eod = 0 ends each).
class FixedSamples final : public SampleDataset {
 public:
  FixedSamples(int64_t count, int64_t seq_length) : count_(count), S_(seq_length) {}
  int64_t size() const override { return count_; }
  int64_t seq_length() const override { return S_; }
  void sample(int64_t i, std::span<int32_t> tokens, std::vector<int32_t>*) const override {
    if (i < 0 || i >= count_) throw Error("sample " + std::to_string(i) + " out of range");
    for (int64_t t = 0; t <= S_; ++t)
      tokens[t] = (i * 7 + t * 3) % (5 + i % 4) == 0 ? kEod : static_cast<int32_t>(1 + (i + t) % 50);
  }

 private:
  int64_t count_, S_;
};

TEST(SampleRows, MatchMegatronsMasksAndPositions) {
  const FixedSamples data(12, 24);
  std::vector<int32_t> tokens(25);
  for (int flags = 0; flags < 8; ++flags) {
    const Packing packing{.reset_position_ids = (flags & 1) != 0,
                          .reset_attention_mask = (flags & 2) != 0,
                          .eod_mask_loss = (flags & 4) != 0,
                          .eod = kEod};
    for (int64_t i = 0; i < data.size(); ++i) {
      data.sample(i, tokens, nullptr);
      std::vector<int32_t> inputs(24), targets(24), positions(24, -7), starts(24, -7);
      const int64_t counted = sample_rows(tokens, packing, inputs.data(), targets.data(),
                                          positions.data(), starts.data());
      const std::vector<int32_t> data_in(tokens.begin(), tokens.end() - 1);
      const MegatronMasks want = megatron_masks(data_in, packing.reset_position_ids,
                                                packing.reset_attention_mask, packing.eod_mask_loss);
      int64_t want_counted = 0;
      for (int64_t t = 0; t < 24; ++t) {
        EXPECT_EQ(inputs[t], tokens[t]);
        EXPECT_EQ(targets[t], want.loss_mask[t] ? tokens[t + 1] : -1) << "flags " << flags;
        want_counted += want.loss_mask[t];
        if (!packing.documents()) continue;
        EXPECT_EQ(positions[t], want.position_ids[t]) << "flags " << flags << " row " << t;
        // key_start[t] is where row t's visible keys begin: the mask row is [start, t].
        for (int64_t s = 0; s < 24; ++s)
          EXPECT_EQ(want.attention[t][s], s >= starts[t] && s <= t)
              << "flags " << flags << " sample " << i << " row " << t << " key " << s;
      }
      EXPECT_EQ(counted, want_counted);
    }
  }
}

TEST(BatchShape, DealsSamplesAsMegatronsSampler) {
  // Megatron's MegatronPretrainingSampler: each step takes micro_batch × DP samples, DP rank r
  // the r-th micro_batch of them.
  const BatchShape rank2{.micro_batch = 3, .data_parallel = 4, .dp_rank = 2, .microbatches = 2};
  EXPECT_EQ(rank2.global_batch(), 24);
  EXPECT_EQ(rank2.position(0, 0), 6);
  EXPECT_EQ(rank2.position(0, 2), 8);
  EXPECT_EQ(rank2.position(1, 0), 18);
  // Every position of the global batch belongs to exactly one (rank, microbatch, row).
  std::vector<int> seen(24, 0);
  for (int64_t r = 0; r < 4; ++r) {
    BatchShape shape = rank2;
    shape.dp_rank = r;
    for (int64_t m = 0; m < 2; ++m)
      for (int64_t b = 0; b < 3; ++b) ++seen[shape.position(m, b)];
  }
  for (int n : seen) EXPECT_EQ(n, 1);
}

TEST(BatchLoader, PrefetchedBatchesEqualBatchesReadOnDemand) {
  const FixedSamples data(64, 16);
  const BatchShape shape{.micro_batch = 2, .data_parallel = 2, .dp_rank = 1, .microbatches = 3};
  const Packing packing{.reset_position_ids = true, .reset_attention_mask = true,
                        .eod_mask_loss = true, .eod = kEod};
  BatchLoader ahead(data, shape, packing), on_demand(data, shape, packing);
  for (int64_t it = 0; it < 4; ++it) {
    const int64_t first = it * shape.global_batch();
    const HostBatch& a = ahead.get(first, shape.microbatches);
    const HostBatch want = on_demand.get(first, shape.microbatches);  // a copy: on_demand reads no further
    EXPECT_EQ(a.first, first);
    EXPECT_EQ(a.inputs, want.inputs);
    EXPECT_EQ(a.targets, want.targets);
    EXPECT_EQ(a.position_ids, want.position_ids);
    EXPECT_EQ(a.key_start, want.key_start);
    EXPECT_EQ(a.counted_targets, want.counted_targets);
    ASSERT_EQ(a.inputs.size(), 3u * 2 * 16);
    // Microbatch 1, row 0 of DP rank 1 is global batch position 1·(2·2) + 1·2 = 6.
    std::vector<int32_t> tokens(17);
    data.sample(first + 6, tokens, nullptr);
    EXPECT_TRUE(std::equal(tokens.begin(), tokens.end() - 1, a.inputs.begin() + 2 * 16));
    ahead.prefetch(first + shape.global_batch(), shape.microbatches);
  }
  EXPECT_GT(ahead.read_seconds_per_batch(), 0.0);
}

// A step batch-size schedule's batches: the same first sample with another count of microbatches
// is another batch, its rows dealt out alike.
TEST(BatchLoader, BatchesOfAnotherMicrobatchCount) {
  const FixedSamples data(64, 16);
  const BatchShape shape{.micro_batch = 2, .data_parallel = 2, .dp_rank = 1, .microbatches = 1};
  BatchLoader loader(data, shape, {});
  loader.prefetch(8, 3);
  const HostBatch one = loader.get(8, 1);  // a copy: read now, not the prefetched batch
  EXPECT_EQ(one.inputs.size(), 1u * 2 * 16);
  const HostBatch& three = loader.get(8, 3);
  EXPECT_EQ(three.microbatches, 3);
  ASSERT_EQ(three.inputs.size(), 3u * 2 * 16);
  EXPECT_TRUE(std::equal(one.inputs.begin(), one.inputs.end(), three.inputs.begin()));
  // Microbatch 2, row 1 of DP rank 1: position 2·(2·2) + 1·2 + 1 = 11, sample 8 + 11.
  std::vector<int32_t> tokens(17);
  data.sample(19, tokens, nullptr);
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end() - 1, three.inputs.begin() + 5 * 16));
}

TEST(BatchLoader, AReadErrorSurfacesAtGet) {
  const FixedSamples data(10, 8);
  BatchLoader loader(data, {.micro_batch = 4, .data_parallel = 1, .dp_rank = 0, .microbatches = 1},
                     {});
  loader.prefetch(8, 1);  // samples 8..11: past the end
  EXPECT_THROW(loader.get(8, 1), Error);
  EXPECT_EQ(loader.get(0, 1).inputs.size(), 32u);  // the loader goes on working
}

}  // namespace
}  // namespace tessel
