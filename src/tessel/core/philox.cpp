#include "tessel/core/philox.h"

#include <cmath>

namespace tessel {

namespace {
PhiloxCounter block(uint64_t seed, uint64_t stream, uint64_t element) {
  PhiloxCounter ctr = {static_cast<uint32_t>(element), static_cast<uint32_t>(element >> 32),
                       static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return philox4x32(ctr, key);
}
}  // namespace

PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k) {
  philox4x32_rounds(c[0], c[1], c[2], c[3], k[0], k[1]);
  return c;
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ULL;
  }
  return h;
}

float uniform_from_bits(uint32_t bits) {
  // 24 bits of mantissa, shifted by one ulp so the result lies in (0, 1].
  return (static_cast<float>(bits >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

float random_normal(uint64_t seed, uint64_t stream, uint64_t element) {
  PhiloxCounter r = block(seed, stream, element);
  double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967296.0;  // (0, 1]
  double u2 = static_cast<double>(r[1]) / 4294967296.0;          // [0, 1)
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

float random_uniform(uint64_t seed, uint64_t stream, uint64_t element) {
  return uniform_from_bits(block(seed, stream, element)[0]);
}

uint32_t random_bits(uint64_t seed, uint64_t stream, uint64_t element) {
  return block(seed, stream, element)[0];
}

}  // namespace tessel
