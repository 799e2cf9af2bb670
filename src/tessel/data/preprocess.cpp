#include "tessel/data/preprocess.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "tessel/core/error.h"
#include "tessel/core/path_clashes.h"
#include "tessel/core/writable.h"
#include "tessel/data/text_documents.h"

namespace tessel {

namespace {

// A run of whole documents of the input: complete lines of JSONL, or text up to a document
// boundary.
struct Batch {
  std::string text;
  int64_t first_line = 1;    // 1-based line number of text[0] in the file
  int64_t first_offset = 0;  // byte offset of text[0] in the file
};

// What a worker makes of a batch, per output key.
struct KeyOutput {
  std::vector<uint8_t> bytes;                // the tokens in the output dtype
  std::vector<int32_t> sequence_lengths;
  std::vector<int32_t> sequences_per_document;
};

struct Job {
  Batch batch;
  std::vector<KeyOutput> outputs;
  int64_t documents = 0, tokens = 0;
  std::string error;  // the batch's first bad input, if any
  bool done = false;
};

class InputReader {
 public:
  InputReader(const std::string& path, bool jsonl, int64_t batch_bytes)
      : path_(path), jsonl_(jsonl), batch_bytes_(batch_bytes) {
    file_ = std::fopen(path.c_str(), "rb");
    TESSEL_CHECK(file_ != nullptr, "{}: cannot open ({})", path, std::strerror(errno));
  }
  ~InputReader() { std::fclose(file_); }
  InputReader(const InputReader&) = delete;
  InputReader& operator=(const InputReader&) = delete;

  // The next batch of whole documents, or nothing at the end of the input.
  std::optional<Batch> next() {
    for (;;) {
      const size_t cut = boundary();
      if (cut > 0 && (pending_.size() >= static_cast<size_t>(batch_bytes_) || eof_)) return take(cut);
      if (eof_) return std::nullopt;  // boundary() takes everything once the input has ended
      fill();
    }
  }

 private:
  // Where the last document that is surely complete ends in pending_ (0: none yet).
  size_t boundary() const {
    if (pending_.empty()) return 0;
    if (eof_) return pending_.size();
    if (jsonl_) {
      const size_t newline = pending_.rfind('\n');
      return newline == std::string::npos ? 0 : newline + 1;
    }
    size_t end = 0;
    const std::string_view text(pending_);
    for (size_t n; (n = text_document_length(text.substr(end), false)) > 0;) end += n;
    return end;
  }

  void fill() {
    const size_t old = pending_.size();
    const size_t want = static_cast<size_t>(batch_bytes_);
    pending_.resize(old + want);
    const size_t got = std::fread(pending_.data() + old, 1, want, file_);
    pending_.resize(old + got);
    if (got < want) {
      TESSEL_CHECK(!std::ferror(file_), "{}: read failed ({})", path_, std::strerror(errno));
      eof_ = true;
    }
  }

  Batch take(size_t cut) {
    Batch b;
    b.text = pending_.substr(0, cut);
    pending_.erase(0, cut);
    b.first_line = line_;
    b.first_offset = offset_;
    line_ += std::count(b.text.begin(), b.text.end(), '\n');
    offset_ += static_cast<int64_t>(cut);
    return b;
  }

  std::string path_;
  bool jsonl_;
  int64_t batch_bytes_;
  std::FILE* file_ = nullptr;
  std::string pending_;
  bool eof_ = false;
  int64_t line_ = 1, offset_ = 0;
};

// Parses, checks and tokenizes one batch (on a worker thread).
void run_job(Job& job, const PreprocessOptions& options, bool jsonl, const Tokenizer& tokenizer,
             int32_t eod, TokenDType dtype) {
  const size_t keys = jsonl ? options.json_keys.size() : 1;
  job.outputs.assign(keys, {});
  const Batch& b = job.batch;
  check_utf8(b.text, options.input, b.first_line, b.first_offset);
  std::vector<int32_t> tokens, lengths;
  auto add = [&](size_t key, const std::vector<std::string>& sentences, int64_t line) {
    tokenize_document(tokenizer, sentences, eod, tokens, lengths);
    KeyOutput& out = job.outputs[key];
    encode_tokens(dtype, tokens, out.bytes, fmt::format("{}:{}", options.input, line));
    out.sequence_lengths.insert(out.sequence_lengths.end(), lengths.begin(), lengths.end());
    out.sequences_per_document.push_back(static_cast<int32_t>(lengths.size()));
    job.tokens += static_cast<int64_t>(tokens.size());
  };
  for_each_document(b.text, jsonl, options.json_keys, options.input, b.first_line,
                    [&](const std::vector<std::vector<std::string>>& documents, int64_t line) {
                      for (size_t k = 0; k < keys; ++k) add(k, documents[k], line);
                      ++job.documents;
                    });
}

// The worker threads and the queue of jobs they take from. Destroying the pool stops and joins
// them (after their current job), so an error on the reading thread never leaves one running.
class WorkerPool {
 public:
  WorkerPool(int workers, std::function<void(Job&)> work) : work_(std::move(work)) {
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { loop(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void submit(Job* job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      todo_.push_back(job);
    }
    wake_.notify_one();
  }

  void wait(const Job& job) {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return job.done; });
  }

 private:
  void loop() {
    for (;;) {
      Job* job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !todo_.empty(); });
        if (stop_) return;
        job = todo_.front();
        todo_.pop_front();
      }
      try {
        work_(*job);
      } catch (const std::exception& e) {
        job->error = e.what();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        job->done = true;
      }
      finished_.notify_all();
    }
  }

  std::function<void(Job&)> work_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  std::deque<Job*> todo_;
  bool stop_ = false;
};

