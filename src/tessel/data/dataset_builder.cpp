#include "tessel/data/dataset_builder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/ranges.h>

#include "tessel/core/error.h"
#include "tessel/data/mock_dataset.h"
#include "tessel/data/text_documents.h"

namespace tessel {

namespace fs = std::filesystem;

namespace {

// Megatron's mid_level_dataset_surplus: each blended dataset is built 0.5 % larger than its
// share, so that the greedy blend never asks it for a sample past its end.
constexpr double kMidLevelSurplus = 0.005;

bool parse_number(const std::string& word, double& value) {
  if (word.empty()) return false;
  char* end = nullptr;
  value = std::strtod(word.c_str(), &end);
  return end == word.c_str() + word.size() && std::isfinite(value);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "{}: cannot open", path);
  std::stringstream s;
  s << in.rdbuf();
  TESSEL_CHECK(!in.bad(), "{}: read failed", path);
  return s.str();
}

struct LowLevel {
  std::shared_ptr<const LowLevelDataset> data;
  bool in_memory = false;  // tokenized at start-up or generated: no cache beside it
};

// Megatron forces this split when there is no blend (mock data): an arbitrarily even one.
constexpr const char* kMockSplit = "1,1,1";

class Builder {
 public:
  explicit Builder(const GptDataOptions& options) : options_(options) {}

  GptDataSplits build() {
    GptDataSplits out;
    if (options_.mock_data) {
      const SplitMatrix matrix = parse_split(kMockSplit);
      const GptDatasetConfig config = dataset_config(kMockSplit, matrix);
      const SpecialIds ids = options_.tokenizer->special_ids();
      const LowLevel mock{
          std::make_shared<MockGptLowLevelDataset>(options_.tokenizer->vocab_size(), ids.eod), true};
      for (int i = 0; i < kNumSplits; ++i)
        if (matrix[i]) out.splits[i] = mid_level(mock, matrix, i, options_.num_samples[i], config);
      return out;
    }
    if (!options_.data_path.empty()) {
      const DataBlend blend = parse_data_blend(options_.data_path, "--data-path");
      const SplitMatrix matrix = parse_split(options_.split);
      std::array<std::optional<int64_t>, kNumSplits> sizes;
      for (int i = 0; i < kNumSplits; ++i) sizes[i] = options_.num_samples[i];
      out.splits = build_blend(blend, matrix, sizes, options_.split, matrix, false);
      return out;
    }
    const std::vector<std::string>* per_split[kNumSplits] = {
        &options_.train_data_path, &options_.valid_data_path, &options_.test_data_path};
    const char* flags[kNumSplits] = {"--train-data-path", "--valid-data-path", "--test-data-path"};
    for (int i = 0; i < kNumSplits; ++i) {
      if (per_split[i]->empty()) continue;
      // Megatron builds each split from its own blend as if --split gave it everything, and a
      // single path as a plain GPT dataset even when it carries a weight.
      SplitMatrix spoof(kNumSplits);
      spoof[i] = std::pair<double, double>(0.0, 1.0);
      std::array<std::optional<int64_t>, kNumSplits> sizes;
      sizes[i] = options_.num_samples[i];
      out.splits[i] = build_blend(parse_data_blend(*per_split[i], flags[i]), spoof, sizes, "", {}, true)[i];
    }
    return out;
  }

