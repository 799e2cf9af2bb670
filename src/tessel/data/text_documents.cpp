#include "tessel/data/text_documents.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"

namespace tessel {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool blank_line(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// The length of the UTF-8 sequence starting at s[i], or 0 when it is invalid (overlong forms,
// surrogates and code points past U+10FFFF included).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  if (b < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) n = 2;
  else if (b == 0xE0) { n = 3; lo = 0xA0; }
  else if (b >= 0xE1 && b <= 0xEC) n = 3;
  else if (b == 0xED) { n = 3; hi = 0x9F; }
  else if (b >= 0xEE && b <= 0xEF) n = 3;
  else if (b == 0xF0) { n = 4; lo = 0x90; }
  else if (b >= 0xF1 && b <= 0xF3) n = 4;
  else if (b == 0xF4) { n = 4; hi = 0x8F; }
  else return 0;
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

}  // namespace

bool is_jsonl_path(const std::string& path) { return ends_with(path, ".jsonl") || ends_with(path, ".json"); }

void check_utf8(std::string_view text, const std::string& file, int64_t first_line,
                int64_t first_offset) {
  for (size_t i = 0; i < text.size();) {
    if (i + 8 <= text.size()) {  // eight ASCII bytes at a time
      uint64_t word;
      std::memcpy(&word, text.data() + i, 8);
      if ((word & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0) {  // the line number is counted only for the message
      const int64_t line = first_line + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(i), '\n');
      fail("{}:{}: invalid UTF-8 at byte offset {} (0x{:02x})", file, line,
           first_offset + static_cast<int64_t>(i), static_cast<unsigned char>(text[i]));
    }
    i += n;
  }
}

size_t text_document_length(std::string_view text, bool at_end) {
  bool seen_text = false, in_blank_run = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t newline = text.find('\n', pos);
    const size_t next = newline == std::string_view::npos ? text.size() : newline + 1;
    if (newline == std::string_view::npos && !at_end) return 0;  // an unfinished line
    const bool blank = blank_line(text.substr(pos, next - pos));
    if (!blank && in_blank_run) return pos;  // the blank run after some text ends here
    if (blank && seen_text) in_blank_run = true;
    seen_text = seen_text || !blank;
    pos = next;
  }
  return at_end ? text.size() : 0;
}

std::vector<std::vector<std::string>> parse_jsonl_line(std::string_view line,
                                                       const std::vector<std::string>& keys,
                                                       const std::string& file,
                                                       int64_t line_number) {
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    std::string what = one_line(e.what());
    if (what.size() > 200) what = what.substr(0, 200) + "...";
    fail("{}:{}: bad JSON ({})", file, line_number, what);
  }
  TESSEL_CHECK(object.is_object(), "{}:{}: expected a JSON object, got {}", file, line_number,
               object.type_name());
  std::vector<std::vector<std::string>> documents;
  for (const std::string& key : keys) {
    const auto it = object.find(key);
    TESSEL_CHECK(it != object.end(), "{}:{}: no key \"{}\" (--json-keys)", file, line_number, key);
    std::vector<std::string> sentences;
    if (it->is_string()) {
      sentences.push_back(it->get<std::string>());
    } else {
      TESSEL_CHECK(it->is_array(), "{}:{}: \"{}\" is a {}, not a string or a list of strings",
                   file, line_number, key, it->type_name());
      for (const nlohmann::json& s : *it) {
        TESSEL_CHECK(s.is_string(), "{}:{}: \"{}\" holds a {}, not only strings", file,
                     line_number, key, s.type_name());
        sentences.push_back(s.get<std::string>());
      }
    }
    documents.push_back(std::move(sentences));
  }
  return documents;
}

void for_each_document(std::string_view text, bool jsonl, const std::vector<std::string>& keys,
                       const std::string& file, int64_t first_line, const DocumentSink& document) {
  int64_t line = first_line;
  for (size_t pos = 0; pos < text.size();) {
    size_t next;
    if (jsonl) {
      const size_t newline = text.find('\n', pos);
      next = newline == std::string_view::npos ? text.size() : newline + 1;
      const std::string_view record = text.substr(pos, next - pos);
      if (record.find_first_not_of(" \t\r\n") != std::string_view::npos)
        document(parse_jsonl_line(record, keys, file, line), line);
      ++line;
    } else {
      next = pos + text_document_length(text.substr(pos), true);
      const std::string_view part = text.substr(pos, next - pos);
      document({{std::string(part)}}, line);
      line += std::count(part.begin(), part.end(), '\n');
    }
    pos = next;
  }
}

void tokenize_document(const Tokenizer& tokenizer, const std::vector<std::string>& sentences,
                       int32_t eod, std::vector<int32_t>& tokens, std::vector<int32_t>& lengths) {
  tokens.clear();
  lengths.clear();
  for (const std::string& sentence : sentences) {
    const std::vector<int32_t> ids = tokenizer.encode(sentence);
    if (ids.empty()) continue;
    TESSEL_CHECK(ids.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                 "a sentence of {} tokens does not fit a sequence (int32 sizes)", ids.size());
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    lengths.push_back(static_cast<int32_t>(ids.size()));
  }
  if (eod >= 0 && !tokens.empty()) {
    tokens.push_back(eod);
    ++lengths.back();
  }
}

}  // namespace tessel
