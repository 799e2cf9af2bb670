#include "tessel/data/blended_dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/data/npy.h"

namespace tessel {

namespace fs = std::filesystem;

std::vector<double> normalize_weights(std::span<const double> weights) {
  double sum = 0;
  for (double w : weights) sum += w;
  std::vector<double> out(weights.begin(), weights.end());
  for (double& w : out) w /= sum;
  return out;
}

void build_blending_indices(std::span<const double> weights, int64_t size,
                            std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  const size_t n = weights.size();
  TESSEL_CHECK(n > 0 && n < 32767, "a blend needs 1 to 32766 datasets, got {}", n);
  dataset_index.assign(static_cast<size_t>(size), 0);
  dataset_sample_index.assign(static_cast<size_t>(size), 0);
  std::vector<int64_t> served(n, 0);
  // Megatron's helpers.cpp is built without FMA: the share weights[d]·drawn must be rounded to
  // double before the subtraction (volatile keeps the compiler from fusing the two), or exact
  // ties such as 0.6·5 - 3 = 0.4·5 - 2 break the other way.
  auto lag = [&](size_t d, double drawn) {
    const volatile double share = weights[d] * drawn;
    return share - static_cast<double>(served[d]);
  };
  for (int64_t k = 0; k < size; ++k) {
    const double drawn = std::max(static_cast<double>(k), 1.0);
    size_t lagging = 0;
    double largest = lag(0, drawn);
    for (size_t d = 1; d < n; ++d) {
      const double lag_d = lag(d, drawn);
      if (lag_d > largest) {
        largest = lag_d;
        lagging = d;
      }
    }
    dataset_index[static_cast<size_t>(k)] = static_cast<int16_t>(lagging);
    dataset_sample_index[static_cast<size_t>(k)] = served[lagging]++;
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const GptDataset>> datasets,
                               std::vector<double> weights, int64_t size,
                               const std::string& cache_path)
    : datasets_(std::move(datasets)) {
  TESSEL_CHECK(!datasets_.empty() && datasets_.size() == weights.size(),
               "a blend of {} datasets with {} weights", datasets_.size(), weights.size());
  for (size_t d = 0; d < weights.size(); ++d)
    TESSEL_CHECK(weights[d] > 0, "blend weight {} of {} is not positive", weights[d],
                 datasets_[d]->data().prefix());
  TESSEL_CHECK(size >= 0, "a blend of {} samples", size);
  weights_ = normalize_weights(weights);
  const Split split = datasets_.front()->split();
  nlohmann::ordered_json d;
  d["class"] = "BlendedDataset";
  d["datasets"] = nlohmann::ordered_json::array();
  for (const auto& ds : datasets_) d["datasets"].push_back(nlohmann::ordered_json::parse(ds->description()));
  d["split"] = split_name(split);
  d["weights"] = weights_;
  d["size"] = size;
  description_ = d.dump(4, ' ', true);
  hash_ = md5_hex(description_);
  if (!cache_path.empty() && load_cache(cache_path)) return;
  build_blending_indices(weights_, size, dataset_index_, dataset_sample_index_);
  if (cache_path.empty()) return;
  const std::string base = (fs::path(cache_path) / fmt::format("{}-BlendedDataset-{}-", hash_, split_name(split))).string();
  try {
    fs::create_directories(cache_path);
    write_npy(base + "dataset_index.npy", dataset_index_);
    write_npy(base + "dataset_sample_index.npy", dataset_sample_index_);
    write_file_atomically(base + "description.txt", description_, Durability::kDurable);
  } catch (const std::exception& e) {
    fail("cannot write the blend index cache in {} ({}); give a folder you can write to with "
         "--data-cache-path", cache_path, e.what());
  }
}

bool BlendedDataset::load_cache(const std::string& cache_path) {
  const std::string base = (fs::path(cache_path) / fmt::format("{}-BlendedDataset-{}-", hash_,
                                                                split_name(datasets_.front()->split()))).string();
  const std::string datasets = base + "dataset_index.npy", samples = base + "dataset_sample_index.npy";
  for (const std::string& f : {base + "description.txt", datasets, samples})
    if (!fs::is_regular_file(f)) return false;
  const NpyArray which = read_npy(datasets), sample = read_npy(samples);
  TESSEL_CHECK(which.descr == "<i2" && which.shape.size() == 1 && sample.descr == "<i8" &&
                   sample.shape == which.shape,
               "{}: the cached blend indices do not match each other (delete them to rebuild)", base);
  dataset_index_.resize(static_cast<size_t>(which.numel()));
  dataset_sample_index_.resize(dataset_index_.size());
  std::memcpy(dataset_index_.data(), which.data.data(), which.data.size());
  std::memcpy(dataset_sample_index_.data(), sample.data.data(), sample.data.size());
  for (size_t k = 0; k < dataset_index_.size(); ++k)
    TESSEL_CHECK(dataset_index_[k] >= 0 && static_cast<size_t>(dataset_index_[k]) < datasets_.size() &&
                     dataset_sample_index_[k] >= 0,
                 "{}: entry {} names no dataset of the blend", datasets, k);
  return true;
}

void BlendedDataset::sample(int64_t i, std::span<int32_t> tokens,
                            std::vector<int32_t>* document_starts) const {
  TESSEL_CHECK(i >= 0 && i < size(), "no blended sample {} (there are {})", i, size());
  const GptDataset& from = *datasets_[static_cast<size_t>(dataset_index_[static_cast<size_t>(i)])];
  const int64_t j = dataset_sample_index_[static_cast<size_t>(i)];
  TESSEL_CHECK(j < from.size(),
               "the blend asks {} for sample {} of its {}: the dataset is too small for its weight",
               from.data().prefix(), j, from.size());
  from.sample(j, tokens, document_starts);
}

}  // namespace tessel
