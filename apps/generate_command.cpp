#include "generate_command.h"

#include <omp.h>

#include <cstdio>

#include "standard_output.h"
#include "thread_flags.h"
#include "tokenizer_flags.h"

namespace tessel {

GenerateCommand::GenerateCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("generate", "sample text from a model folder");
  CLI::App& c = *cmd_;
  GenerateOptions& g = options_;
  c.add_option("--model", model_dir_, "folder with config.json + model.safetensors")->required();
  c.add_option("--prompt", g.prompt, "text to continue");
  c.add_option("--max-new-tokens", g.max_new_tokens, "tokens to generate")->capture_default_str();
  c.add_option("--temperature", g.temperature, "sampling temperature (0: greedy)")->capture_default_str();
  c.add_option("--top-k", g.top_k, "sample among the k likeliest tokens (0: all)")->capture_default_str();
  c.add_option("--seed", g.seed, "sampling seed")->capture_default_str();
  c.add_flag("--ignore-eos", g.ignore_eos, "go on past the end-of-sequence token");
  add_tokenizer_flags(c, tokenizer_);
  add_thread_count_flag(c, "--threads", threads_, "threads");
}

void GenerateCommand::run() {
  if (threads_ > 0) omp_set_num_threads(threads_);
  validate_generate_options(options_);
  if (tokenizer_flags_given(*cmd_)) options_.tokenizer = tokenizer_;
  generate(model_dir_, options_, [](const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    flush_standard_output();  // shown as it comes; a failed write stops generating
  });
  std::fputs("\n", stdout);
}

}  // namespace tessel
