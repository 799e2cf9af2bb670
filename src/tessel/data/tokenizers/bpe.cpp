#include "tessel/data/tokenizers/bpe.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <queue>
#include <unordered_set>

#include "tessel/core/error.h"

namespace tessel {

namespace {

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t hash_pair(uint64_t key) {
  key *= 0x9E3779B97F4A7C15ull;
  return key ^ (key >> 32);
}

size_t table_size(size_t entries) { return std::bit_ceil(std::max<size_t>(16, entries * 2)); }

}  // namespace

void BpeVocab::set(int32_t id, std::string token) {
  if (id >= size()) {
    bytes.resize(id + 1);
    present.resize(id + 1, false);
  }
  bytes[id] = std::move(token);
  present[id] = true;
}

void TokenIndex::build(const BpeVocab& vocab, bool later_wins) {
  tokens_ = vocab.bytes.data();
  slots_.assign(table_size(vocab.bytes.size()), Slot{0, -1});
  mask_ = slots_.size() - 1;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (!vocab.present[id]) continue;
    const uint64_t h = hash_bytes(vocab.bytes[id]);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = Slot{static_cast<uint32_t>(h), id};
        break;
      }
      if (s.hash == static_cast<uint32_t>(h) && tokens_[s.id] == vocab.bytes[id]) {
        if (later_wins) s.id = id;
        break;
      }
    }
  }
}

std::optional<int32_t> TokenIndex::find(std::string_view bytes) const {
  if (slots_.empty()) return std::nullopt;
  const uint64_t h = hash_bytes(bytes);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.id < 0) return std::nullopt;
    if (s.hash == static_cast<uint32_t>(h) && tokens_[s.id] == bytes) return s.id;
  }
}

BpeModel::BpeModel(BpeVocab vocab, const std::vector<BpeMerge>& merges, bool ignore_merges,
                   std::string where, BpeSymbols symbols)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges), symbols_(symbols), where_(std::move(where)) {
  index_.build(vocab_);
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_tokens_[b] = symbols_.by_character ? index_.find(fmt::format("<0x{:02X}>", b)).value_or(-1)
                                            : index_.find(std::string_view(&c, 1)).value_or(-1);
  }
  for (int c = 0; c < 128; ++c) {
    const char ch = static_cast<char>(c);
    ascii_tokens_[c] = symbols_.by_character ? index_.find(std::string_view(&ch, 1)).value_or(-1) : -1;
  }
  // Byte fallback holds only where every byte has its token (Hugging Face falls back to unk).
  if (symbols_.byte_fallback) symbols_.byte_fallback = std::all_of(byte_tokens_, byte_tokens_ + 256, [](int32_t id) { return id >= 0; });
  build_pairs(merges);
  find_joins(merges);
  if (!ignore_merges_) {
    // A pre-token that is a token is emitted whole only where the merges would rebuild it anyway.
    whole_.assign(vocab_.size(), false);
    std::vector<int32_t> ids, symbols;
    for (int32_t id = 0; id < vocab_.size(); ++id) {
      if (!vocab_.present[id] || vocab_.bytes[id].empty()) continue;
      const std::string& b = vocab_.bytes[id];
      if (b.size() == 1 && !symbols_.by_character) {
        whole_[id] = true;
        continue;
      }
      if (!symbols_.by_character &&
          !std::all_of(b.begin(), b.end(), [&](char c) { return byte_tokens_[static_cast<unsigned char>(c)] >= 0; }))
        continue;
      symbols.clear();
      ids.clear();
      first_symbols(b, symbols);
      merge(symbols, ids);
      whole_[id] = ids.size() == 1 && ids[0] == id;
    }
  }
}

