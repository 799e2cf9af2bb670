// `tessel preprocess`: a JSONL or plain text corpus (text_documents.h) tokenized into
// Megatron-Core IndexedDatasets, PREFIX_{key}_document.bin/.idx per --json-keys key, as
// Megatron-LM's tools/preprocess_data.py writes them (dtype uint16 under 65,500 tokens of
// vocabulary, else int32; one sequence per document, or per sentence for a list of strings).
//
// The reading thread cuts the input into batches of whole documents (about 1 MiB each); worker
// threads parse, check and tokenize batches in parallel; the reading thread writes the results
// in input order, so the output does not depend on the number of workers. Tokenizer::encode is
// called from several workers at once: tokenizers must be safe to use so (const and stateless).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/data/indexed_dataset.h"
#include "tessel/data/tokenizer.h"

namespace tessel {

struct PreprocessProgress {
  int64_t bytes_done = 0;   // input bytes written out
  int64_t bytes_total = 0;  // the input's size
  int64_t documents = 0;    // JSONL lines or text documents written out
  int64_t tokens = 0;
  double seconds = 0;
};

struct PreprocessOptions {
  std::string input;                          // --input
  std::vector<std::string> json_keys{"text"};  // --json-keys; a text file's output takes the first
  std::string output_prefix;                  // --output-prefix
  bool append_eod = false;                    // --append-eod
  int workers = 1;                            // --workers
  int64_t batch_bytes = 1 << 20;              // input per batch of work
  // Called on the reading thread about every `progress_interval` seconds while it runs.
  std::function<void(const PreprocessProgress&)> progress;
  double progress_interval = 0.25;
};

struct PreprocessResult {
  std::vector<std::string> prefixes;  // one per key: PREFIX_{key}_document
  TokenDType dtype = TokenDType::UInt16;
  PreprocessProgress totals;
};

// Throws tessel::Error naming the file and line of bad input (invalid UTF-8, bad JSON, a
// missing key), or the flag that is wrong; nothing is left at the output paths then.
PreprocessResult preprocess(const PreprocessOptions& options, const Tokenizer& tokenizer);

}  // namespace tessel
