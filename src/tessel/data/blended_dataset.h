// Megatron-Core's BlendedDataset: samples drawn from several GPT datasets in proportion to their
// weights, by the greedy blending index of helpers.cpp (build_blending_indices).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessel/data/gpt_dataset.h"

namespace tessel {

// Megatron's normalize(): weights / their sum, in double.
std::vector<double> normalize_weights(std::span<const double> weights);

// The greedy blending index: sample k goes to the dataset whose count lags its share of
// max(k, 1) samples the most (the first such dataset on a tie), and is that dataset's next
// sample. After k samples every dataset d has served within one sample of weights[d]·k.
// dataset_index[k] is the dataset (int16, as Megatron), dataset_sample_index[k] its sample.
void build_blending_indices(std::span<const double> weights, int64_t size,
                            std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);

class BlendedDataset final : public SampleDataset {
 public:
  // `weights` (> 0, normalised here) and `size` samples; the indices are cached under
  // cache_path when it is not empty (Megatron caches blends only under --data-cache-path).
  BlendedDataset(std::vector<std::shared_ptr<const GptDataset>> datasets,
                 std::vector<double> weights, int64_t size, const std::string& cache_path);

  int64_t size() const override { return static_cast<int64_t>(dataset_index_.size()); }
  int64_t seq_length() const override { return datasets_.front()->seq_length(); }
  void sample(int64_t i, std::span<int32_t> tokens,
              std::vector<int32_t>* document_starts = nullptr) const override;

  const std::vector<std::shared_ptr<const GptDataset>>& datasets() const { return datasets_; }
  const std::vector<double>& weights() const { return weights_; }
  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }
  const std::string& description() const { return description_; }
  const std::string& description_hash() const { return hash_; }

 private:
  bool load_cache(const std::string& cache_path);

  std::vector<std::shared_ptr<const GptDataset>> datasets_;
  std::vector<double> weights_;
  std::string description_, hash_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace tessel
