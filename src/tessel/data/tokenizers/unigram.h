// A tokenizer.json's Unigram model (T5, ALBERT, XLM-R, mT5 and SentencePiece's unigram models
// converted by Hugging Face), encoded as Hugging Face's tokenizers library does it: each piece
// token has a score (a log probability); a pre-token is cut into the tokens of highest total
// score (Viterbi over the lattice of tokens found at each character), the earliest-starting last
// token winning ties. A character at which no one-character token starts may also be covered by
// the unknown token, scored (lowest score - 10); runs of unknown tokens fuse into one. A fused run
// that is not a token becomes its bytes' <0xNN> tokens under byte_fallback where all of them
// exist, else the unknown token. Without unk_id, text needing it is refused (the library's
// "unknown token but unk_id is missing").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/data/tokenizers/bpe.h"

namespace tessel {

struct UnigramPiece {
  std::string text;
  double score = 0.0;
};

class UnigramModel final : public TokenModel {
 public:
  // unk_id: -1 for none. `where` names the file for errors. Throws tessel::Error when unk_id lies
  // outside the pieces.
  UnigramModel(const std::vector<UnigramPiece>& pieces, int32_t unk_id, bool byte_fallback, std::string where);
  UnigramModel(const UnigramModel&) = delete;  // the index points into the vocabulary

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const override;
  const BpeVocab& vocab() const override { return vocab_; }
  const TokenIndex& index() const override { return index_; }
  const std::string& where() const override { return where_; }

 private:
  // The pieces as a trie over bytes: node 0 is the root; an edge (node, byte) -> child is found
  // in an open-addressing table.
  struct Edge {
    uint64_t key;  // node << 8 | byte; kNoEdge when free
    int32_t child;
  };
  static constexpr uint64_t kNoEdge = ~uint64_t{0};
  int32_t child(int32_t node, unsigned char byte) const;  // -1: none
  void add_edge(uint64_t key, int32_t child);

  BpeVocab vocab_;
  TokenIndex index_;
  std::vector<double> scores_;
  std::vector<int32_t> node_token_;  // the token a trie node spells, or -1
  std::vector<Edge> edges_;
  size_t edge_count_ = 0;
  uint64_t edge_mask_ = 0;
  int32_t unk_ = -1;
  double unk_score_ = 0.0;
  bool byte_fallback_ = false;
  int32_t byte_tokens_[256];  // "<0xNN>"'s id, or -1
  std::string where_;
};

}  // namespace tessel
