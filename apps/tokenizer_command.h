// `tessel tokenizer train | encode | decode | inspect`: train a tokenizer on text files, and
// run any tokenizer that make_tokenizer knows from the command line (Megatron's flags).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "tessel/data/tokenizer.h"
#include "tessel/data/tokenizers/train.h"

namespace tessel {

class TokenizerCommand {
 public:
  // Adds the `tokenizer` subcommand to `app`; its flags parse into this object, so it must
  // outlive app.parse().
  explicit TokenizerCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  void run() const;

 private:
  void train() const;
  void encode() const;
  void decode() const;
  void inspect() const;
  std::unique_ptr<Tokenizer> tokenizer() const;
  std::string read_input() const;  // --input FILE or the whole of standard input
  std::string input_name() const;

  CLI::App* cmd_;
  CLI::App* train_;
  CLI::App* encode_;
  CLI::App* decode_;
  CLI::App* inspect_;
  TokenizerOptions options_;
  TokenizerTrainOptions train_options_;
  std::string input_;
  bool json_ = false;
  bool no_special_tokens_ = false;
  std::vector<std::string> tokens_;  // inspect --token
  std::vector<int32_t> ids_;         // inspect --id
  std::string text_;                 // inspect --text
};

}  // namespace tessel
