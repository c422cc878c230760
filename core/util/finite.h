// Finds the first value whose magnitude is not within a limit (NaN and ±inf included): how a
// frame's positions are checked before they are sent, against float32's range or float16's
// (kFloat16Finite). One read of the array (AVX2 where the CPU has it), split over the pool;
// allocates nothing.
#pragma once

#include <cstddef>
#include <span>

#include "core/parallel/thread_pool.h"

namespace sinew {

// The largest float that converts to a finite half: 65520 - 2^-8. Rounding to nearest even (as
// FloatToHalf and FloatsToHalves do; the GPU backend makes a float16 frame's halves with the
// latter once the device's float32 batch is back), floats from there down to 65504, the largest
// half, become 65504, and 65520 and above become infinity. So a float frame checked against this
// fails exactly when its halves would not be finite.
inline constexpr float kFloat16Finite = 65519.99609375f;

// Index of the first v[i] with !(|v[i]| <= limit), or v.size() when every value is within.
// `limit` must be finite and >= 0.
size_t FirstBeyond(std::span<const float> v, float limit, ThreadPool* pool = nullptr);

}  // namespace sinew
