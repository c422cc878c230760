#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/util/finite.h"
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

// The bulk conversions (F16C where the CPU has it) equal the scalar ones on every half and on
// floats of every kind: normal, subnormal, overflowing, infinite, NaN (NaN payloads may differ).
TEST(Half, BulkConversionsEqualTheScalarOnes) {
  std::vector<uint16_t> halves(0x10000 + 5);
  for (size_t h = 0; h < halves.size(); ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> floats(halves.size());
  HalvesToFloats(halves.data(), floats.data(), halves.size());
  for (size_t h = 0; h < halves.size(); ++h) {
    const float f = HalfToFloat(halves[h]);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(floats[h])) << h;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(floats[h]), std::bit_cast<uint32_t>(f)) << std::hex << h;
    }
  }
  std::mt19937 rng(5);
  std::vector<float> in(100003);
  for (float& x : in) x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
  for (size_t i = 0; i < 2000; ++i) in[i] = std::ldexp(float(i) - 1000, -30 + int(i % 50));  // subnormal..overflow
  std::vector<uint16_t> out(in.size());
  FloatsToHalves(in.data(), out.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t want = FloatToHalf(in[i]);
    if (std::isnan(in[i])) {
      EXPECT_TRUE((out[i] & 0x7c00u) == 0x7c00u && (out[i] & 0x3ffu) != 0) << i;
    } else {
      ASSERT_EQ(out[i], want) << i << ": " << in[i];
    }
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

// The float16 range check (a float frame's positions against kFloat16Finite) fails a value exactly
// when its half is infinite: every float from 65 000 to 66 000, either sign, checked one by one.
// (Before 2026-12-02 the limit was 65504, so values that round down to 65504 failed on the CPU
// and passed on the device, which checks its halves.)
TEST(Half, TheFloat16RangeCheckFailsExactlyTheValuesWhoseHalfIsInfinite) {
  std::vector<float> v;
  for (float x = 65000.f; x < 66000.f; x = std::nextafter(x, 1e9f)) {
    v.push_back(x);
    v.push_back(-x);
  }
  size_t finite = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const bool infinite_half = (FloatToHalf(v[i]) & 0x7fffu) == 0x7c00u;
    finite += !infinite_half;
    const float one[1] = {v[i]};
    ASSERT_EQ(FirstBeyond(one, kFloat16Finite) == 0, infinite_half) << v[i];
  }
  EXPECT_EQ(FirstBeyond(v, kFloat16Finite), finite) << "the first value past the limit";
  EXPECT_EQ(FloatToHalf(kFloat16Finite), 0x7bffu);
  EXPECT_GT(finite, 2000u) << "the sweep no longer crosses the range's end";
}

}  // namespace
}  // namespace sinew
