#include "tessel/core/philox.h"

#include <cmath>

namespace tessel {

namespace {
constexpr uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;    // round multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;  // key schedule increments

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

PhiloxCounter block(uint64_t seed, uint64_t stream, uint64_t element) {
  PhiloxCounter ctr = {static_cast<uint32_t>(element), static_cast<uint32_t>(element >> 32),
                       static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return philox4x32(ctr, key);
}
}  // namespace

PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
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
