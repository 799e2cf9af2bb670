// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. The n-th random number of a stream is a pure function of
// (key, counter), so any rank can draw exactly the slice of a tensor it owns (DESIGN invariant 1).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "tessel/core/host_device.h"

namespace tessel {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten rounds of Philox-4x32 on the counter block (c0, c1, c2, c3) under the key (k0, k1), in
// place: the one implementation, for the parameters' initialisation and the CUDA and CPU dropout
// masks alike (kernels/dropout.h).
TESSEL_HOST_DEVICE inline void philox4x32_rounds(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3,
                                                 uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;  // the round multipliers
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;  // the key schedule's Weyl increments
    k1 += 0xBB67AE85u;
  }
}

// Ten rounds of Philox-4x32 on one counter block.
PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key);

// 64-bit FNV-1a of a string: turns a parameter's global name into a stream id.
uint64_t fnv1a64(std::string_view s);

// A uniform in (0, 1] from 32 random bits (never 0, so log() is safe).
float uniform_from_bits(uint32_t bits);

// The element-th draw of stream `stream` under `seed`: one Philox block per element.
// random_normal: standard normal by Box-Muller; random_uniform: (0, 1]; random_bits: raw 32 bits.
float random_normal(uint64_t seed, uint64_t stream, uint64_t element);
float random_uniform(uint64_t seed, uint64_t stream, uint64_t element);
uint32_t random_bits(uint64_t seed, uint64_t stream, uint64_t element);

}  // namespace tessel
