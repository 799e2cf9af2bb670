#include "data_command.h"

#include <algorithm>
#include <fmt/format.h>

#include "tokenizer_flags.h"
#include "tessel/core/error.h"
#include "tessel/core/writable.h"
#include "tessel/data/indexed_dataset.h"
#include "tessel/data/npy.h"

namespace tessel {

DataCommand::DataCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("data", "inspect Megatron datasets and build their indices");
  cmd_->require_subcommand(1);
  inspect_ = cmd_->add_subcommand("inspect", "header, counts and one document of PREFIX.bin/.idx");
  inspect_->add_option("prefix", prefix_, "the dataset prefix (PREFIX.bin, PREFIX.idx)")->required();
  inspect_->add_option("--doc", doc_, "which document to print")->capture_default_str();
  inspect_->add_flag("--decode", decode_, "print the document as text through the tokenizer");
  add_tokenizer_flags(*inspect_, tokenizer_);
  inspect_->add_option("--vocab-size", tokenizer_.vocab_size, "NullTokenizer's (and TikTokenizer's) vocabulary size");

  index_ = cmd_->add_subcommand("index", "build the GPT datasets' indices as training will");
  index_->add_option("--data-path", data_.data_path, "PREFIX, or W1 PREFIX1 W2 PREFIX2 ... (a blend)");
  index_->add_option("--train-data-path", data_.train_data_path, "the train split's blend");
  index_->add_option("--valid-data-path", data_.valid_data_path, "the valid split's blend");
  index_->add_option("--test-data-path", data_.test_data_path, "the test split's blend");
  index_->add_flag("--mock-data", data_.mock_data, "Megatron's MockGPTDataset: generated documents under the split 1,1,1");
  index_->add_option("--split", data_.split, "train,valid,test proportions over --data-path")->capture_default_str();
  index_->add_option("--data-cache-path", data_.data_cache_path, "where the index files go (default: beside the data)");
  index_->add_option("--seq-length", data_.seq_length, "tokens per sample (each reads one more)")->required();
  index_->add_option("--seed", data_.seed, "numpy RandomState seed of the shuffles")->capture_default_str();
  index_->add_option("--train-samples", data_.num_samples[0], "samples the train split must deliver")->capture_default_str();
  index_->add_option("--valid-samples", data_.num_samples[1], "samples the valid split must deliver")->capture_default_str();
  index_->add_option("--test-samples", data_.num_samples[2], "samples the test split must deliver")->capture_default_str();
  index_->add_option("--dump-samples", dump_dir_, "write every sample to DIR/{split}_samples.npy");
  index_->add_option("--dump-limit", dump_limit_, "dump each split's first N samples only (0: all)")->capture_default_str();
  add_tokenizer_flags(*index_, tokenizer_);
  index_->add_option("--vocab-size", tokenizer_.vocab_size, "NullTokenizer's (and TikTokenizer's) vocabulary size");
}

void DataCommand::run() {
  if (*inspect_) inspect();
  if (*index_) index();
}

