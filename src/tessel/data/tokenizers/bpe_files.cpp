#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <cerrno>
#include <cstring>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/byte_level.h"
#include "tessel/data/tokenizers/loaders.h"

namespace tessel {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read: {}", path, std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  TESSEL_CHECK(!in.bad(), "{}: cannot read: {}", path, std::strerror(errno));
  return std::move(buf).str();
}

void for_each_line(std::string_view text, const std::function<void(size_t, std::string_view)>& fn) {
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    fn(++line_no, line);
  }
}

nlohmann::json parse_json_text(std::string_view text, std::string_view name) {
  // e.what() carries nlohmann's "[json.exception.parse_error.101] parse error at line 1, ...".
  auto message = [](const nlohmann::json::exception& e) {
    std::string what = e.what();
    const size_t tag = what.find("] ");
    return tag == std::string::npos ? what : what.substr(tag + 2);
  };
  // The readers of a tokenizer's components recurse into a Sequence's members: the nesting is
  // bounded while parsing, before anything recurses (a file 100,000 deep would exhaust the stack).
  const auto bounded = [&](int depth, nlohmann::json::parse_event_t event, const nlohmann::json&) {
    if (depth >= kMaxJsonDepth && (event == nlohmann::json::parse_event_t::object_start ||
                                   event == nlohmann::json::parse_event_t::array_start))
      fail("{}: JSON nested deeper than {} levels (objects and lists within each other)", name, kMaxJsonDepth);
    return true;
  };
  try {
    return nlohmann::json::parse(text, bounded);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: not valid JSON at byte {}: {}", name, e.byte, message(e));
  } catch (const nlohmann::json::exception& e) {
    // A number beyond a double ("number overflow parsing '1E400'") comes without its offset:
    // the quoted number is found in the text.
    const std::string what = message(e);
    const size_t open = what.find('\''), close = what.rfind('\'');
    const size_t at = open < close ? text.find(std::string_view(what).substr(open + 1, close - open - 1)) : text.npos;
    if (at != text.npos) fail("{}: not valid JSON at byte {}: {}", name, at, what);
    fail("{}: not valid JSON: {}", name, what);
  }
}

BpeVocab parse_byte_level_vocab(const nlohmann::json& vocab, std::string_view name, bool byte_level) {
  TESSEL_CHECK(vocab.is_object(), "{}: the vocabulary must be a JSON object of token: id", name);
  BpeVocab out;
  for (const auto& [token, value] : vocab.items()) {
    const int64_t limit = static_cast<int64_t>(vocab.size()) + kMaxIdGap;
    TESSEL_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < limit,
                 "{}: token {:?} has id {}, not an integer in [0, {}) (tokens + 2^20)", name, token, value.dump(), limit);
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    std::optional<std::string> bytes = byte_level ? byte_level_decode(token) : std::nullopt;
    if (id < out.size() && out.present[id])
      fail("{}: id {} is given to two tokens, {:?} and {:?}", name, id,
           byte_level ? byte_level_encode(out.bytes[id]) : out.bytes[id], token);
    out.set(id, bytes ? std::move(*bytes) : token);
  }
  TESSEL_CHECK(out.size() > 0, "{}: the vocabulary is empty", name);
  return out;
}

BpeMerge resolve_merge(std::string_view a, std::string_view b, int32_t rank, const TokenIndex& index,
                       std::string_view where, bool byte_level) {
  auto id_of = [&](std::string_view text) -> std::optional<int32_t> {
    const std::optional<std::string> bytes = byte_level ? byte_level_decode(text) : std::nullopt;
    return index.find(bytes ? std::string_view(*bytes) : text);
  };
  const std::optional<int32_t> left = id_of(a), right = id_of(b);
  TESSEL_CHECK(left, "{}: merge {:?} {:?} names {:?}, which is not in the vocabulary", where, a, b, a);
  TESSEL_CHECK(right, "{}: merge {:?} {:?} names {:?}, which is not in the vocabulary", where, a, b, b);
  std::string joined(a);
  joined += b;
  const std::optional<int32_t> merged = id_of(joined);
  TESSEL_CHECK(merged, "{}: merge {:?} {:?} makes {:?}, which is not in the vocabulary", where, a, b, joined);
  return {*left, *right, *merged, rank};
}

}  // namespace tessel
