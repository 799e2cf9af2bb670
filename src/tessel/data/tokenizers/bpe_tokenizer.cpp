#include "tessel/data/tokenizers/bpe_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/byte_level.h"
#include "tessel/data/utf8.h"

namespace tessel {

namespace {

// NFC leaves text alone when every character is below U+0300: the combining marks, Hangul jamo
// and the singletons that NFC changes all lie above (lead bytes 0xCC and up).
bool may_change_under_nfc(std::string_view text) {
  for (unsigned char c : text)
    if (c >= 0xCC) return true;
  return false;
}

std::string nfc(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  TESSEL_CHECK(n >= 0, "NFC normalization failed: {}", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeModel model, BpeTokenizerParts parts)
    : model_(std::move(model)), parts_(std::move(parts)) {
  if (parts_.split_specials) splitter_ = AddedTokenSplitter(parts_.specials);
  int32_t size = model_.vocab().size();
  for (const AddedToken& t : parts_.specials) size = std::max(size, t.id + 1);
  vocab_size_ = parts_.vocab_size > 0 ? parts_.vocab_size : size;
  special_of_.assign(size, -1);
  for (size_t i = 0; i < parts_.specials.size(); ++i) special_of_[parts_.specials[i].id] = static_cast<int32_t>(i);
  for (const std::vector<int32_t>* ids : {&parts_.prefix, &parts_.suffix})
    for (int32_t id : *ids)
      TESSEL_CHECK(special(id) || (id >= 0 && id < model_.vocab().size() && model_.vocab().present[id]),
                   "{}: the post-processor's template adds token {}, which is not in the vocabulary", model_.where(), id);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  check_utf8(text, "text to encode");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + parts_.prefix.size() + parts_.suffix.size());
  out.insert(out.end(), parts_.prefix.begin(), parts_.prefix.end());
  if (parts_.split_specials) {
    splitter_.split(text, [&](std::string_view segment) { encode_segment(segment, out); },
                    [&](int32_t id) { out.push_back(id); });
  } else {
    encode_segment(text, out);
  }
  out.insert(out.end(), parts_.suffix.begin(), parts_.suffix.end());
  return out;
}

void BpeTokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized;
  if (parts_.nfc && may_change_under_nfc(text)) {
    normalized = nfc(text);
    text = normalized;
  }
  std::string prefixed;
  if (parts_.add_prefix_space && !text.empty() && text[0] != ' ') {
    prefixed = " ";
    prefixed += text;
    text = prefixed;
  }
  parts_.pre.for_each_piece(text, [&](std::string_view piece) { model_.encode_piece(piece, out); });
}

const AddedToken* BpeTokenizer::special(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(special_of_.size()) || special_of_[id] < 0) return nullptr;
  return &parts_.specials[special_of_[id]];
}

std::string BpeTokenizer::decode(std::span<const int32_t> tokens) const {
  std::string text;
  const BpeVocab& vocab = model_.vocab();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t id = tokens[i];
    if (const AddedToken* t = special(id)) {
      text += t->content;
      continue;
    }
    TESSEL_CHECK(id >= 0 && id < vocab.size() && vocab.present[id],
                 "{}: token {} at position {} is not in the vocabulary (size {})", parts_.type, id, i, vocab_size_);
    text += vocab.bytes[id];
  }
  return text;
}

std::string BpeTokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* t = special(id)) return t->content;
  const BpeVocab& vocab = model_.vocab();
  TESSEL_CHECK(id >= 0 && id < vocab.size() && vocab.present[id], "{}: token {} is not in the vocabulary (size {})",
               parts_.type, id, vocab_size_);
  return parts_.byte_level_spelling ? byte_level_encode(vocab.bytes[id]) : vocab.bytes[id];
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : parts_.specials)
    if (t.content == token) return t.id;
  if (!parts_.byte_level_spelling) return model_.index().find(token);
  const std::optional<std::string> bytes = byte_level_decode(token);
  return bytes ? model_.index().find(*bytes) : std::nullopt;
}

std::vector<std::pair<std::string, int32_t>> BpeTokenizer::special_tokens() const {
  std::vector<std::pair<std::string, int32_t>> list;
  for (const AddedToken& t : parts_.specials) list.emplace_back(t.content, t.id);
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return list;
}

}  // namespace tessel