void DataCommand::inspect() const {
  IndexedDataset data = IndexedDataset::open(prefix_);
  std::unique_ptr<Tokenizer> tokenizer;
  if (decode_) {
    tokenizer = make_tokenizer(tokenizer_);
    data.set_vocab_size(tokenizer->vocab_size());
  }
  fmt::print("{}.idx: Megatron IndexedDataset version 1 | dtype {} (code {}) | {} sequences | {} documents\n",
             prefix_, token_dtype_name(data.dtype()), static_cast<int>(data.dtype()),
             data.num_sequences(), data.num_documents());
  int64_t shortest = data.num_sequences() > 0 ? data.sequence_length(0) : 0, longest = 0;
  for (int64_t i = 0; i < data.num_sequences(); ++i) {
    shortest = std::min<int64_t>(shortest, data.sequence_length(i));
    longest = std::max<int64_t>(longest, data.sequence_length(i));
  }
  fmt::print("{}.bin: {} bytes | {} tokens | sequence length min {} mean {:.1f} max {}\n", prefix_,
             data.bin_bytes(), data.num_tokens(), shortest,
             data.num_sequences() > 0 ? static_cast<double>(data.num_tokens()) / data.num_sequences() : 0.0,
             longest);
  if (data.num_documents() == 0) return;
  TESSEL_CHECK(doc_ >= 0 && doc_ < data.num_documents(), "--doc {}: {} has documents 0..{}", doc_,
               prefix_, data.num_documents() - 1);
  const int64_t first = data.document_index(doc_), last = data.document_index(doc_ + 1);
  std::vector<int32_t> tokens;
  for (int64_t s = first; s < last; ++s) {
    const std::vector<int32_t> part = data.sequence(s);
    tokens.insert(tokens.end(), part.begin(), part.end());
  }
  fmt::print("document {}: sequences [{}, {}) | {} tokens\n", doc_, first, last, tokens.size());
  if (decode_) {
    const std::string text = tokenizer->decode(tokens);
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (text.empty() || text.back() != '\n') std::fputs("\n", stdout);
  } else {
    fmt::print("{}\n", fmt::join(tokens, " "));
  }
}

void DataCommand::index() {
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(tokenizer_);
  data_.tokenizer = tokenizer.get();
  if (!dump_dir_.empty()) require_writable_dir("--dump-samples", dump_dir_);  // before the build
  const GptDataSplits splits = build_gpt_datasets(data_);
  for (int i = 0; i < kNumSplits; ++i) {
    const Split split = static_cast<Split>(i);
    const SampleDataset* ds = splits.get(split);
    if (ds == nullptr) {
      fmt::print("{}: none\n", split_name(split));
      continue;
    }
    auto describe = [](const GptDataset& g) {
      return fmt::format("{} sequences [{}, {}) x {} epoch(s), indices {} {}", g.data().prefix(),
                         g.sequences_begin(), g.sequences_end(), g.num_epochs(), g.loaded_from_cache() ? "loaded from" : "built",
                         g.cache_dir().empty() ? "in memory" : fmt::format("{}/{}-{}-{}-*", g.cache_dir(), g.description_hash(), g.data().gpt_dataset_class(), split_name(g.split())));
    };
    if (const auto* g = dynamic_cast<const GptDataset*>(ds)) {
      fmt::print("{}: {} samples | {}\n", split_name(split), g->size(), describe(*g));
    } else if (const auto* b = dynamic_cast<const BlendedDataset*>(ds)) {
      fmt::print("{}: {} samples | blend {} of {} datasets\n", split_name(split), b->size(),
                 b->description_hash(), b->datasets().size());
      for (size_t d = 0; d < b->datasets().size(); ++d)
        fmt::print("  weight {:.6f} | {} samples | {}\n", b->weights()[d], b->datasets()[d]->size(),
                   describe(*b->datasets()[d]));
    }
    if (dump_dir_.empty()) continue;
    const int64_t width = ds->seq_length() + 1;
    const int64_t count = dump_limit_ > 0 ? std::min(dump_limit_, ds->size()) : ds->size();
    std::vector<int32_t> tokens(static_cast<size_t>(count * width)), starts, row_starts;
    for (int64_t k = 0; k < count; ++k) {
      ds->sample(k, std::span<int32_t>(tokens).subspan(static_cast<size_t>(k * width), static_cast<size_t>(width)), &row_starts);
      for (int32_t p : row_starts) {
        starts.push_back(static_cast<int32_t>(k));
        starts.push_back(p);
      }
    }
    const std::string base = fmt::format("{}/{}", dump_dir_, split_name(split));
    write_npy(base + "_samples.npy", tokens, {count, width});
    write_npy(base + "_document_starts.npy", starts, {static_cast<int64_t>(starts.size() / 2), 2});
  }
}

}  // namespace tessel
