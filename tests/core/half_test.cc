#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "core/util/half.h"

namespace sinew {
namespace {

// Every half value survives half -> float -> half unchanged (the float side is exact).
TEST(Half, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

// Conversion is correctly rounded: the relative error of a normal value is <= 2^-11, the bound
// the FLOAT16 encoding documents.
TEST(Half, RelativeErrorWithinStatedBound) {
  for (float x = 6.2e-5f; x < 65000.f; x *= 1.0007f) {
    const float back = HalfToFloat(FloatToHalf(x));
    EXPECT_LE(std::abs(back - x) / x, std::ldexp(1.0, -11)) << x;
    EXPECT_EQ(HalfToFloat(FloatToHalf(-x)), -back);
  }
}

TEST(Half, SpecialValues) {
  EXPECT_EQ(FloatToHalf(0.f), 0u);
  EXPECT_EQ(FloatToHalf(-0.f), 0x8000u);
  EXPECT_EQ(FloatToHalf(65504.f), 0x7bffu);  // largest half
  EXPECT_EQ(FloatToHalf(65520.f), 0x7c00u);  // ties away to infinity (even)
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 1.0f / 4096)), 1.0f);  // tie to even
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 1u);                // smallest subnormal
}

}  // namespace
}  // namespace sinew