 private:
  // One blend over the splits of `matrix`: a GptDataset per split when it is a single path
  // (unweighted, unless `single_path_plain`), else a BlendedDataset of one GptDataset per path.
  std::array<std::shared_ptr<const SampleDataset>, kNumSplits> build_blend(
      const DataBlend& blend, const SplitMatrix& matrix,
      const std::array<std::optional<int64_t>, kNumSplits>& sizes, const std::string& split,
      const SplitMatrix& described_matrix, bool single_path_plain) {
    const GptDatasetConfig config = dataset_config(split, described_matrix);
    std::array<std::shared_ptr<const SampleDataset>, kNumSplits> out;
    const std::vector<double> weights =
        blend.weights.empty() ? std::vector<double>{} : normalize_weights(blend.weights);
    if (blend.prefixes.size() == 1 && (weights.empty() || single_path_plain)) {
      for (int i = 0; i < kNumSplits; ++i)
        if (matrix[i]) out[i] = mid_level(low_level(blend.prefixes[0]), matrix, i, sizes[i], config);
      return out;
    }
    const size_t n = blend.prefixes.size();
    for (int i = 0; i < kNumSplits; ++i) {
      if (!matrix[i]) continue;
      std::vector<std::shared_ptr<const GptDataset>> mids;
      std::vector<double> split_weights;
      int64_t size = 0;
      for (size_t d = 0; d < n; ++d) {
        std::optional<int64_t> buffer;  // one epoch each when the blend has no weights
        if (!weights.empty()) {
          TESSEL_CHECK(sizes[i].has_value(), "a weighted blend needs a sample count per split");
          const double target = std::ceil(static_cast<double>(*sizes[i]) * weights[d]);
          size += static_cast<int64_t>(target);
          buffer = static_cast<int64_t>(std::ceil(target * (1.0 + kMidLevelSurplus)));
        }
        mids.push_back(mid_level(low_level(blend.prefixes[d]), matrix, i, buffer, config));
      }
      if (weights.empty()) {  // weights from the datasets' lengths, the size capped by their sum
        for (const auto& m : mids) {
          split_weights.push_back(static_cast<double>(m->size()));
          size += m->size();
        }
        if (sizes[i]) size = std::min(size, *sizes[i]);
      } else {
        split_weights = weights;
      }
      out[i] = std::make_shared<BlendedDataset>(std::move(mids), split_weights, size,
                                                options_.data_cache_path);
    }
    return out;
  }

  GptDatasetConfig dataset_config(const std::string& split, const SplitMatrix& described_matrix) const {
    GptDatasetConfig config;
    config.seq_length = options_.seq_length;
    config.seed = options_.seed;
    config.split = split;
    config.split_matrix = described_matrix;
    config.tokenizer = options_.tokenizer ? options_.tokenizer->type() : "";
    config.cache_path = options_.data_cache_path;
    return config;
  }

  std::shared_ptr<const GptDataset> mid_level(const LowLevel& low, const SplitMatrix& matrix,
                                              int split, std::optional<int64_t> num_samples,
                                              const GptDatasetConfig& config) {
    const double n = static_cast<double>(low.data->num_sequences());
    // Python's int(round(x)): round half to even, as nearbyint in the default rounding mode.
    const int64_t begin = static_cast<int64_t>(std::nearbyint(matrix[split]->first * n));
    const int64_t end = static_cast<int64_t>(std::nearbyint(matrix[split]->second * n));
    return std::make_shared<GptDataset>(low.data, low.in_memory,
                                        GptSplitDocuments{static_cast<Split>(split), begin, end},
                                        num_samples, config);
  }

  const LowLevel& low_level(const std::string& path) {
    auto it = opened_.find(path);
    if (it != opened_.end()) return it->second;
    std::shared_ptr<IndexedDataset> data;
    bool in_memory = false;
    if (fs::exists(path + ".idx") || fs::exists(path + ".bin")) {
      data = std::make_shared<IndexedDataset>(IndexedDataset::open(path));
      if (options_.tokenizer) data->set_vocab_size(options_.tokenizer->vocab_size());
    } else {
      TESSEL_CHECK(fs::is_regular_file(path),
                   "{}: no such dataset (neither {}.idx/.bin nor a text file)", path, path);
      TESSEL_CHECK(options_.tokenizer != nullptr, "{}: a text dataset needs a tokenizer", path);
      data = std::make_shared<IndexedDataset>(
          tokenize_text_file(path, *options_.tokenizer, options_.append_eod));
      in_memory = true;
    }
    TESSEL_CHECK(data->num_tokens() > 0, "{}: empty dataset (no tokens)", path);
    return opened_.emplace(path, LowLevel{data, in_memory}).first->second;
  }

  const GptDataOptions& options_;
  std::map<std::string, LowLevel> opened_;
};

}  // namespace

