// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. The n-th random number of a stream is a pure function of
// (key, counter), so any rank can draw exactly the slice of a tensor it owns (DESIGN invariant 1).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace tessel {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

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
