#include "tessel/data/numpy_random.h"

namespace tessel {

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    do value = next_uint32() & mask; while (value > max);
  } else {
    do value = next_uint64() & mask; while (value > max);
  }
  return value;
}

}  // namespace tessel