DataBlend parse_data_blend(const std::vector<std::string>& words, const std::string& flag) {
  TESSEL_CHECK(!words.empty(), "{} is empty", flag);
  DataBlend blend;
  double first;
  if (!parse_number(words[0], first)) {  // a list of paths, no weights
    for (const std::string& w : words) {
      double ignored;
      if (parse_number(w, ignored))
        throw ConfigError(fmt::format("{}: '{}' looks like a weight, but the list starts with a "
                                      "path (weighted lists read W1 P1 W2 P2 ...)", flag, w));
      blend.prefixes.push_back(w);
    }
    return blend;
  }
  if (words.size() % 2 != 0)
    throw ConfigError(fmt::format("{}: {} words, but a weighted blend is pairs of weight and path "
                                  "(W1 P1 W2 P2 ...)", flag, words.size()));
  std::vector<std::string> problems;
  for (size_t i = 0; i < words.size(); i += 2) {
    double w = 0;
    if (!parse_number(words[i], w))
      problems.push_back(fmt::format("'{}' (before {}) is not a weight", words[i], words[i + 1]));
    else if (!(w > 0))
      problems.push_back(fmt::format("the weight {} of {} must be > 0", words[i], words[i + 1]));
    blend.weights.push_back(w);
    blend.prefixes.push_back(words[i + 1]);
  }
  double sum = 0;
  for (double w : blend.weights) sum += w;
  if (problems.empty() && !std::isfinite(sum))
    problems.push_back("the weights sum past the largest number (they are proportions: "
                       "give smaller ones)");
  if (!problems.empty()) {
    std::string message = flag + ": " + problems[0];
    for (size_t i = 1; i < problems.size(); ++i) message += "; " + problems[i];
    throw ConfigError(message);
  }
  return blend;
}

SplitMatrix parse_split(const std::string& split) {
  // Megatron's form: proportions separated by ',' or '/' ("969,30,1", "98/2"), each a whole
  // finite number ≥ 0; anything else is refused rather than skipped.
  std::vector<double> vector;
  std::vector<std::string> problems;
  for (size_t i = 0; i <= split.size();) {
    const size_t j = std::min(split.find_first_of(",/", i), split.size());
    std::string word = split.substr(i, j - i);
    word.erase(0, word.find_first_not_of(" \t"));
    word.erase(word.find_last_not_of(" \t") + 1);
    double v = 0;
    if (!parse_number(word, v)) problems.push_back(fmt::format("'{}' is not a finite number", word));
    else if (v < 0) problems.push_back(fmt::format("{} must not be negative", word));
    vector.push_back(v);
    i = j + 1;
  }
  if (!problems.empty())
    throw ConfigError(fmt::format("--split \"{}\": {} (give proportions such as 969,30,1)", split,
                                  fmt::join(problems, "; ")));
  if (vector.size() > kNumSplits)
    throw ConfigError(fmt::format("--split \"{}\": at most {} proportions (train, valid, test)",
                                  split, kNumSplits));
  vector.resize(kNumSplits, 0.0);
  double sum = 0;
  for (double v : vector) sum += v;
  if (!(sum > 0)) throw ConfigError(fmt::format("--split \"{}\": the proportions sum to 0", split));
  if (!std::isfinite(sum))
    throw ConfigError(fmt::format("--split \"{}\": the proportions sum past the largest number", split));
  const std::vector<double> normal = normalize_weights(vector);
  SplitMatrix matrix;
  double begin = 0;
  for (double v : normal) {
    const double end = begin + v;
    matrix.push_back(end <= begin ? std::nullopt
                                  : std::optional<std::pair<double, double>>({begin, end}));
    begin = end;
  }
  return matrix;
}

std::array<int64_t, kNumSplits> megatron_num_samples(int64_t train_iters, int64_t global_batch,
                                                     int64_t eval_interval, int64_t eval_iters) {
  const int64_t eval_runs = eval_interval > 0 ? train_iters / eval_interval + 1 : 0;
  return {train_iters * global_batch, eval_runs * eval_iters * global_batch,
          eval_iters * global_batch};
}

