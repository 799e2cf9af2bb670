#include "tokenizer_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tessel/data/tokenizers/unicode_classes.h"
#include "tessel/data/utf8.h"
#include "thread_flags.h"
#include "tokenizer_flags.h"

namespace tessel {

namespace {

void write_stdout(std::string_view bytes) {
  TESSEL_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size(), "cannot write to standard output");
}

std::string id_text(int32_t id, const Tokenizer& t) {
  return id < 0 ? std::string("none") : fmt::format("{} {:?}", id, t.id_to_token(id));
}

// The ids of `text`: whitespace-separated integers, or one JSON array of them.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& name) {
  std::vector<int32_t> ids;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    const nlohmann::json list = parse_json_text(text, name);
    TESSEL_CHECK(list.is_array(), "{}: expected one JSON array of token ids", name);
    for (size_t i = 0; i < list.size(); ++i) {
      TESSEL_CHECK(list[i].is_number_integer() && list[i].get<int64_t>() >= INT32_MIN && list[i].get<int64_t>() <= INT32_MAX,
                   "{}: element {} ({}) is not a token id", name, i, list[i].dump());
      ids.push_back(list[i].get<int32_t>());
    }
    return ids;
  }
  for (size_t pos = 0; pos < text.size();) {
    if (std::isspace(static_cast<unsigned char>(text[pos]))) {
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    int32_t id = 0;
    const auto [stop, ec] = std::from_chars(text.data() + pos, text.data() + end, id);
    TESSEL_CHECK(ec == std::errc() && stop == text.data() + end, "{}: {:?} at byte offset {} is not a token id", name,
                 text.substr(pos, end - pos), pos);
    ids.push_back(id);
    pos = end;
  }
  return ids;
}

}  // namespace

TokenizerCommand::TokenizerCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("tokenizer", "train a tokenizer; encode, decode or inspect with one");
  cmd_->require_subcommand(1);
  train_ = cmd_->add_subcommand("train", "train a tokenizer on text files");
  train_->add_option("--input", train_options_.inputs, "UTF-8 text files")->required();
  train_->add_option("--vocab-size", train_options_.vocab_size, "vocabulary size, special tokens included")->required();
  train_->add_option("--model-type", train_options_.model_type,
                     "bpe | unigram (SentencePiece: DIR/tokenizer.model) | byte-bpe (GPT-2-style byte-level BPE: "
                     "DIR/tokenizer.json)")->capture_default_str();
  train_->add_option("--output", train_options_.output_dir, "folder to write")->required();
  // Each set only when given (TokenizerTrainOptions): the other trainer's setting is refused.
  train_->add_option_function<double>("--character-coverage", [this](double v) { train_options_.character_coverage = v; },
                                      "SentencePiece: share of characters the pieces must cover, in [0.98, 1] "
                                      "(default 0.9995)");
  train_->add_flag_function("--byte-fallback,!--no-byte-fallback",
                            [this](int64_t count) { train_options_.byte_fallback = count > 0; },
                            "SentencePiece: byte pieces for characters outside the vocabulary (default on)");
  train_->add_option_function<int64_t>("--min-frequency", [this](int64_t v) { train_options_.min_frequency = v; },
                                       "byte-bpe: fewest occurrences of a merged pair (default 2)");
  add_thread_count_flag(*train_, "--threads", train_options_.threads, "SentencePiece trainer threads (0: all cores)");

  encode_ = cmd_->add_subcommand("encode", "print the token ids of standard input (or --input) read as one text");
  decode_ = cmd_->add_subcommand("decode", "write the text of token ids (whitespace-separated or a JSON array)");
  inspect_ = cmd_->add_subcommand("inspect", "print a tokenizer's type, vocabulary size and special tokens");
  for (CLI::App* sub : {encode_, decode_, inspect_}) {
    add_tokenizer_flags(*sub, options_);
    sub->add_option("--vocab-size", options_.vocab_size, "TikTokenizer with Megatron's .json: the vocabulary size");
  }
  for (CLI::App* sub : {encode_, decode_}) sub->add_option("--input", input_, "read this file instead of standard input");
  encode_->add_flag("--json", json_, "print a JSON array");
  encode_->add_flag("--no-special-tokens", no_special_tokens_,
                    "leave out the special tokens the post-processor puts around the text (add_special_tokens=False)");
  inspect_->add_flag("--json", json_, "print one JSON object");
  inspect_->add_option("--token", tokens_, "also show the id of this token (as the vocabulary spells it)");
  inspect_->add_option("--id", ids_, "also show the token of this id");
  inspect_->add_option("--text", text_, "also show how this text encodes");
}

void TokenizerCommand::run() const {
  if (*train_) train();
  else if (*encode_) encode();
  else if (*decode_) decode();
  else inspect();
}

