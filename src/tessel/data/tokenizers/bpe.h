// Byte-pair encoding of one pre-token, the core that GPT-2's vocab.json + merges.txt, a
// tokenizer.json's BPE model and tiktoken's rank files share. Tokens are byte strings; a merge
// joins two adjacent tokens into a third and has a rank. Encoding starts from one token per byte
// (byte-level BPE) or per character (SentencePiece-style BPE: Llama 2, Gemma, Mistral, where a
// character without a token becomes its bytes' <0xNN> tokens, or the unknown token) and
// repeatedly applies the lowest-ranked merge available, the leftmost on a tie — GPT-2's bpe(),
// Hugging Face's BPE and tiktoken's byte_pair_merge all reduce to this.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessel {

// The length of the UTF-8 character whose first byte is `lead` (1 for a stray continuation byte).
inline size_t utf8_char_length(unsigned char lead) { return lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1; }

struct BpeMerge {
  int32_t left, right;  // the two token ids joined, in order
  int32_t merged;       // the token they make
  int32_t rank;         // lower merges first
};

// Token ids -> byte strings; an id may be left without a token (a hole in the vocabulary).
struct BpeVocab {
  std::vector<std::string> bytes;  // indexed by id
  std::vector<bool> present;       // present[id]: bytes[id] is a token

  int32_t size() const { return static_cast<int32_t>(bytes.size()); }
  void set(int32_t id, std::string token);
};

// An open-addressing map from byte strings to ids (the vocabulary's inverse). It points into
// the vocabulary's token array, which a move of the BpeVocab keeps in place.
class TokenIndex {
 public:
  // A token spelled twice maps to its first id, or with later_wins to its last (a Unigram
  // model's, which Hugging Face fills a map in vocabulary order).
  void build(const BpeVocab& vocab, bool later_wins = false);
  std::optional<int32_t> find(std::string_view bytes) const;

 private:
  struct Slot {
    uint32_t hash;
    int32_t id;  // -1: empty
  };
  const std::string* tokens_ = nullptr;
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
};

// How a pre-token's first symbols are made (tokenizer.json's BPE model fields).
struct BpeSymbols {
  bool by_character = false;  // one symbol per UTF-8 character, else per byte (byte-level)
  bool byte_fallback = false; // a character without a token becomes its bytes' "<0xNN>" tokens ...
  int32_t unk = -1;           // ... else the unknown token (-1: none, the character is dropped)
  bool fuse_unk = false;      // consecutive unknown characters make one unknown token
};

// What the tokenizer pipeline (bpe_tokenizer.h) asks of its model: the ids of one pre-token
// and the vocabulary. BPE here, Unigram in unigram.h.
class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of one pre-token (valid UTF-8, or raw bytes for byte-level BPE) to `out`.
  // Thread-safe.
  virtual void encode_piece(std::string_view piece, std::vector<int32_t>& out) const = 0;
  virtual const BpeVocab& vocab() const = 0;
  virtual const TokenIndex& index() const = 0;
  virtual const std::string& where() const = 0;  // the file, for errors
};

class BpeModel final : public TokenModel {
 public:
  // `where` names the file for errors. Throws tessel::Error when a merge names an id without a
  // token. ignore_merges: a pre-token that is itself a token is emitted whole (tiktoken, and
  // tokenizer.json's "ignore_merges": Llama-3), without running the merges.
  BpeModel(BpeVocab vocab, const std::vector<BpeMerge>& merges, bool ignore_merges, std::string where,
           BpeSymbols symbols = {});
  BpeModel(BpeModel&&) = default;
  BpeModel(const BpeModel&) = delete;  // the index would point into the original

  // The merges tiktoken implies: joining two tokens is allowed where their concatenation is a
  // token, ranked by that token's rank (= its id).
  static std::vector<BpeMerge> merges_from_ranks(const BpeVocab& vocab, const TokenIndex& index);

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const override;
  const BpeVocab& vocab() const override { return vocab_; }
  const TokenIndex& index() const override { return index_; }
  const std::string& where() const override { return where_; }

  // Parts longer than this merge through a heap (O(n log n)) instead of a scan per merge.
  static constexpr size_t kHeapThreshold = 96;
  // Pieces up to this long merge without looking for cuts (a byte-level word, mostly).
  static constexpr size_t kUncut = 8;

  // The piece's first symbols, before any merge.
  void first_symbols(std::string_view piece, std::vector<int32_t>& ids) const;
  // Merges first symbols into the piece's ids. A piece longer than kUncut (a whole text or line
  // is one for Llama 2, Mistral and Gemma, which have no pre-tokenizer that splits) is cut
  // between each two neighbours that no merge can join (no merge's left part ends with the one
  // and its right part starts with the other), and each part merges alone: no merge crosses a
  // cut, so the ids are those of merging the whole, and each scan per merge runs over a part,
  // not the piece (a scan is quadratic in its length: a line of source code is one piece).
  void merge(std::span<const int32_t> symbols, std::vector<int32_t>& out) const;
  // The two merge loops over first symbols, exposed so that a test can check they agree.
  void merge_by_scan(std::span<const int32_t> symbols, std::vector<int32_t>& out) const;
  void merge_by_heap(std::span<const int32_t> symbols, std::vector<int32_t>& out) const;

 private:
  // An open-addressing map from a pair of token ids to a merge's rank and the token it makes.
  class PairTable {
   public:
    struct Slot {
      uint64_t key;  // left << 32 | right; kEmpty when free
      int32_t rank;
      int32_t merged;
    };
    explicit PairTable(size_t entries = 0);
    void insert(int32_t left, int32_t right, int32_t rank, int32_t merged);  // a repeated pair takes the later values
    const Slot* find(int32_t left, int32_t right) const;

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    std::vector<Slot> slots_;
    uint64_t mask_ = 0;
  };
  void build_pairs(const std::vector<BpeMerge>& merges);
  void find_joins(const std::vector<BpeMerge>& merges);
  int32_t byte_token(unsigned char b) const;

  BpeVocab vocab_;
  TokenIndex index_;
  PairTable pairs_;  // the merges
  PairTable joins_;  // the pairs of first symbols some merge joins (its rank and token unused)
  int32_t byte_tokens_[256];    // the byte's token (byte-level), or its "<0xNN>" token (byte fallback)
  int32_t ascii_tokens_[128];   // by character: the ASCII character's token, or -1 (a lookup saved per character)
  bool ignore_merges_;
  BpeSymbols symbols_;
  std::vector<bool> whole_;  // whole_[id]: merging the token's bytes gives the token itself
  std::string where_;
};

}  // namespace tessel
