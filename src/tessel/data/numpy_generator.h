// numpy.random.default_rng(seed) and Generator.integers, as Megatron-Core's MockGPTLowLevelDataset
// draws its document lengths with them: numpy's SeedSequence turns the seed into PCG64's 128-bit
// state and increment, PCG64 (XSL-RR output) gives 64-bit words, and Generator.integers maps
// them onto [low, high) with Lemire's multiply-and-reject method — 32-bit draws (each 64-bit word
// split in two, low half first) when the range fits 32 bits, 64-bit draws otherwise. Same seed,
// same calls: the same numbers as numpy (>= 1.17, whose Generator this is).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tessel {

// numpy.random.SeedSequence(entropy) without spawn keys: the entropy (an integer, as 32-bit
// words, least significant first) hashed into a pool of four words.
class NumpySeedSequence {
 public:
  explicit NumpySeedSequence(uint64_t entropy);
  // generate_state(words, numpy.uint32) and generate_state(words, numpy.uint64).
  std::vector<uint32_t> generate_state32(int words) const;
  std::vector<uint64_t> generate_state64(int words) const;

 private:
  uint32_t pool_[4];
};

// numpy.random.PCG64(seed): pcg64's set-sequence 128-bit LCG seeded from SeedSequence(seed).
class NumpyPcg64 {
 public:
  explicit NumpyPcg64(uint64_t seed);
  uint64_t next_uint64();
  // The low half of a fresh 64-bit word, then its high half (numpy's pcg64_next32 buffer).
  uint32_t next_uint32();

 private:
  unsigned __int128 state_ = 0, increment_ = 0;
  bool has_uint32_ = false;
  uint32_t uint32_ = 0;
};

// numpy.random.default_rng(seed).
class NumpyGenerator {
 public:
  explicit NumpyGenerator(uint64_t seed) : bits_(seed) {}

  // integers(low, high, size=count, dtype=numpy.int32): [low, high), with
  // -2^31 <= low < high <= 2^31 (numpy's bounds: high is exclusive).
  std::vector<int32_t> integers_int32(int64_t low, int64_t high, int64_t count);
  // integers(low, high, size=count) with numpy's default dtype int64: [low, high), high > low.
  std::vector<int64_t> integers_int64(int64_t low, int64_t high, int64_t count);

  // numpy's bounded draws in [0, range] (random_bounded_uint32_fill's and
  // random_bounded_uint64_fill's element, use_masked=False).
  uint32_t bounded_uint32(uint32_t range);
  uint64_t bounded_uint64(uint64_t range);

 private:
  NumpyPcg64 bits_;
};

}  // namespace tessel
