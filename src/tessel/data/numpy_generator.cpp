#include "tessel/data/numpy_generator.h"

#include "tessel/core/error.h"

namespace tessel {

namespace {

// SeedSequence's hashing constants (numpy/random/bit_generator.pyx), all uint32 arithmetic.
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16;  // half a 32-bit word

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> kXShift);
}

uint32_t mix(uint32_t x, uint32_t y) {
  const uint32_t result = kMixMultL * x - kMixMultR * y;
  return result ^ (result >> kXShift);
}

// PCG's default 128-bit multiplier.
constexpr unsigned __int128 kPcgMultiplier =
    (static_cast<unsigned __int128>(0x2360ed051fc65da4ULL) << 64) | 0x4385df649fccf645ULL;

unsigned __int128 join(uint64_t high, uint64_t low) {
  return (static_cast<unsigned __int128>(high) << 64) | low;
}

}  // namespace

NumpySeedSequence::NumpySeedSequence(uint64_t entropy) {
  // An integer's 32-bit words, least significant first; 0 is one word 0.
  std::vector<uint32_t> words{static_cast<uint32_t>(entropy)};
  if (entropy >> 32) words.push_back(static_cast<uint32_t>(entropy >> 32));
  uint32_t hash_const = kInitA;
  for (size_t i = 0; i < 4; ++i) pool_[i] = hashmix(i < words.size() ? words[i] : 0, hash_const);
  // Every pool word mixed into every other, so that late words reach early ones.
  for (int src = 0; src < 4; ++src)
    for (int dst = 0; dst < 4; ++dst)
      if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src], hash_const));
  // (Entropy longer than the pool, mixed in word by word, needs more than 64 bits of seed.)
}

std::vector<uint32_t> NumpySeedSequence::generate_state32(int words) const {
  std::vector<uint32_t> state(static_cast<size_t>(words));
  uint32_t hash_const = kInitB;
  for (size_t i = 0; i < state.size(); ++i) {
    uint32_t value = pool_[i % 4] ^ hash_const;
    hash_const *= kMultB;
    value *= hash_const;
    state[i] = value ^ (value >> kXShift);
  }
  return state;
}

std::vector<uint64_t> NumpySeedSequence::generate_state64(int words) const {
  // The uint32 state viewed as uint64 on a little-endian machine: pairs, low word first.
  const std::vector<uint32_t> halves = generate_state32(2 * words);
  std::vector<uint64_t> state(static_cast<size_t>(words));
  for (size_t i = 0; i < state.size(); ++i)
    state[i] = static_cast<uint64_t>(halves[2 * i + 1]) << 32 | halves[2 * i];
  return state;
}

NumpyPcg64::NumpyPcg64(uint64_t seed) {
  // PCG64.__init__: generate_state(4, uint64) gives the seed (words 0, 1) and the stream
  // (words 2, 3), each high word first; pcg's srandom: state 0, step, add the seed, step.
  const std::vector<uint64_t> s = NumpySeedSequence(seed).generate_state64(4);
  increment_ = (join(s[2], s[3]) << 1) | 1;
  state_ = 0;
  state_ = state_ * kPcgMultiplier + increment_;
  state_ += join(s[0], s[1]);
  state_ = state_ * kPcgMultiplier + increment_;
}

uint64_t NumpyPcg64::next_uint64() {
  // Step, then XSL-RR: the two halves xored, rotated right by the state's top six bits.
  state_ = state_ * kPcgMultiplier + increment_;
  const uint64_t folded = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rotation = static_cast<unsigned>(state_ >> 122);
  return (folded >> rotation) | (folded << ((64 - rotation) & 63));
}

uint32_t NumpyPcg64::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uint32_;
  }
  const uint64_t next = next_uint64();
  has_uint32_ = true;
  uint32_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

uint32_t NumpyGenerator::bounded_uint32(uint32_t range) {
  if (range == 0) return 0;
  if (range == UINT32_MAX) return bits_.next_uint32();  // Lemire's needs range + 1 to fit
  // Lemire: the high word of draw × (range + 1); a low word under 2^32 mod (range + 1) would
  // favour some results, so it is drawn again.
  const uint32_t excl = range + 1;
  uint64_t m = static_cast<uint64_t>(bits_.next_uint32()) * excl;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < excl) {
    const uint32_t threshold = (UINT32_MAX - range) % excl;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(bits_.next_uint32()) * excl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

uint64_t NumpyGenerator::bounded_uint64(uint64_t range) {
  // A range that fits 32 bits takes the 32-bit draws, as numpy does.
  if (range <= UINT32_MAX) return bounded_uint32(static_cast<uint32_t>(range));
  if (range == UINT64_MAX) return bits_.next_uint64();
  const uint64_t excl = range + 1;
  unsigned __int128 m = static_cast<unsigned __int128>(bits_.next_uint64()) * excl;
  uint64_t leftover = static_cast<uint64_t>(m);
  if (leftover < excl) {
    const uint64_t threshold = (UINT64_MAX - range) % excl;
    while (leftover < threshold) {
      m = static_cast<unsigned __int128>(bits_.next_uint64()) * excl;
      leftover = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<int32_t> NumpyGenerator::integers_int32(int64_t low, int64_t high, int64_t count) {
  TESSEL_CHECK(INT32_MIN <= low && low < high && high <= int64_t{INT32_MAX} + 1 && count >= 0,
               "integers({}, {}, size={}, dtype=int32): need -2^31 <= low < high <= 2^31 and size >= 0",
               low, high, count);
  // numpy's _rand_int32: the closed range [low, high - 1] as an offset and a uint32 width.
  const uint32_t range = static_cast<uint32_t>(high - 1 - low);
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (int32_t& v : out) v = static_cast<int32_t>(static_cast<uint32_t>(low) + bounded_uint32(range));
  return out;
}

std::vector<int64_t> NumpyGenerator::integers_int64(int64_t low, int64_t high, int64_t count) {
  TESSEL_CHECK(high > low && count >= 0, "integers({}, {}, size={}): need high > low and size >= 0",
               low, high, count);
  const uint64_t range = static_cast<uint64_t>(high) - 1 - static_cast<uint64_t>(low);
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t& v : out) v = static_cast<int64_t>(static_cast<uint64_t>(low) + bounded_uint64(range));
  return out;
}

}  // namespace tessel
