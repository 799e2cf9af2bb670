#include "tessel/data/dataset.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "tessel/core/error.h"
#include "tessel/core/philox.h"

namespace tessel {

namespace {

// The Philox stream of epoch e's permutation is kShuffleStream ^ e: far from the streams of
// parameter initialisation (FNV hashes of names) and from any other small stream id.
constexpr uint64_t kShuffleStream = 0x74657373656c5348ULL;  // "tesselSH" in ASCII

std::string read_whole_file(const std::string& path) {
  auto close = [](FILE* f) { std::fclose(f); };
  std::unique_ptr<FILE, decltype(close)> file(std::fopen(path.c_str(), "rb"), close);
  if (!file) fail("cannot open data file {}: {}", path, std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) bytes.append(buffer, got);
  // A directory opens fine on Linux and fails only here, with EISDIR.
  if (std::ferror(file.get())) fail("cannot read data file {}: {}", path, std::strerror(errno));
  return bytes;
}

}  // namespace

TokenDataset::TokenDataset(const std::string& path, const Tokenizer& tokenizer) : path_(path) {
  const std::string text = read_whole_file(path);
  TESSEL_CHECK(!text.empty(), "data file {} is empty", path);
  tokens_ = tokenizer.encode(text);
  TESSEL_CHECK(!tokens_.empty(), "data file {} yields no tokens", path);
}

Sampling parse_sampling(std::string_view name) {
  if (name == "shuffled") return Sampling::Shuffled;
  if (name == "sequential") return Sampling::Sequential;
  fail("--data-sampling: unknown mode '{}' (expected shuffled or sequential)", name);
}

std::string sampling_name(Sampling sampling) {
  return sampling == Sampling::Shuffled ? "shuffled" : "sequential";
}

Sampler::Sampler(const TokenDataset& data, int64_t seq_length, int64_t global_batch,
                 Sampling sampling, uint64_t seed)
    : data_(data),
      seq_length_(seq_length),
      global_batch_(global_batch),
      sampling_(sampling),
      seed_(seed) {
  TESSEL_CHECK(seq_length > 0, "--seq-length must be positive, got {}", seq_length);
  TESSEL_CHECK(global_batch > 0, "--global-batch-size must be positive, got {}", global_batch);
  TESSEL_CHECK(data.size() >= seq_length + 1,
               "data file {} has {} tokens, too few for one sample of --seq-length {} (needs {})",
               data.path(), data.size(), seq_length, seq_length + 1);
  num_samples_ = (data.size() - 1) / seq_length;
}

void Sampler::draw_permutation(int64_t epoch) {
  const int64_t n = num_samples_;
  permutation_.resize(n);
  for (int64_t j = 0; j < n; ++j) permutation_[j] = j;
  const uint64_t stream = kShuffleStream ^ static_cast<uint64_t>(epoch);
  // Fisher–Yates: element i swaps with a uniform j in [0, i]. j = ⌊bits·(i+1) / 2^32⌋ maps 32
  // random bits onto [0, i] without a division; its bias, below (i+1)/2^32, is negligible here.
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t bits = random_bits(seed_, stream, static_cast<uint64_t>(i));
    const int64_t j = static_cast<int64_t>((bits * static_cast<uint64_t>(i + 1)) >> 32);
    std::swap(permutation_[i], permutation_[j]);
  }
  cached_epoch_ = epoch;
}

int64_t Sampler::sample_index(int64_t iteration, int64_t position) {
  TESSEL_CHECK(iteration >= 0, "sampler: iteration {} is negative", iteration);
  TESSEL_CHECK(position >= 0 && position < global_batch_,
               "sampler: batch position {} is outside the global batch [0, {})", position,
               global_batch_);
  const int64_t counter = iteration * global_batch_ + position;
  if (sampling_ == Sampling::Sequential) return counter % num_samples_;
  const int64_t epoch = counter / num_samples_;
  if (epoch != cached_epoch_) draw_permutation(epoch);
  return permutation_[counter % num_samples_];
}

void Sampler::fill(int64_t iteration, int64_t first, int64_t count, int32_t* inputs,
                   int32_t* targets) {
  TESSEL_CHECK(count >= 0 && first >= 0 && first + count <= global_batch_,
               "sampler: batch positions [{}, {}) are outside the global batch [0, {})", first,
               first + count, global_batch_);
  const int64_t S = seq_length_;
  const int32_t* tokens = data_.tokens().data();
  for (int64_t b = 0; b < count; ++b) {
    const int32_t* start = tokens + sample_index(iteration, first + b) * S;
    std::copy(start, start + S, inputs + b * S);          // (S)
    std::copy(start + 1, start + 1 + S, targets + b * S);  // (S), shifted by one
  }
}

}  // namespace tessel
