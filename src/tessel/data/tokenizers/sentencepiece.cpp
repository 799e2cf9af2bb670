// SentencePiece models (.model, e.g. Llama-2's, with byte fallback) through Debian's
// libsentencepiece, as Megatron-LM's three SentencePiece tokenizer types use them:
//   GPTSentencePieceTokenizer  plain encode; eod = eos
//   Llama2Tokenizer            bos before every encoding (Megatron's tokenize(bos=True)); eod = eos
//   SentencePieceTokenizer     adds <CLS> <SEP> <EOD> <MASK> (and pad/bos/eos pieces the model
//                              lacks) past the model's pieces; their text is cut out of the input
//                              first, the earliest first; they decode with a space on each side;
//                              eod = <EOD>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tessel/data/utf8.h"

namespace tessel {

namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& type, const std::string& path) : type_(type), path_(path) {
    const sentencepiece::util::Status status = sp_.Load(path);
    TESSEL_CHECK(status.ok(), "{}: not a SentencePiece model, or a damaged one (libsentencepiece: {})", path,
                 status.ToString());
    pieces_ = sp_.GetPieceSize();
    ids_ = {.eod = sp_.eos_id(), .bos = sp_.bos_id(), .eos = sp_.eos_id(), .pad = sp_.pad_id()};
    if (type == "SentencePieceTokenizer") add_megatron_specials();
    bos_first_ = type == "Llama2Tokenizer";
  }

  std::string type() const override { return type_; }
  int32_t vocab_size() const override { return pieces_ + static_cast<int32_t>(extra_.size()); }
  SpecialIds special_ids() const override { return ids_; }

  std::vector<int32_t> encode(std::string_view text) const override {
    check_utf8(text, "text to encode");
    std::vector<int32_t> out;
    if (bos_first_ && ids_.bos >= 0) out.push_back(ids_.bos);
    size_t pos = 0;
    while (!specials_.empty()) {  // the earliest special text; on a tie the first added
      size_t best = std::string_view::npos;
      const Special* hit = nullptr;
      for (const Special& s : specials_) {
        const size_t at = text.find(s.text, pos);
        if (at < best) {
          best = at;
          hit = &s;
        }
      }
      if (!hit) break;
      append(text.substr(pos, best - pos), out);
      out.push_back(hit->id);
      pos = best + hit->text.size();
    }
    append(text.substr(pos), out);
    return out;
  }

  std::string decode(std::span<const int32_t> tokens) const override {
    std::string text;
    std::vector<int> run;
    auto flush = [&] {
      std::string piece;
      const sentencepiece::util::Status status = sp_.Decode(run, &piece);
      TESSEL_CHECK(status.ok(), "{}: cannot decode: {}", path_, status.ToString());
      text += piece;
      run.clear();
    };
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int32_t id = tokens[i];
      TESSEL_CHECK(id >= 0 && id < vocab_size(), "{}: token {} at position {} is outside the vocabulary [0, {})",
                   type_, id, i, vocab_size());
      if (const Special* s = special(id)) {
        flush();
        text += " " + s->text + " ";
      } else {
        run.push_back(id);
      }
    }
    flush();
    return text;
  }

  std::string id_to_token(int32_t id) const override {
    TESSEL_CHECK(id >= 0 && id < vocab_size(), "{}: token {} is outside the vocabulary [0, {})", type_, id, vocab_size());
    return id < pieces_ ? sp_.IdToPiece(id) : extra_[id - pieces_];
  }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    for (size_t i = 0; i < extra_.size(); ++i)
      if (extra_[i] == token) return pieces_ + static_cast<int32_t>(i);
    const int id = sp_.PieceToId(std::string(token));
    // PieceToId answers unk for an unknown piece: only unk's own spelling maps there.
    if (id == sp_.unk_id() && sp_.IdToPiece(id) != token) return std::nullopt;
    return id;
  }

  std::vector<std::pair<std::string, int32_t>> special_tokens() const override {
    std::vector<std::pair<std::string, int32_t>> list;
    for (int32_t id = 0; id < pieces_; ++id)
      if (sp_.IsControl(id) || sp_.IsUnknown(id)) list.emplace_back(sp_.IdToPiece(id), id);
    for (const Special& s : specials_)
      if (s.id >= pieces_) list.emplace_back(s.text, s.id);
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    return list;
  }

 private:
  struct Special {
    std::string text;
    int32_t id;
  };

  // Megatron's _SentencePieceTokenizer._initalize: each special token is the model's piece of
  // that spelling, or a new id past the vocabulary.
  void add_megatron_specials() {
    auto add = [&](const std::string& text) {
      int32_t id = -1;
      if (const std::optional<int32_t> known = token_to_id(text)) id = *known;
      else {
        id = pieces_ + static_cast<int32_t>(extra_.size());
        extra_.push_back(text);
      }
      specials_.push_back({text, id});
      return id;
    };
    add("<CLS>");
    add("<SEP>");
    ids_.eod = add("<EOD>");
    add("<MASK>");
    auto piece_or = [&](int id, const char* fallback) { return id >= 0 && id < pieces_ ? sp_.IdToPiece(id) : std::string(fallback); };
    ids_.pad = add(piece_or(sp_.pad_id(), "<PAD>"));
    ids_.bos = add(piece_or(sp_.bos_id(), "<BOS>"));
    ids_.eos = add(piece_or(sp_.eos_id(), "<EOS>"));
  }

  const Special* special(int32_t id) const {
    for (const Special& s : specials_)
      if (s.id == id) return &s;
    return nullptr;
  }

  void append(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    std::vector<int> ids;
    const sentencepiece::util::Status status = sp_.Encode(text, &ids);
    TESSEL_CHECK(status.ok(), "{}: cannot encode: {}", path_, status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  std::string type_, path_;
  sentencepiece::SentencePieceProcessor sp_;
  int32_t pieces_ = 0;
  SpecialIds ids_;
  bool bos_first_ = false;
  std::vector<std::string> extra_;  // ids pieces_.. : specials the model lacks
  std::vector<Special> specials_;   // SentencePieceTokenizer's, in Megatron's order
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const TokenizerOptions& options) {
  // libsentencepiece's own message for a missing file does not name it.
  if (!std::ifstream(options.tokenizer_model)) fail("{}: cannot read: {}", options.tokenizer_model, std::strerror(errno));
  return std::make_unique<SentencePieceTokenizer>(options.type, options.tokenizer_model);
}

}  // namespace tessel
