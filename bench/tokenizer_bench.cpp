// Encoding throughput of one tokenizer on one text, one thread: loads the tokenizer (Megatron's
// flags), encodes the text --rounds times, prints one JSON line with the best and median MB/s
// (megabytes = 10^6 bytes of UTF-8 input) and the token count. bench/tokenizer_bench.sh runs it
// against npm tiktoken.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "../apps/tokenizer_flags.h"
#include "tessel/core/error.h"
#include "tessel/data/tokenizers/loaders.h"

int main(int argc, char** argv) {
  CLI::App app{"tokenizer encode throughput"};
  tessel::TokenizerOptions options;
  tessel::add_tokenizer_flags(app, options);
  std::string text_file;
  int rounds = 5;
  app.add_option("--text", text_file, "UTF-8 text to encode")->required();
  app.add_option("--rounds", rounds, "timed encodes")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const auto t0 = std::chrono::steady_clock::now();
    const auto tokenizer = tessel::make_tokenizer(options);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string text = tessel::read_text_file(text_file);
    size_t warm = std::min<size_t>(text.size(), 10000);  // a warm-up on the start, cut between characters
    while (warm < text.size() && (static_cast<unsigned char>(text[warm]) & 0xC0) == 0x80) --warm;
    size_t tokens = tokenizer->encode(std::string_view(text).substr(0, warm)).size();
    std::vector<double> mbps;
    for (int r = 0; r < rounds; ++r) {
      const auto start = std::chrono::steady_clock::now();
      tokens = tokenizer->encode(text).size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      mbps.push_back(text.size() / 1e6 / s);
    }
    std::sort(mbps.begin(), mbps.end());
    fmt::print("{{\"impl\": \"tessel\", \"tokens\": {}, \"bytes\": {}, \"best_mb_s\": {:.3f}, \"median_mb_s\": {:.3f}, "
               "\"load_s\": {:.3f}}}\n", tokens, text.size(), mbps.back(), mbps[mbps.size() / 2], load_s);
  } catch (const std::exception& e) {
    fmt::print(stderr, "tokenizer_bench: error: {}\n", e.what());
    return 1;
  }
}