// The k-th key's output, PREFIX_{key}_document (.bin/.idx), as Megatron's preprocess_data.py.
std::string document_prefix(const PreprocessOptions& options, size_t k) {
  return options.output_prefix + "_" + options.json_keys[k] + "_document";
}

}  // namespace

PreprocessResult preprocess(const PreprocessOptions& options, const Tokenizer& tokenizer) {
  std::vector<std::string> problems;
  if (options.input.empty()) problems.push_back("--input is required");
  if (options.output_prefix.empty()) problems.push_back("--output-prefix is required");
  if (options.json_keys.empty()) problems.push_back("--json-keys needs at least one key");
  // Each key names its output, PREFIX_KEY_document.bin: one file per key, a plain name.
  for (size_t i = 0; i < options.json_keys.size(); ++i) {
    const std::string& key = options.json_keys[i];
    if (std::find(options.json_keys.begin(), options.json_keys.begin() + i, key) != options.json_keys.begin() + i)
      problems.push_back(fmt::format("--json-keys '{}' is given twice: each key writes its own file", key));
    else if (key.empty() || key.find('/') != std::string::npos || key.find('\0') != std::string::npos)
      problems.push_back(fmt::format("--json-keys '{}' cannot be part of the output's file name {}_{}_document.bin",
                                     key, options.output_prefix, key));
  }
  if (options.workers < 1) problems.push_back(fmt::format("--workers must be at least 1 (got {})", options.workers));
  const bool jsonl = is_jsonl_path(options.input);
  if (!jsonl && options.json_keys.size() > 1)
    problems.push_back(fmt::format("{} is plain text, one output: --json-keys takes one key (its name)", options.input));
  const int32_t eod = tokenizer.special_ids().eod;
  if (options.append_eod && eod < 0)
    problems.push_back(fmt::format("--append-eod: the tokenizer {} has no end-of-document token",
                                   tokenizer.type()));
  // Written over its --input (x_text_document.bin as the input of --output-prefix x), the corpus
  // would be replaced while it is read.
  CommandPaths paths{.inputs = {{"--input", options.input}}};
  for (size_t k = 0; k < (jsonl ? options.json_keys.size() : std::min<size_t>(options.json_keys.size(), 1)); ++k)
    for (const char* suffix : {".bin", ".idx"})
      paths.output_files.push_back({"--output-prefix", document_prefix(options, k) + suffix});
  for (std::string& clash : path_clashes(paths)) problems.push_back(std::move(clash));
  if (!problems.empty()) {
    std::string message = problems[0];
    for (size_t i = 1; i < problems.size(); ++i) message += "; " + problems[i];
    throw ConfigError(message);
  }
  TESSEL_CHECK(std::filesystem::is_regular_file(options.input), "{}: no such file", options.input);

  // The output's folder is created, as Megatron's preprocess_data.py does not but a user expects.
  const std::filesystem::path out_dir = std::filesystem::path(options.output_prefix).parent_path();
  if (!out_dir.empty()) require_writable_dir("--output-prefix", out_dir.string());

  PreprocessResult result;
  result.dtype = optimal_token_dtype(tokenizer.vocab_size());
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (size_t k = 0; k < (jsonl ? options.json_keys.size() : 1); ++k) {
    result.prefixes.push_back(document_prefix(options, k));
    writers.push_back(std::make_unique<IndexedDatasetWriter>(result.prefixes.back(), result.dtype));
  }

  PreprocessProgress& totals = result.totals;
  totals.bytes_total = static_cast<int64_t>(std::filesystem::file_size(options.input));
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  double last_report = 0;

  InputReader reader(options.input, jsonl, options.batch_bytes);
  std::deque<std::unique_ptr<Job>> in_flight;  // in input order; outlives the pool below
  WorkerPool pool(options.workers, [&](Job& job) {
    run_job(job, options, jsonl, tokenizer, options.append_eod ? eod : -1, result.dtype);
  });
  const size_t max_in_flight = 2 * static_cast<size_t>(options.workers) + 1;
  bool input_left = true;
  while (input_left || !in_flight.empty()) {
    while (input_left && in_flight.size() < max_in_flight) {
      std::optional<Batch> batch = reader.next();
      if (!batch) {
        input_left = false;
        break;
      }
      in_flight.push_back(std::make_unique<Job>());
      in_flight.back()->batch = std::move(*batch);
      pool.submit(in_flight.back().get());
    }
    if (in_flight.empty()) break;
    Job& job = *in_flight.front();
    pool.wait(job);
    if (!job.error.empty()) throw Error(job.error);
    for (size_t k = 0; k < writers.size(); ++k)
      writers[k]->add_encoded(job.outputs[k].bytes, job.outputs[k].sequence_lengths,
                              job.outputs[k].sequences_per_document);
    totals.bytes_done += static_cast<int64_t>(job.batch.text.size());
    totals.documents += job.documents;
    totals.tokens += job.tokens;
    in_flight.pop_front();
    totals.seconds = elapsed();
    if (options.progress && totals.seconds - last_report >= options.progress_interval) {
      options.progress(totals);
      last_report = totals.seconds;
    }
  }
  TESSEL_CHECK(totals.documents > 0, "{}: no documents", options.input);
  for (auto& w : writers) w->finalize();
  totals.seconds = elapsed();
  return result;
}

}  // namespace tessel