// Every split of a token into two tokens is a merge. Looking each split's halves up afresh hashes
// the whole token once per split: quadratic in its length (a token of 1 MB, hours). Polynomial
// hashes of every prefix and suffix come from one pass instead, and only a split whose halves
// both hash as some token does is looked up, exactly, in the index.
std::vector<BpeMerge> BpeModel::merges_from_ranks(const BpeVocab& vocab, const TokenIndex& index) {
  constexpr uint64_t kBase = 0x100000001b3;  // hashes mod 2^64: a collision costs a lookup, never a merge
  auto hash = [&](std::string_view b) {
    uint64_t h = 0;
    for (unsigned char c : b) h = h * kBase + c + 1;
    return h;
  };
  std::unordered_set<uint64_t> token_hashes;
  for (int32_t id = 0; id < vocab.size(); ++id)
    if (vocab.present[id]) token_hashes.insert(hash(vocab.bytes[id]));
  std::vector<BpeMerge> merges;
  std::vector<uint64_t> prefix, power;  // prefix[k]: hash of b[0, k); power[k]: kBase^k
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (!vocab.present[id]) continue;
    const std::string_view b = vocab.bytes[id];
    const size_t n = b.size();
    prefix.assign(n + 1, 0);
    power.assign(n + 1, 1);
    for (size_t k = 0; k < n; ++k) {
      prefix[k + 1] = prefix[k] * kBase + static_cast<unsigned char>(b[k]) + 1;
      power[k + 1] = power[k] * kBase;
    }
    for (size_t k = 1; k < n; ++k) {
      const uint64_t suffix = prefix[n] - prefix[k] * power[n - k];  // hash of b[k, n)
      if (!token_hashes.contains(prefix[k]) || !token_hashes.contains(suffix)) continue;
      const std::optional<int32_t> left = index.find(b.substr(0, k));
      if (!left) continue;
      const std::optional<int32_t> right = index.find(b.substr(k));
      if (right) merges.push_back({*left, *right, id, id});
    }
  }
  return merges;
}

BpeModel::PairTable::PairTable(size_t entries)
    : slots_(table_size(entries), Slot{kEmpty, 0, 0}), mask_(slots_.size() - 1) {}

void BpeModel::PairTable::insert(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = hash_pair(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == kEmpty || s.key == key) {
      s = Slot{key, rank, merged};
      return;
    }
  }
}

const BpeModel::PairTable::Slot* BpeModel::PairTable::find(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = hash_pair(key) & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.key == key) return &s;
    if (s.key == kEmpty) return nullptr;
  }
}

void BpeModel::build_pairs(const std::vector<BpeMerge>& merges) {
  pairs_ = PairTable(merges.size());
  for (const BpeMerge& m : merges) {
    for (int32_t id : {m.left, m.right, m.merged})
      TESSEL_CHECK(id >= 0 && id < vocab_.size() && vocab_.present[id],
                   "{}: a merge names token id {}, which is not in the vocabulary", where_, id);
    pairs_.insert(m.left, m.right, m.rank, m.merged);  // a repeated merge takes its later rank, as GPT-2's dict does
  }
}

void BpeModel::find_joins(const std::vector<BpeMerge>& merges) {
  // The first symbols, what first_symbols() makes of a piece: the bytes' or the characters'
  // tokens, the "<0xNN>" tokens of byte fallback, the unknown token.
  std::vector<bool> first(vocab_.size(), false);
  for (int32_t id : byte_tokens_)
    if (id >= 0) first[id] = true;
  if (symbols_.unk >= 0) first[symbols_.unk] = true;
  size_t longest = 0;  // the longest spelling of a first symbol
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const std::string& b = vocab_.bytes[id];
    if (symbols_.by_character && vocab_.present[id] && !b.empty() && utf8_char_length(b[0]) == b.size() &&
        index_.find(b) == id)
      first[id] = true;
    if (first[id]) longest = std::max(longest, b.size());
  }
  // The first symbols a token may start (or end) with: itself, or one its spelling starts with.
  auto edge_symbols = [&](int32_t token_id, bool start, std::vector<int32_t>& found) {
    found.clear();
    if (first[token_id]) found.push_back(token_id);
    const std::string_view token = vocab_.bytes[token_id];
    for (size_t k = 1; k <= std::min(longest, token.size()); ++k) {
      const std::string_view edge = start ? token.substr(0, k) : token.substr(token.size() - k);
      const std::optional<int32_t> id = index_.find(edge);
      if (id && first[*id]) found.push_back(*id);
      if (symbols_.unk >= 0 && id != symbols_.unk && edge == vocab_.bytes[symbols_.unk]) found.push_back(symbols_.unk);
    }
  };
  // A merge joins the symbol that ends its left token to the one that starts its right token.
  std::vector<uint64_t> keys;
  std::vector<int32_t> lefts, rights;
  for (const BpeMerge& m : merges) {
    edge_symbols(m.left, false, lefts);
    edge_symbols(m.right, true, rights);
    for (int32_t x : lefts)
      for (int32_t c : rights) keys.push_back(pair_key(x, c));
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  joins_ = PairTable(keys.size());
  for (uint64_t key : keys) joins_.insert(static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFF), 0, -1);
}

