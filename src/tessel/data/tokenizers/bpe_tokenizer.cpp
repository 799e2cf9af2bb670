#include "tessel/data/tokenizers/bpe_tokenizer.h"

#include <algorithm>
#include <cstdlib>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/byte_level.h"
#include "tessel/data/utf8.h"

namespace tessel {

BpeTokenizer::BpeTokenizer(std::unique_ptr<const TokenModel> model, BpeTokenizerParts parts)
    : model_(std::move(model)), parts_(std::move(parts)) {
  if (parts_.split_specials) {
    std::vector<AddedToken> raw, normalized;
    for (const AddedToken& t : parts_.specials) {
      if (!t.normalized || parts_.normalizer.empty()) {
        raw.push_back(t);
      } else {  // matched as the normalizer writes it
        normalized.push_back(t);
        normalized.back().content = parts_.normalizer.apply(t.content);
      }
    }
    splitter_ = AddedTokenSplitter(raw);
    normalized_splitter_ = AddedTokenSplitter(normalized);
  }
  int32_t size = model_->vocab().size();
  for (const AddedToken& t : parts_.specials) size = std::max(size, t.id + 1);
  vocab_size_ = parts_.vocab_size > 0 ? parts_.vocab_size : size;
  special_of_.assign(size, -1);
  for (size_t i = 0; i < parts_.specials.size(); ++i) special_of_[parts_.specials[i].id] = static_cast<int32_t>(i);
  for (const std::vector<int32_t>* ids : {&parts_.prefix, &parts_.suffix})
    for (int32_t id : *ids)
      TESSEL_CHECK(special(id) || (id >= 0 && id < model_->vocab().size() && model_->vocab().present[id]),
                   "{}: the post-processor's template adds token {}, which is not in the vocabulary", model_->where(), id);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  check_utf8(text, "text to encode");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + parts_.prefix.size() + parts_.suffix.size());
  out.insert(out.end(), parts_.prefix.begin(), parts_.prefix.end());
  encode_text(text, out);
  out.insert(out.end(), parts_.suffix.begin(), parts_.suffix.end());
  return out;
}

std::vector<int32_t> BpeTokenizer::encode_bare(std::string_view text) const {
  check_utf8(text, "text to encode");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  encode_text(text, out);
  return out;
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  auto token = [&](int32_t id) { out.push_back(id); };
  auto segment = [&](std::string_view raw) {
    const bool starts_input = raw.data() == text.data();
    if (parts_.normalizer.empty()) return encode_segment(raw, starts_input, out);
    const std::string normalized = parts_.normalizer.apply(raw);
    if (normalized_splitter_.empty()) return encode_segment(normalized, starts_input, out);
    normalized_splitter_.split(normalized, [&](std::string_view s) {
      encode_segment(s, starts_input && s.data() == normalized.data(), out);
    }, token);
  };
  if (parts_.split_specials) splitter_.split(text, segment, token);
  else segment(text);
}

void BpeTokenizer::encode_segment(std::string_view text, bool starts_input, std::vector<int32_t>& out) const {
  std::string changed;
  if (parts_.metaspace) {
    changed = apply_metaspace(*parts_.metaspace, text, starts_input);
    text = changed;
  }
  if (parts_.add_prefix_space && !text.empty() && text[0] != ' ') {
    std::string spaced(1, ' ');  // text may lie in `changed`: build apart, then move in
    spaced += text;
    changed = std::move(spaced);
    text = changed;
  }
  parts_.pre.for_each_piece(text, [&](std::string_view piece) { model_->encode_piece(piece, out); });
}

const AddedToken* BpeTokenizer::special(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(special_of_.size()) || special_of_[id] < 0) return nullptr;
  return &parts_.specials[special_of_[id]];
}

std::string BpeTokenizer::decode(std::span<const int32_t> tokens) const {
  const BpeVocab& vocab = model_->vocab();
  auto token_text = [&](size_t i) -> const std::string& {
    const int32_t id = tokens[i];
    if (const AddedToken* t = special(id)) return t->content;
    TESSEL_CHECK(id >= 0 && id < vocab.size() && vocab.present[id],
                 "{}: token {} at position {} is not in the vocabulary (size {})", parts_.type, id, i, vocab_size_);
    return vocab.bytes[id];
  };
  if (!parts_.decoder) {
    std::string text;
    for (size_t i = 0; i < tokens.size(); ++i) text += token_text(i);
    return text;
  }
  std::vector<std::string> texts;
  texts.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) texts.push_back(token_text(i));
  return parts_.decoder->decode(std::move(texts));
}

std::string BpeTokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* t = special(id)) return t->content;
  const BpeVocab& vocab = model_->vocab();
  TESSEL_CHECK(id >= 0 && id < vocab.size() && vocab.present[id], "{}: token {} is not in the vocabulary (size {})",
               parts_.type, id, vocab_size_);
  return parts_.byte_level_spelling ? byte_level_encode(vocab.bytes[id]) : vocab.bytes[id];
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : parts_.specials)
    if (t.content == token) return t.id;
  if (!parts_.byte_level_spelling) return model_->index().find(token);
  const std::optional<std::string> bytes = byte_level_decode(token);
  return bytes ? model_->index().find(*bytes) : std::nullopt;
}

std::vector<std::pair<std::string, int32_t>> BpeTokenizer::special_tokens() const {
  std::vector<std::pair<std::string, int32_t>> list;
  for (const AddedToken& t : parts_.specials) list.emplace_back(t.content, t.id);
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return list;
}

}  // namespace tessel
