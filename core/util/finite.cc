#include "core/util/finite.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>

#include "core/util/simd.h"

namespace sinew {
namespace {

// The largest |x| of v[b, e) as a bit pattern. On the bit patterns with the sign cleared, finite
// floats order as their magnitudes, and inf and NaN lie above every finite one, so one unsigned
// maximum (a vector max) decides a whole block.
SINEW_VERTEX_LOOP uint32_t MaxMagnitudeBits(const float* v, size_t n) {
  uint32_t m = 0;
  for (size_t k = 0; k < n; ++k) m = std::max(m, std::bit_cast<uint32_t>(v[k]) & 0x7fffffffu);
  return m;
}

}  // namespace

size_t FirstBeyond(std::span<const float> v, float limit, ThreadPool* pool) {
  const uint32_t limit_bits = std::bit_cast<uint32_t>(limit);
  constexpr size_t kGrain = size_t{1} << 16, kBlock = 4096;
  std::atomic<size_t> first{v.size()};
  if (v.size() < 2 * kGrain) pool = nullptr;  // one chunk: no worker to wake
  ParallelFor(pool, v.size(), kGrain, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; i += kBlock) {
      const size_t end = std::min(e, i + kBlock);
      if (MaxMagnitudeBits(v.data() + i, end - i) <= limit_bits) continue;
      for (size_t k = i; k < end; ++k) {  // the rare bad block: its first value
        if ((std::bit_cast<uint32_t>(v[k]) & 0x7fffffffu) > limit_bits) {
          size_t cur = first.load();
          while (k < cur && !first.compare_exchange_weak(cur, k)) {
          }
          return;
        }
      }
    }
  });
  return first.load();
}

}  // namespace sinew
