#include "tessel/data/tokenizers/unigram.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "tessel/core/error.h"

namespace tessel {

namespace {

// Hugging Face's penalty on the unknown token, below the lowest piece score.
constexpr double kUnknownPenalty = 10.0;

uint64_t edge_slot(uint64_t key) {
  key *= 0x9E3779B97F4A7C15ull;
  return key ^ (key >> 29);
}

}  // namespace

UnigramModel::UnigramModel(const std::vector<UnigramPiece>& pieces, int32_t unk_id, bool byte_fallback, std::string where)
    : unk_(unk_id), byte_fallback_(byte_fallback), where_(std::move(where)) {
  TESSEL_CHECK(unk_id >= -1 && unk_id < static_cast<int64_t>(pieces.size()),
               "{}: model.unk_id {} is not the id of a piece (the vocabulary has {})", where_, unk_id, pieces.size());
  double min_score = std::numeric_limits<double>::infinity();
  scores_.reserve(pieces.size());
  for (size_t id = 0; id < pieces.size(); ++id) {
    vocab_.set(static_cast<int32_t>(id), pieces[id].text);
    scores_.push_back(pieces[id].score);
    min_score = std::min(min_score, pieces[id].score);
  }
  unk_score_ = min_score - kUnknownPenalty;
  index_.build(vocab_, /*later_wins=*/true);
  edges_.assign(1024, Edge{kNoEdge, -1});
  edge_mask_ = edges_.size() - 1;
  node_token_.push_back(-1);  // the root
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    int32_t node = 0;
    for (unsigned char b : vocab_.bytes[id]) {
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(node_token_.size());
        node_token_.push_back(-1);
        add_edge(static_cast<uint64_t>(node) << 8 | b, next);
      }
      node = next;
    }
    if (node != 0) node_token_[node] = id;  // a piece spelled twice is its last id, as the library's map
  }
  for (int b = 0; b < 256; ++b) byte_tokens_[b] = index_.find(fmt::format("<0x{:02X}>", b)).value_or(-1);
}

int32_t UnigramModel::child(int32_t node, unsigned char byte) const {
  const uint64_t key = static_cast<uint64_t>(node) << 8 | byte;
  for (uint64_t i = edge_slot(key) & edge_mask_;; i = (i + 1) & edge_mask_) {
    if (edges_[i].key == key) return edges_[i].child;
    if (edges_[i].key == kNoEdge) return -1;
  }
}

void UnigramModel::add_edge(uint64_t key, int32_t to) {
  if (2 * (edge_count_ + 1) > edges_.size()) {  // keep the table at most half full
    std::vector<Edge> old(edges_.size() * 2, Edge{kNoEdge, -1});
    old.swap(edges_);
    edge_mask_ = edges_.size() - 1;
    edge_count_ = 0;
    for (const Edge& e : old)
      if (e.key != kNoEdge) add_edge(e.key, e.child);
  }
  uint64_t i = edge_slot(key) & edge_mask_;
  while (edges_[i].key != kNoEdge) i = (i + 1) & edge_mask_;
  edges_[i] = Edge{key, to};
  ++edge_count_;
}

void UnigramModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  // best[e]: the best segmentation of piece[0, e) — its score, where its last token starts
  // (-1: none found yet) and that token.
  struct Best {
    double score;
    int32_t start;
    int32_t token;
  };
  thread_local std::vector<Best> best;
  const size_t n = piece.size();
  best.assign(n + 1, Best{0.0, -1, -1});
  for (size_t start = 0; start < n;) {
    const double before = best[start].score;
    const size_t length = std::min(utf8_char_length(static_cast<unsigned char>(piece[start])), n - start);
    bool one_character_token = false;
    auto offer = [&](size_t end, int32_t token, double score) {
      Best& b = best[end];
      if (b.start < 0 || score + before > b.score) b = Best{score + before, static_cast<int32_t>(start), token};
    };
    int32_t node = 0;
    for (size_t end = start; end < n;) {
      node = child(node, static_cast<unsigned char>(piece[end++]));
      if (node < 0) break;
      if (const int32_t token = node_token_[node]; token >= 0) {
        offer(end, token, scores_[token]);
        one_character_token |= end - start == length;
      }
    }
    if (!one_character_token) {
      const Best& b = best[start + length];
      if (b.start < 0 || unk_score_ + before > b.score) {
        TESSEL_CHECK(unk_ >= 0, "{}: the Unigram model has no token for {:?} and no unk_id", where_,
                     std::string(piece.substr(start, length)));
        offer(start + length, unk_, unk_score_);
      }
    }
    start += length;
  }
  // Back from the end: the tokens in reverse, runs of the unknown token joined into one span.
  thread_local std::vector<std::pair<size_t, size_t>> spans;  // [begin, end) of each token
  spans.clear();
  bool in_unknown = false;
  for (size_t end = n; end > 0;) {
    const Best& b = best[end];
    const bool unknown = b.token == unk_;
    if (unknown && in_unknown) spans.back().first = b.start;
    else spans.emplace_back(b.start, end);
    in_unknown = unknown;
    end = b.start;
  }
  for (auto span = spans.rbegin(); span != spans.rend(); ++span) {
    const std::string_view text = piece.substr(span->first, span->second - span->first);
    if (const std::optional<int32_t> id = index_.find(text)) {
      out.push_back(*id);
      continue;
    }
    // Only a span of unknown characters is not a token.
    if (byte_fallback_ && std::all_of(text.begin(), text.end(), [&](char c) { return byte_tokens_[static_cast<unsigned char>(c)] >= 0; })) {
      for (char c : text) out.push_back(byte_tokens_[static_cast<unsigned char>(c)]);
    } else {
      out.push_back(unk_);
    }
  }
}

}  // namespace tessel