void BpeModel::merge(std::span<const int32_t> symbols, std::vector<int32_t>& out) const {
  if (symbols.size() <= kUncut) return merge_by_scan(symbols, out);
  size_t start = 0;
  for (size_t i = 1; i <= symbols.size(); ++i) {
    if (i < symbols.size() && joins_.find(symbols[i - 1], symbols[i])) continue;
    const std::span<const int32_t> part = symbols.subspan(start, i - start);
    if (part.size() > kHeapThreshold) merge_by_heap(part, out);
    else merge_by_scan(part, out);
    start = i;
  }
}

int32_t BpeModel::byte_token(unsigned char b) const {
  const int32_t id = byte_tokens_[b];
  TESSEL_CHECK(id >= 0, "{}: byte 0x{:02X} has no token in the vocabulary, so text holding it cannot be encoded",
               where_, b);
  return id;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1 && !symbols_.by_character) {
    out.push_back(byte_token(static_cast<unsigned char>(piece[0])));
    return;
  }
  if (const std::optional<int32_t> id = index_.find(piece); id && (ignore_merges_ || whole_[*id])) {
    out.push_back(*id);
    return;
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  first_symbols(piece, symbols);
  merge(symbols, out);
}

void BpeModel::first_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
  if (!symbols_.by_character) {
    for (char c : piece) ids.push_back(byte_token(static_cast<unsigned char>(c)));
    return;
  }
  bool unk_pending = false;  // the last symbol is an unknown token that a next one may fuse with
  for (size_t i = 0; i < piece.size();) {
    const auto lead = static_cast<unsigned char>(piece[i]);
    if (lead < 0x80 && ascii_tokens_[lead] >= 0) {
      ids.push_back(ascii_tokens_[lead]);
      unk_pending = false;
      ++i;
      continue;
    }
    const size_t n = std::min(utf8_char_length(lead), piece.size() - i);
    const std::string_view ch = piece.substr(i, n);
    i += n;
    if (const std::optional<int32_t> id = index_.find(ch)) {
      ids.push_back(*id);
      unk_pending = false;
    } else if (symbols_.byte_fallback) {
      for (char c : ch) ids.push_back(byte_tokens_[static_cast<unsigned char>(c)]);
      unk_pending = false;
    } else if (symbols_.unk >= 0) {
      if (!(unk_pending && symbols_.fuse_unk)) ids.push_back(symbols_.unk);
      unk_pending = true;
    }
  }
}

void BpeModel::merge_by_scan(std::span<const int32_t> symbols, std::vector<int32_t>& out) const {
  struct Part {
    int32_t id;
    int32_t rank;    // of merging with the next part; INT_MAX: no merge
    int32_t merged;
  };
  Part parts[kHeapThreshold];
  size_t n = symbols.size();
  if (n == 0) return;
  auto rank_with_next = [&](size_t i) {
    const PairTable::Slot* s = pairs_.find(parts[i].id, parts[i + 1].id);
    parts[i].rank = s ? s->rank : INT_MAX;
    parts[i].merged = s ? s->merged : -1;
  };
  for (size_t i = 0; i < n; ++i) parts[i] = {symbols[i], INT_MAX, -1};
  for (size_t i = 0; i + 1 < n; ++i) rank_with_next(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (parts[i].rank < parts[best].rank) best = i;
    if (parts[best].rank == INT_MAX) break;
    parts[best].id = parts[best].merged;
    std::memmove(&parts[best + 1], &parts[best + 2], (n - best - 2) * sizeof(Part));
    --n;
    parts[n - 1].rank = INT_MAX;
    if (best > 0) rank_with_next(best - 1);
    if (best + 1 < n) rank_with_next(best);
    else parts[best].rank = INT_MAX;
  }
  for (size_t i = 0; i < n; ++i) out.push_back(parts[i].id);
}

void BpeModel::merge_by_heap(std::span<const int32_t> symbols, std::vector<int32_t>& out) const {
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n == 0) return;
  std::vector<int32_t> id(n), prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    id[i] = symbols[i];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // Candidates by (rank, position of the left part); stale ones are skipped when popped.
  struct Candidate {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const PairTable::Slot* s = pairs_.find(id[i], id[next[i]])) heap.push({s->rank, i, id[i], id[next[i]], s->merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t j = next[c.pos];
    if (!alive[c.pos] || j < 0 || id[c.pos] != c.left || id[j] != c.right) continue;
    id[c.pos] = c.merged;
    alive[j] = false;
    next[c.pos] = next[j];
    if (next[j] >= 0) prev[next[j]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

}  // namespace tessel
