#include "tessel/data/gpt_dataset.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/data/gpt_indices.h"
#include "tessel/data/npy.h"

namespace tessel {

namespace fs = std::filesystem;

namespace {

// The elements of a cached .npy array as int64, checked against the dtypes and shape expected.
std::vector<int64_t> cached_values(const NpyArray& a, const std::string& path,
                                   std::initializer_list<const char*> descrs, int ndim) {
  TESSEL_CHECK(std::find_if(descrs.begin(), descrs.end(),
                            [&](const char* d) { return a.descr == d; }) != descrs.end() &&
                   static_cast<int>(a.shape.size()) == ndim && (ndim == 1 || a.shape[1] == 2),
               "{}: unexpected dtype {} or shape in a cached index (delete the file to rebuild it)",
               path, a.descr);
  std::vector<int64_t> v(static_cast<size_t>(a.numel()));
  const size_t item = a.data.size() / std::max<size_t>(v.size(), 1);
  for (size_t i = 0; i < v.size(); ++i) {
    const char* p = a.data.data() + i * item;
    if (a.descr == "<i4") { int32_t x; std::memcpy(&x, p, 4); v[i] = x; }
    else if (a.descr == "<u4") { uint32_t x; std::memcpy(&x, p, 4); v[i] = x; }
    else { std::memcpy(&v[i], p, 8); }
  }
  return v;
}

}  // namespace

const char* split_name(Split split) {
  switch (split) {
    case Split::Train: return "train";
    case Split::Valid: return "valid";
    case Split::Test: return "test";
  }
  return "?";
}

std::string md5_hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  TESSEL_CHECK(EVP_Digest(text.data(), text.size(), digest, &length, EVP_md5(), nullptr) == 1,
               "MD5 of the dataset description failed");
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

GptDataset::GptDataset(std::shared_ptr<const LowLevelDataset> data, bool in_memory,
                       GptSplitDocuments documents, std::optional<int64_t> num_samples,
                       const GptDatasetConfig& config)
    : data_(std::move(data)),
      split_(documents.split),
      begin_(documents.begin),
      end_(documents.end),
      num_samples_(num_samples),
      config_(config) {
  TESSEL_CHECK(0 <= begin_ && begin_ <= end_ && end_ <= data_->num_sequences(),
               "{}: split [{}, {}) is outside its {} sequences", data_->prefix(), begin_, end_,
               data_->num_sequences());
  // Megatron's unique_description: the class, the data, the request and the config attributes
  // that decide the indices, as json.dumps(..., indent=4) writes them.
  nlohmann::ordered_json d;
  d["class"] = data_->gpt_dataset_class();
  const std::optional<std::string> path = data_->dataset_path();
  d["dataset_path"] = path ? nlohmann::ordered_json(*path) : nlohmann::ordered_json();
  d["num_samples"] = num_samples ? nlohmann::ordered_json(*num_samples) : nlohmann::ordered_json();
  d["index_split"] = split_name(split_);
  d["random_seed"] = config.seed;
  d["sequence_length"] = config.seq_length;
  // Per-split data paths have no --split (null, as Megatron's config.split and split_matrix);
  // Megatron's bookends start from the integer 0 of its running sum.
  d["split"] = config.split.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(config.split);
  nlohmann::ordered_json matrix = config.split_matrix.empty() ? nlohmann::ordered_json()
                                                              : nlohmann::ordered_json::array();
  for (size_t i = 0; i < config.split_matrix.size(); ++i) {
    const auto& bookends = config.split_matrix[i];
    if (!bookends) {
      matrix.push_back(nullptr);
    } else if (i == 0) {
      matrix.push_back({0, bookends->second});
    } else {
      matrix.push_back({bookends->first, bookends->second});
    }
  }
  d["split_matrix"] = matrix;
  d["tokenizer"] = config.tokenizer;
  description_ = d.dump(4, ' ', true);
  hash_ = md5_hex(description_);
  if (!config.cache_path.empty())
    cache_dir_ = config.cache_path;
  else if (!in_memory)
    cache_dir_ = data_->prefix() + "/cache/" + data_->gpt_dataset_class() + "_indices";

  bool cached = false;
  try {
    cached = !cache_dir_.empty() && load_cache();
  } catch (const Error& e) {
    fail("{}; a damaged cache, or one built from other data than {}.bin/.idx now hold: delete "
         "{}/{}-* to rebuild it", e.what(), data_->prefix(), cache_dir_, hash_);
  }
  if (cached) {
    loaded_from_cache_ = true;
    num_epochs_ = static_cast<int64_t>(document_index_.size()) / std::max<int64_t>(end_ - begin_, 1);
    return;
  }
  build();
  if (!cache_dir_.empty() && !document_index_.empty()) save_cache();
}

std::string GptDataset::cache_file(const std::string& affix) const {
  return (fs::path(cache_dir_) /
          fmt::format("{}-{}-{}-{}", hash_, data_->gpt_dataset_class(), split_name(split_), affix))
      .string();
}

void GptDataset::build() {
  int64_t tokens = 0;
  for (int64_t i = begin_; i < end_; ++i) tokens += data_->sequence_length(i);
  if (tokens <= 1) {
    // Megatron would loop forever looking for enough epochs; an empty request is no sample.
    TESSEL_CHECK(num_samples_ && *num_samples_ == 0,
                 "{}: the {} split (sequences [{}, {}) of {} under --split \"{}\") holds {} tokens: "
                 "no sample of {} tokens can be drawn from it",
                 data_->prefix(), split_name(split_), begin_, end_, data_->num_sequences(),
                 config_.split, tokens, config_.seq_length + 1);
    sample_index_ = {0, 0};
    return;
  }
  const GptEpochPlan plan = plan_gpt_epochs(tokens, num_samples_, config_.seq_length);
  // An absurd request (--train-iters 2000000000) would build for hours into more memory than the
  // machine has: refused up front. The document index holds int32 ids, the sample index two
  // int64 and the shuffle index one per sample.
  const double samples_built = static_cast<double>(plan.num_epochs) * static_cast<double>(tokens) /
                         static_cast<double>(config_.seq_length);
  const double bytes = 4.0 * static_cast<double>(plan.num_epochs) * static_cast<double>(end_ - begin_) +
                       24.0 * samples_built;
  const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                        static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  TESSEL_CHECK(memory <= 0 || bytes <= memory,
               "{}: the {} split's indices for {} samples ({} epochs of its {} tokens) would take "
               "{:.1f} GiB, more than this machine's {:.1f} GiB of memory: ask for fewer samples "
               "(--train-iters, --global-batch-size, --eval-iters)",
               data_->prefix(), split_name(split_), num_samples_.value_or(0), plan.num_epochs,
               tokens, bytes / (1 << 30), memory / (1 << 30));
  num_epochs_ = plan.num_epochs;
  NumpyRandomState rng(config_.seed);
  document_index_ =
      build_document_index(begin_, end_ - begin_, plan.num_epochs, plan.separate_final_epoch, rng);
  sample_index_ =
      build_sample_index(*data_, document_index_, config_.seq_length, plan.num_epochs, tokens);
  const int64_t samples = size();
  shuffle_index_ = build_shuffle_index(
      plan.separate_final_epoch ? plan.samples_before_final_epoch : samples, samples, rng);
}

bool GptDataset::load_cache() {
  const std::string description = cache_file("description.txt"), documents =
      cache_file("document_index.npy"), samples = cache_file("sample_index.npy"), shuffle =
      cache_file("shuffle_index.npy");
  for (const std::string& f : {description, documents, samples, shuffle})
    if (!fs::is_regular_file(f)) return false;
  const std::vector<int64_t> doc = cached_values(read_npy(documents), documents, {"<i4"}, 1);
  sample_index_ = cached_values(read_npy(samples), samples, {"<i4", "<i8"}, 2);
  shuffle_index_ = cached_values(read_npy(shuffle), shuffle, {"<u4", "<i8"}, 1);
  // Everything sample() will index with, checked once, so that a damaged cache is an error here
  // rather than a read out of bounds later.
  document_index_.assign(doc.begin(), doc.end());
  for (int64_t d : doc)
    TESSEL_CHECK(d >= begin_ && d < end_, "{}: document {} is outside the split [{}, {})",
                 documents, d, begin_, end_);
  const int64_t rows = static_cast<int64_t>(sample_index_.size() / 2);
  TESSEL_CHECK(rows >= 1 && static_cast<int64_t>(shuffle_index_.size()) == rows - 1,
               "{}: {} samples, but {} has {} rows", shuffle, shuffle_index_.size(), samples, rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t position = sample_index_[2 * r], offset = sample_index_[2 * r + 1];
    TESSEL_CHECK(position >= 0 && position < static_cast<int64_t>(doc.size()) && offset >= 0 &&
                     offset < data_->sequence_length(doc[position]) &&
                     (r == 0 || position > sample_index_[2 * r - 2] ||
                      (position == sample_index_[2 * r - 2] && offset > sample_index_[2 * r - 1])),
                 "{}: row {} ({}, {}) is not a valid sample boundary", samples, r, position, offset);
  }
  // Each sample spans seq_length + 1 tokens from its row to the next (the last token shared):
  // a cache built from other data than the files now hold is named here, not at a read.
  std::vector<int64_t> starts(doc.size() + 1, 0);  // tokens before each document position
  for (size_t p = 0; p < doc.size(); ++p) starts[p + 1] = starts[p] + data_->sequence_length(doc[p]);
  for (int64_t r = 1; r < rows; ++r) {
    const int64_t spanned = starts[sample_index_[2 * r]] + sample_index_[2 * r + 1] -
                            starts[sample_index_[2 * r - 2]] - sample_index_[2 * r - 1];
    TESSEL_CHECK(spanned == config_.seq_length,
                 "{}: sample {} spans {} tokens of {}, not {}", samples, r - 1, spanned + 1,
                 data_->prefix(), config_.seq_length + 1);
  }
  // Megatron's shuffle index is a permutation of the samples (of each of its two ranges when
  // the last epoch is shuffled apart): one that repeats a sample (a zero-filled file) is damaged.
  std::vector<char> seen(static_cast<size_t>(rows - 1), 0);
  for (size_t i = 0; i < shuffle_index_.size(); ++i) {
    const int64_t s = shuffle_index_[i];
    TESSEL_CHECK(s >= 0 && s < rows - 1, "{}: sample {} out of range", shuffle, s);
    TESSEL_CHECK(!seen[static_cast<size_t>(s)],
                 "{}: sample {} appears twice (at {} and before): not a permutation of the {} "
                 "samples", shuffle, s, i, rows - 1);
    seen[static_cast<size_t>(s)] = 1;
  }
  return true;
}

void GptDataset::save_cache() const {
  try {
    fs::create_directories(cache_dir_);
    int64_t largest = 0;  // Megatron sizes the sample index by the whole dataset's longest sequence
    for (int64_t i = 0; i < data_->num_sequences(); ++i)
      largest = std::max<int64_t>(largest, data_->sequence_length(i));
    const int64_t rows = static_cast<int64_t>(sample_index_.size() / 2);
    write_npy(cache_file("document_index.npy"), document_index_);
    if (std::max<int64_t>(static_cast<int64_t>(document_index_.size()), largest) <=
        std::numeric_limits<int32_t>::max()) {
      write_npy(cache_file("sample_index.npy"),
                std::vector<int32_t>(sample_index_.begin(), sample_index_.end()), {rows, 2});
    } else {
      write_npy(cache_file("sample_index.npy"), sample_index_, {rows, 2});
    }
    if (rows - 1 < static_cast<int64_t>(std::numeric_limits<uint32_t>::max()) - 1) {
      write_npy(cache_file("shuffle_index.npy"),
                std::vector<uint32_t>(shuffle_index_.begin(), shuffle_index_.end()));
    } else {
      write_npy(cache_file("shuffle_index.npy"), shuffle_index_);
    }
    // Last: it completes the set.
    write_file_atomically(cache_file("description.txt"), description_, Durability::kDurable);
  } catch (const std::exception& e) {
    fail("cannot write the dataset index cache in {} ({}); give a folder you can write to with "
         "--data-cache-path",
         cache_dir_, e.what());
  }
}

void GptDataset::sample(int64_t i, std::span<int32_t> tokens,
                        std::vector<int32_t>* document_starts) const {
  TESSEL_CHECK(i >= 0 && i < size(), "{}: no {} sample {} (there are {})", data_->prefix(),
               split_name(split_), i, size());
  TESSEL_CHECK(static_cast<int64_t>(tokens.size()) == config_.seq_length + 1,
               "a sample has {} tokens, not {}", config_.seq_length + 1, tokens.size());
  if (document_starts) document_starts->clear();
  const int64_t j = shuffle_index_[static_cast<size_t>(i)];
  const int64_t first = sample_index_[static_cast<size_t>(2 * j)];
  const int64_t first_offset = sample_index_[static_cast<size_t>(2 * j + 1)];
  const int64_t last = sample_index_[static_cast<size_t>(2 * j + 2)];
  const int64_t last_offset = sample_index_[static_cast<size_t>(2 * j + 3)];
  int64_t filled = 0;
  for (int64_t p = first; p <= last; ++p) {
    const int32_t sequence = document_index_[static_cast<size_t>(p)];
    const int64_t begin = p == first ? first_offset : 0;
    const int64_t end = p == last ? last_offset + 1 : data_->sequence_length(sequence);
    if (p > first && end > begin && document_starts) document_starts->push_back(static_cast<int32_t>(filled));
    TESSEL_CHECK(filled + end - begin <= config_.seq_length + 1, "{}: sample {} overruns",
                 data_->prefix(), i);
    data_->read(sequence, begin, tokens.subspan(static_cast<size_t>(filled), static_cast<size_t>(end - begin)));
    filled += end - begin;
  }
  TESSEL_CHECK(filled == config_.seq_length + 1, "{}: sample {} has {} tokens", data_->prefix(), i,
               filled);
}

}  // namespace tessel
