// fp16's rounding (kernels/fp16.h) against values derived without it: IEEE binary16 bit patterns
// worked out by hand (finite, ties, subnormals, overflow, NaN), and the compiler's own float to
// _Float16 conversion (GCC's, round to nearest even) over every fp16 value, every midpoint
// between neighbours and a sweep of random floats.
#include "tessel/kernels/fp16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace tessel {
namespace {

uint16_t compiler_bits(float x) { return std::bit_cast<uint16_t>(static_cast<_Float16>(x)); }

TEST(Fp16, KnownBitPatterns) {
  const struct {
    float value;
    uint16_t bits;
  } cases[] = {
      {1.0f, 0x3c00},           {-2.0f, 0xc000},
      {0.1f, 0x2e66},           {3.14159265f, 0x4248},
      {1.0f / 3.0f, 0x3555},    {65504.0f, 0x7bff},     // the largest finite
      {65519.996f, 0x7bff},     {65520.0f, 0x7c00},     // the tie past it goes to inf
      {-65520.0f, 0xfc00},      {1e6f, 0x7c00},
      {std::numeric_limits<float>::max(), 0x7c00}, {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},      {0.0f, 0x0000},
      {-0.0f, 0x8000},          {1.0f + 0x1p-11f, 0x3c00},  // a tie: the even neighbour, 1
      {1.0f + 0x3p-11f, 0x3c02},  {2049.0f, 0x6800},    // ties at 2048's spacing 2
      {2051.0f, 0x6802},        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},  // just above the tie
      {0x1p-14f, 0x0400},       // the smallest normal
      {0x1p-24f, 0x0001},       // the smallest subnormal
      {0x3ffp-24f, 0x03ff},     // the largest subnormal
      {0x7ffp-25f, 0x0400},     // its tie with the smallest normal: the even one, the normal
      {0x3p-25f, 0x0002},       // 1.5 subnormal steps: a tie, to 2
      {0x5p-26f, 0x0001},       // 1.25 steps: down
      {0x1p-25f, 0x0000},       // half a step: a tie, to 0
      {-0x1p-25f, 0x8000},
      {0x1.000002p-25f, 0x0001},  // just above half a step
      {std::numeric_limits<float>::denorm_min(), 0x0000},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(fp16_bits(c.value), c.bits) << std::hexfloat << c.value;
    if ((c.bits & 0x7c00) != 0x7c00) {
      EXPECT_EQ(fp16_bits(fp16_value(c.bits)), c.bits);
    }
  }
  EXPECT_EQ(fp16_value(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_value(0x8001), -0x1p-24f);
  EXPECT_EQ(fp16_value(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_value(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(round_to_fp16(NAN)));
  EXPECT_EQ(fp16_bits(NAN) & 0x7e00, 0x7e00) << "a quiet NaN";
}

// Every encoding decodes as the compiler's does, and each finite value, its midpoints with its
// neighbours and the points just either side of them round as the compiler rounds them.
TEST(Fp16, EveryValueAndMidpointAgreesWithTheCompiler) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float want = static_cast<float>(std::bit_cast<_Float16>(bits));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(fp16_value(bits))) << h;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(fp16_value(bits)), std::bit_cast<uint32_t>(want)) << h;
    if (std::isinf(want)) continue;
    const float next = std::nextafter(want, want < 0 || bits == 0x8000 ? -INFINITY : INFINITY);
    const uint16_t away = bits == 0x7bff || bits == 0xfbff ? bits : static_cast<uint16_t>(bits + 1);
    const float neighbour = static_cast<float>(std::bit_cast<_Float16>(away));
    const float mid = neighbour == want ? want + (want - static_cast<float>(std::bit_cast<_Float16>(
                                                                 static_cast<uint16_t>(bits - 1)))) / 2
                                        : (want + neighbour) / 2;  // exact: fp16 has 11 bits, float 24
    for (float x : {want, next, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, mid * 2)})
      ASSERT_EQ(fp16_bits(x), compiler_bits(x)) << std::hexfloat << x << " near encoding " << h;
  }
}

TEST(Fp16, RandomFloatsAgreeWithTheCompiler) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    ASSERT_EQ(fp16_bits(x), compiler_bits(x)) << std::hexfloat << x;
  }
}

}  // namespace
}  // namespace tessel
