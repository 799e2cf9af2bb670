// numpy.random.RandomState(seed) for an integer seed, as far as Megatron-Core's dataset code uses
// it: the MT19937 generator seeded by init_genrand(seed) (numpy's legacy seeding of an int, which
// is exactly std::mt19937(seed)), numpy's bounded integer draw random_interval, and the legacy
// RandomState.shuffle of a 1-D array built on it. Same seed, same calls: same numbers as numpy.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace tessel {

class NumpyRandomState {
 public:
  // numpy accepts integer seeds in [0, 2^32 - 1]; so does the type.
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  uint32_t next_uint32() { return static_cast<uint32_t>(mt_()); }
  // numpy's mt19937_next64: the first draw is the high half.
  uint64_t next_uint64() {
    const uint64_t high = next_uint32();
    return high << 32 | next_uint32();
  }

  // A uniform integer in [0, max]: draws masked to the smallest all-ones mask >= max until one
  // is <= max (rejection sampling, never modulo), from 32-bit draws when max fits 32 bits.
  uint64_t random_interval(uint64_t max);

  // RandomState.shuffle(x) for a 1-D array: Fisher–Yates from the back, i = n-1 .. 1, swapping
  // x[i] with x[random_interval(i)].
  template <typename T>
  void shuffle(std::span<T> x) {
    for (size_t i = x.size() > 0 ? x.size() - 1 : 0; i > 0; --i)
      std::swap(x[i], x[static_cast<size_t>(random_interval(i))]);
  }

 private:
  std::mt19937 mt_;
};

}  // namespace tessel
