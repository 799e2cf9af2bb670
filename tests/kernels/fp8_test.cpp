// FP8's grids (kernels/fp8.h) against the OCP 8-bit floating point specification, read here
// independently of tessel's code: every code's value from the spec's formula (sign, exponent
// with its bias, implicit one or subnormal, E4M3's one NaN per sign, E5M2's infinities and
// NaNs), and quantisation as the nearest grid value found by search over those values — ties to
// the even code, saturating past the largest finite — for every code's value, every midpoint
// between neighbours and the floats just either side, subnormal, saturating, infinite, NaN and
// random fp32 inputs. MXFP8's E8M0 scales likewise, from their definition 2^(code-127).
#include "tessel/kernels/fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <vector>

namespace tessel {
namespace {

struct SpecFormat {
  Fp8Format format;
  const char* name;
  int exponent_bits, mantissa_bits, bias;
};
void PrintTo(const SpecFormat& f, std::ostream* os) { *os << f.name; }

constexpr SpecFormat kE4M3{Fp8Format::E4M3, "E4M3", 4, 3, 7};
constexpr SpecFormat kE5M2{Fp8Format::E5M2, "E5M2", 5, 2, 15};

// The value the OCP specification gives `code`; NaN for its NaN encodings.
double spec_value(const SpecFormat& f, int code) {
  const int sign = code >> 7, exponent = (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = code & ((1 << f.mantissa_bits) - 1);
  const int top = (1 << f.exponent_bits) - 1;
  const double s = sign != 0 ? -1.0 : 1.0;
  if (f.format == Fp8Format::E4M3 && exponent == top && mantissa == 7) return NAN;  // S.1111.111
  if (f.format == Fp8Format::E5M2 && exponent == top) return mantissa == 0 ? s * INFINITY : NAN;
  if (exponent == 0) return s * std::ldexp(mantissa, 1 - f.bias - f.mantissa_bits);
  return s * std::ldexp(1.0 + std::ldexp(mantissa, -f.mantissa_bits), exponent - f.bias);
}

struct GridPoint {
  double value;
  int code;
};

// The finite non-negative grid, ascending (+0 once).
std::vector<GridPoint> spec_grid(const SpecFormat& f) {
  std::vector<GridPoint> grid;
  for (int code = 0; code < 0x80; ++code) {
    const double v = spec_value(f, code);
    if (std::isfinite(v)) grid.push_back({v, code});
  }
  std::sort(grid.begin(), grid.end(), [](auto a, auto b) { return a.value < b.value; });
  return grid;
}

// The code the specification's round-to-nearest-even with saturation gives x.
int spec_quantise(const std::vector<GridPoint>& grid, float x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return -1;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= grid.back().value) return sign | grid.back().code;
  const auto above = std::lower_bound(grid.begin(), grid.end(), a,
                                      [](const GridPoint& p, double v) { return p.value < v; });
  if (above->value == a) return sign | above->code;
  const auto below = above - 1;
  const double up = above->value - a, down = a - below->value;
  const GridPoint& nearest = up < down ? *above : down < up ? *below : (above->code % 2 == 0 ? *above : *below);
  return sign | nearest.code;
}

void expect_quantises_as_spec(const SpecFormat& f, const std::vector<GridPoint>& grid, float x) {
  const int want = spec_quantise(grid, x);
  const uint8_t got = fp8_bits(f.format, x);
  if (want < 0) {
    ASSERT_TRUE(std::isnan(fp8_value(f.format, got))) << f.name << " NaN in, code " << int{got};
  } else {
    ASSERT_EQ(int{got}, want) << f.name << " " << std::hexfloat << x;
  }
}

class Fp8Grid : public ::testing::TestWithParam<SpecFormat> {};

TEST_P(Fp8Grid, EveryCodeDecodesAsTheSpecification) {
  const SpecFormat f = GetParam();
  for (int code = 0; code < 256; ++code) {
    const double want = spec_value(f, code);
    const float got = fp8_value(f.format, static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << f.name << " code " << code;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << f.name << " code " << code;
      EXPECT_EQ(std::signbit(got), code >= 0x80) << f.name << " code " << code;
    }
  }
}

// Every finite code's value comes back as itself (−0 included); infinities saturate.
TEST_P(Fp8Grid, EveryFiniteCodeRoundTrips) {
  const SpecFormat f = GetParam();
  for (int code = 0; code < 256; ++code) {
    const double v = spec_value(f, code);
    if (!std::isfinite(v)) continue;
    EXPECT_EQ(int{fp8_bits(f.format, static_cast<float>(v))}, code) << f.name;
  }
}

// Each neighbour pair's midpoint (a tie), the floats either side of it and of each grid value.
TEST_P(Fp8Grid, MidpointsAndNeighboursRoundToNearestEven) {
  const SpecFormat f = GetParam();
  const std::vector<GridPoint> grid = spec_grid(f);
  for (size_t i = 0; i < grid.size(); ++i) {
    const auto v = static_cast<float>(grid[i].value);
    const float next = i + 1 < grid.size() ? static_cast<float>(grid[i + 1].value) : v * 2;
    const float mid = static_cast<float>((grid[i].value + next) / 2);  // exact: 4 bits against 24
    for (float x : {v, std::nextafter(v, 0.0f), std::nextafter(v, INFINITY), mid,
                    std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      expect_quantises_as_spec(f, grid, x);
      expect_quantises_as_spec(f, grid, -x);
    }
  }
}

TEST_P(Fp8Grid, SubnormalSaturatingInfiniteAndNanInputs) {
  const SpecFormat f = GetParam();
  const std::vector<GridPoint> grid = spec_grid(f);
  const float largest = static_cast<float>(grid.back().value);
  EXPECT_EQ(fp8_largest(f.format), largest);
  EXPECT_EQ(largest, f.format == Fp8Format::E4M3 ? 448.0f : 57344.0f);
  const float smallest = static_cast<float>(grid[1].value);  // the smallest subnormal
  EXPECT_EQ(smallest, f.format == Fp8Format::E4M3 ? 0x1p-9f : 0x1p-16f);
  const float inputs[] = {
      smallest / 2,          // a tie with zero: zero
      std::nextafter(smallest / 2, 1.0f), smallest * 1.5f, smallest * 2.5f,
      std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
      largest * 1.0625f,     // the tie past the largest: saturates, not NaN or inf
      std::nextafter(largest, INFINITY), largest * 4, 1e30f,
      std::numeric_limits<float>::max(), INFINITY, NAN, -NAN};
  for (float x : inputs) {
    expect_quantises_as_spec(f, grid, x);
    expect_quantises_as_spec(f, grid, -x);
  }
  EXPECT_EQ(round_to_fp8(f.format, INFINITY), largest);
  EXPECT_EQ(round_to_fp8(f.format, -INFINITY), -largest);
  EXPECT_TRUE(std::isnan(round_to_fp8(f.format, NAN)));
  if (f.format == Fp8Format::E4M3) {
    EXPECT_EQ(fp8_bits(f.format, NAN), 0x7f);
    EXPECT_EQ(fp8_bits(f.format, -NAN), 0xff);
  }
}

TEST_P(Fp8Grid, RandomFloatsRoundAsTheSpecification) {
  const SpecFormat f = GetParam();
  const std::vector<GridPoint> grid = spec_grid(f);
  std::mt19937 rng(8);
  for (int i = 0; i < 1'000'000; ++i) {
    // Half of them spread over every float, half over the grid's own range.
    const float x = i % 2 == 0 ? std::bit_cast<float>(static_cast<uint32_t>(rng()))
                               : std::ldexp(std::bit_cast<float>(static_cast<uint32_t>((rng() & 0x807fffffu) | 0x3f800000u)),
                                            static_cast<int>(rng() % 40) - 22);
    expect_quantises_as_spec(f, grid, x);
  }
}

INSTANTIATE_TEST_SUITE_P(Ocp, Fp8Grid, ::testing::Values(kE4M3, kE5M2),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Fp8E8m0, EveryCodeIsItsPowerOfTwo) {
  for (int code = 0; code < 255; ++code)
    EXPECT_EQ(static_cast<double>(e8m0_value(static_cast<uint8_t>(code))), std::ldexp(1.0, code - 127)) << code;
  EXPECT_TRUE(std::isnan(e8m0_value(0xff)));
}

// The scale for a block: the smallest power of two at or above amax / largest.
TEST(Fp8E8m0, ScaleCodeIsThePowerOfTwoAtOrAbove) {
  for (int code = 0; code < 255; ++code) {
    const float p = std::ldexp(1.0f, code - 127);
    EXPECT_EQ(int{e8m0_bits_at_least(p)}, code) << "exactly 2^" << code - 127;
    if (code < 254) {
      EXPECT_EQ(int{e8m0_bits_at_least(std::nextafter(p, INFINITY))}, code + 1) << code;
    }
    if (code > 1) {
      EXPECT_EQ(int{e8m0_bits_at_least(std::nextafter(p, 0.0f))}, code) << code;
    }
  }
  EXPECT_EQ(int{e8m0_bits_at_least(0.0f)}, 0);
  EXPECT_EQ(int{e8m0_bits_at_least(std::numeric_limits<float>::denorm_min())}, 0);
  EXPECT_EQ(int{e8m0_bits_at_least(INFINITY)}, 254);
  EXPECT_EQ(int{e8m0_bits_at_least(NAN)}, 255);
  // 300 / 448 lies in (1/2, 1]: scale 1, and 300 quantises within E4M3.
  EXPECT_EQ(e8m0_value(e8m0_bits_at_least(300.0f / 448.0f)), 1.0f);
  EXPECT_EQ(e8m0_value(e8m0_bits_at_least(449.0f / 448.0f)), 2.0f);
}

}  // namespace
}  // namespace tessel