std::unique_ptr<Tokenizer> TokenizerCommand::tokenizer() const { return make_tokenizer(options_); }

std::string TokenizerCommand::input_name() const { return input_.empty() ? "standard input" : input_; }

std::string TokenizerCommand::read_input() const {
  if (!input_.empty()) return read_text_file(input_);
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), stdin)) > 0) text.append(buf, n);
  TESSEL_CHECK(!std::ferror(stdin), "cannot read standard input");
  return text;
}

void TokenizerCommand::train() const {
  const TokenizerOptions result = train_tokenizer(train_options_);
  const std::unique_ptr<Tokenizer> t = make_tokenizer(result);
  fmt::print("wrote {}: {} with {} tokens\n", result.tokenizer_model, t->type(), t->vocab_size());
  fmt::print("use it with: --tokenizer-type {} --tokenizer-model {}\n", result.type, result.tokenizer_model);
}

void TokenizerCommand::encode() const {
  const std::unique_ptr<Tokenizer> t = tokenizer();
  const std::string text = read_input();
  check_utf8(text, input_name());
  const std::vector<int32_t> ids = no_special_tokens_ ? t->encode_bare(text) : t->encode(text);
  fmt::memory_buffer out;
  if (json_) out.push_back('[');
  for (size_t i = 0; i < ids.size(); ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? (json_ ? "," : " ") : "", ids[i]);
  if (json_) out.push_back(']');
  out.push_back('\n');
  write_stdout(std::string_view(out.data(), out.size()));
}

void TokenizerCommand::decode() const {
  const std::unique_ptr<Tokenizer> t = tokenizer();
  write_stdout(t->decode(parse_ids(read_input(), input_name())));
}

void TokenizerCommand::inspect() const {
  const std::unique_ptr<Tokenizer> t = tokenizer();
  const SpecialIds s = t->special_ids();
  const auto specials = t->special_tokens();
  if (json_) {
    nlohmann::json j = {{"type", t->type()}, {"vocab_size", t->vocab_size()}, {"unicode", unicode_version()},
                        {"unicode_normalization", normalization_unicode_version()}, {"unicode_case", case_unicode_version()},
                        {"special_ids", {{"eod", s.eod}, {"bos", s.bos}, {"eos", s.eos}, {"pad", s.pad}}}};
    j["special_tokens"] = nlohmann::json::array();
    for (const auto& [content, id] : specials) j["special_tokens"].push_back({{"content", content}, {"id", id}});
    for (const std::string& token : tokens_) {
      const std::optional<int32_t> id = t->token_to_id(token);
      j["tokens"][token] = id ? nlohmann::json(*id) : nlohmann::json(nullptr);
    }
    for (int32_t id : ids_) j["ids"][std::to_string(id)] = t->id_to_token(id);
    if (!text_.empty()) {
      const std::vector<int32_t> ids = t->encode(text_);
      j["text"]["ids"] = ids;
      for (int32_t id : ids) j["text"]["tokens"].push_back(t->id_to_token(id));
    }
    // Token spellings may be raw bytes that are not UTF-8 (tiktoken): shown with U+FFFD.
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  fmt::print("type: {}\nvocab size: {}\nunicode: {} (pre-tokenizer classes), {} (NFC/NFD/NFKC/NFKD, as the library), {} "
             "(Lowercase)\n", t->type(), t->vocab_size(), unicode_version(), normalization_unicode_version(), case_unicode_version());
  fmt::print("eod: {} | bos: {} | eos: {} | pad: {}\n", id_text(s.eod, *t), id_text(s.bos, *t), id_text(s.eos, *t),
             id_text(s.pad, *t));
  constexpr size_t kShown = 16;
  fmt::print("special tokens: {}\n", specials.size());
  for (size_t i = 0; i < specials.size() && i < kShown; ++i) fmt::print("  {} {:?}\n", specials[i].second, specials[i].first);
  if (specials.size() > kShown) fmt::print("  ... {} more\n", specials.size() - kShown);
  for (const std::string& token : tokens_) {
    const std::optional<int32_t> id = t->token_to_id(token);
    fmt::print("token {:?}: {}\n", token, id ? std::to_string(*id) : "not in the vocabulary");
  }
  for (int32_t id : ids_) fmt::print("id {}: {:?}\n", id, t->id_to_token(id));
  if (!text_.empty()) {
    const std::vector<int32_t> ids = t->encode(text_);
    std::vector<std::string> tokens;
    for (int32_t id : ids) tokens.push_back(fmt::format("{:?}", t->id_to_token(id)));
    fmt::print("text {:?}: {} tokens\n  ids: {}\n  tokens: {}\n", text_, ids.size(), fmt::join(ids, " "),
               fmt::join(tokens, " "));
  }
}

}  // namespace tessel
