// The training data: a token stream cut into fixed-length samples, and the sampler that decides
// which samples form the global batch of each iteration.
//
// Global sample j (S = seq length) has inputs tokens[j·S .. j·S+S-1] and targets
// tokens[j·S+1 .. j·S+S]; there are N = ⌊(tokens-1)/S⌋ samples. Iteration i takes global-batch
// positions k = 0..G-1 (G = global batch size). Which sample sits at (i, k) depends only on
// (seed, i, k) — never on the DP size or the microbatch split (DESIGN invariant 1) — so every
// rank fills just its own positions and every layout sees the same global batch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/data/tokenizer.h"

namespace tessel {

// A text file, tokenized whole and kept in memory.
class TokenDataset {
 public:
  // Throws tessel::Error naming the file when it is missing, unreadable or empty.
  TokenDataset(const std::string& path, const Tokenizer& tokenizer);

  const std::string& path() const { return path_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  std::string path_;
  std::vector<int32_t> tokens_;
};

// --data-sampling: `shuffled` draws each epoch in a fresh random order, `sequential` walks the
// samples in file order. Both wrap around into the next epoch.
enum class Sampling : uint8_t { Shuffled, Sequential };

Sampling parse_sampling(std::string_view name);  // "shuffled" | "sequential"; throws otherwise
std::string sampling_name(Sampling sampling);

class Sampler {
 public:
  // Keeps a reference to `data`, which must outlive the sampler. Throws tessel::Error naming
  // the file when it holds fewer than seq_length + 1 tokens.
  Sampler(const TokenDataset& data, int64_t seq_length, int64_t global_batch, Sampling sampling,
          uint64_t seed);

  int64_t num_samples() const { return num_samples_; }
  int64_t seq_length() const { return seq_length_; }

  // The global sample at batch position k of iteration i (both 0-based). With c = i·G + k:
  // sequential gives c mod N; shuffled gives perm_e[c mod N] for epoch e = c / N, where perm_e
  // is a Fisher–Yates permutation drawn from Philox keyed by (seed, e).
  int64_t sample_index(int64_t iteration, int64_t position);

  // Writes the samples at batch positions [first, first + count) of `iteration` into
  // inputs (count, S) and targets (count, S). No allocation except when a new epoch's
  // permutation is drawn.
  void fill(int64_t iteration, int64_t first, int64_t count, int32_t* inputs, int32_t* targets);

 private:
  void draw_permutation(int64_t epoch);

  const TokenDataset& data_;
  int64_t seq_length_;
  int64_t global_batch_;
  Sampling sampling_;
  uint64_t seed_;
  int64_t num_samples_;
  int64_t cached_epoch_ = -1;       // whose permutation `permutation_` holds
  std::vector<int64_t> permutation_;  // (N)
};

}  // namespace tessel
