#include "preprocess_command.h"

#include <unistd.h>

#include <cstdio>
#include <fmt/format.h>

#include "thread_flags.h"
#include "tokenizer_flags.h"

namespace tessel {

namespace {

constexpr double kMB = 1e6;

// "[#########...........]  38% | 45.2/120.0 MB | 12345 docs | 23.4 MB/s | 6789 docs/s", redrawn
// in place on stderr.
void draw_progress(const PreprocessProgress& p) {
  const double fraction = p.bytes_total > 0 ? static_cast<double>(p.bytes_done) / p.bytes_total : 1.0;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(fraction * kWidth);
  const double s = p.seconds > 0 ? p.seconds : 1e-9;
  fmt::print(stderr, "\r\033[K[{}{}] {:3.0f}% | {:.1f}/{:.1f} MB | {} docs | {:.1f} MB/s | {:.0f} docs/s",
             std::string(filled, '#'), std::string(kWidth - filled, '.'), 100 * fraction,
             p.bytes_done / kMB, p.bytes_total / kMB, p.documents, p.bytes_done / kMB / s,
             p.documents / s);
  std::fflush(stderr);
}

}  // namespace

PreprocessCommand::PreprocessCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("preprocess",
                            "tokenize a JSONL or text corpus into Megatron's .bin/.idx (as tools/preprocess_data.py)");
  cmd_->add_option("--input", options_.input,
                   "JSONL (one JSON object per line; .jsonl/.json) or plain text (documents cut after "
                   "each run of blank lines)")->required();
  cmd_->add_option("--json-keys", options_.json_keys, "JSON keys to extract, each its own output")
      ->capture_default_str();
  cmd_->add_option("--output-prefix", options_.output_prefix,
                   "writes PREFIX_{key}_document.bin/.idx")->required();
  cmd_->add_flag("--append-eod", options_.append_eod, "append the tokenizer's end-of-document token to each document");
  add_thread_count_flag(*cmd_, "--workers", options_.workers, "tokenizing threads")->capture_default_str();
  add_tokenizer_flags(*cmd_, tokenizer_);
}

void PreprocessCommand::run() {
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(tokenizer_);
  const bool terminal = isatty(STDERR_FILENO) != 0;
  if (terminal) options_.progress = draw_progress;
  const PreprocessResult r = preprocess(options_, *tokenizer);
  if (terminal) {
    draw_progress(r.totals);
    fmt::print(stderr, "\n");
  }
  const PreprocessProgress& t = r.totals;
  const double s = t.seconds > 0 ? t.seconds : 1e-9;
  for (const std::string& prefix : r.prefixes) fmt::print("wrote {}.bin and {}.idx\n", prefix, prefix);
  fmt::print("{} documents, {} tokens ({}), {:.2f} MB of input in {:.2f} s: {:.2f} MB/s, {:.0f} docs/s "
             "with {} worker{}\n",
             t.documents, t.tokens, token_dtype_name(r.dtype), t.bytes_done / kMB, t.seconds,
             t.bytes_done / kMB / s, t.documents / s, options_.workers, options_.workers == 1 ? "" : "s");
}

}  // namespace tessel
