// IEEE 754 binary16 conversion (round to nearest, ties to even), for the FLOAT16 output
// encoding. Relative error of a normal value <= 2^-11; magnitudes >= 65520 become infinity.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace sinew {

inline uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal, units of 2^-24
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // exact
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  const uint32_t mant = abs & 0x7fffffu;
  uint32_t h = ((((abs >> 23) - 127u + 15u)) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15u + 127u) << 23) | (mant << 13));
}

#if defined(__x86_64__) && defined(__GNUC__)
// The F16C instructions: the same rounding (to nearest, ties to even, subnormals and infinities
// alike); NaNs stay NaNs, their payload bits may differ from FloatToHalf's.
__attribute__((target("avx,f16c"))) inline void FloatsToHalvesF16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}
__attribute__((target("avx,f16c"))) inline void HalvesToFloatsF16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}
inline bool CpuHasF16c() {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}
#endif

// n values at once: eight per instruction where the CPU has F16C, else one by one.
inline void FloatsToHalves(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (CpuHasF16c()) return FloatsToHalvesF16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

inline void HalvesToFloats(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (CpuHasF16c()) return HalvesToFloatsF16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

}  // namespace sinew