std::vector<std::string> data_source_violations(bool data_path, bool per_split, bool mock_data) {
  std::vector<std::string> v;
  if (data_path && per_split)
    v.push_back("--data-path excludes --train-data-path, --valid-data-path and --test-data-path");
  if (mock_data && (data_path || per_split))
    v.push_back("--mock-data generates the data: it excludes --data-path, --train-data-path, "
                "--valid-data-path and --test-data-path");
  return v;
}

std::vector<std::string> mock_data_tokenizer_violations(bool mock_data, const Tokenizer* tokenizer) {
  std::vector<std::string> v;
  if (mock_data && (tokenizer == nullptr || tokenizer->special_ids().eod < 0))
    v.push_back(fmt::format("--mock-data ends every document with the tokenizer's end-of-document "
                            "token, which {} has none of (give --tokenizer-type NullTokenizer "
                            "--vocab-size N: its token is N - 1)",
                            tokenizer ? "the " + tokenizer->type() : "no tokenizer"));
  return v;
}

GptDataSplits build_gpt_datasets(const GptDataOptions& options,
                                 const DataBuildCoordination& coordination) {
  const bool per_split = !options.train_data_path.empty() || !options.valid_data_path.empty() ||
                         !options.test_data_path.empty();
  std::vector<std::string> problems = data_source_violations(!options.data_path.empty(), per_split,
                                                             options.mock_data);
  for (std::string& m : mock_data_tokenizer_violations(options.mock_data, options.tokenizer))
    problems.push_back(std::move(m));
  if (options.data_path.empty() && !per_split && !options.mock_data)
    problems.push_back("no data: give --data-path or --train-data-path (and --valid/--test-data-path), "
                       "or --mock-data");
  if (options.seq_length < 2) problems.push_back(fmt::format("--seq-length must be at least 2 (got {})", options.seq_length));
  for (int i = 0; i < kNumSplits; ++i)
    if (options.num_samples[i] < 0)
      problems.push_back(fmt::format("the {} split is asked for {} samples", split_name(static_cast<Split>(i)), options.num_samples[i]));
  if (!problems.empty()) {
    std::string message = problems[0];
    for (size_t i = 1; i < problems.size(); ++i) message += "; " + problems[i];
    throw ConfigError(message);
  }
  // Bad flags are found alike on every rank, before waiting. --split is held to its form whatever
  // the data: --mock-data splits 1,1,1 as Megatron's does, but a malformed --split beside it is
  // refused as it is beside --data-path, not accepted without a word.
  if (!options.data_path.empty()) parse_data_blend(options.data_path, "--data-path");
  parse_split(options.split);
  GptDataSplits splits;
  for (const bool first_phase : {true, false}) {
    const std::function<void()> phase = [&] {
      if (coordination.builds_first == first_phase) splits = Builder(options).build();
    };
    if (coordination.together) coordination.together(phase);
    else phase();
  }
  return splits;
}

IndexedDataset tokenize_text_file(const std::string& path, const Tokenizer& tokenizer,
                                  bool append_eod) {
  const std::string text = read_file(path);
  check_utf8(text, path, 1, 0);
  const int32_t eod = append_eod ? tokenizer.special_ids().eod : -1;
  const TokenDType dtype = optimal_token_dtype(tokenizer.vocab_size());
  std::vector<uint8_t> bin;
  std::vector<int32_t> sizes, tokens, lengths;
  std::vector<int64_t> document_index{0};
  auto add = [&](const std::vector<std::string>& sentences, int64_t line) {
    tokenize_document(tokenizer, sentences, eod, tokens, lengths);
    encode_tokens(dtype, tokens, bin, fmt::format("{}:{}", path, line));
    sizes.insert(sizes.end(), lengths.begin(), lengths.end());
    document_index.push_back(static_cast<int64_t>(sizes.size()));
  };
  for_each_document(text, is_jsonl_path(path), {"text"}, path, 1,
                    [&](const std::vector<std::vector<std::string>>& documents, int64_t line) {
                      add(documents[0], line);
                    });
  return IndexedDataset::from_bytes(path, encode_index(dtype, sizes, document_index),
                                    std::string(bin.begin(), bin.end()));
}

}  // namespace tessel
