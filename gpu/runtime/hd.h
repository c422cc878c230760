// SINEW_HD marks functions compiled for both host and device: the per-vertex deformers of
// gpu/<method>/ run in CUDA kernels and, unchanged, in the CPU emulation of a device that the
// tests use where no GPU exists.
#pragma once

#if defined(__CUDACC__)
#define SINEW_HD __host__ __device__ __forceinline__
#else
#define SINEW_HD inline
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

namespace sinew::gpu {

// Copies `n4` groups of 4 floats from 16-byte aligned `src`: one 16-byte load each on the
// device (a quarter of the load instructions of scalar reads).
template <int n4>
SINEW_HD void Load4(const float* src, float* dst) {
#if defined(__CUDA_ARCH__)
#pragma unroll
  for (int i = 0; i < n4; ++i) {
    const float4 v = reinterpret_cast<const float4*>(src)[i];
    dst[4 * i] = v.x;
    dst[4 * i + 1] = v.y;
    dst[4 * i + 2] = v.z;
    dst[4 * i + 3] = v.w;
  }
#else
  std::memcpy(dst, src, sizeof(float) * 4 * n4);
#endif
}

// sin and cos of an angle: in [-2π, 2π] the device's hardware approximation (absolute error
// about 5e-7 there), beyond it the full-precision sincosf (the hardware's error grows with the
// angle: swing-twist's unwrapped twist, many turns on, would drift from the CPU's; a review
// found it, 2026-12-03); the C library's on the host.
SINEW_HD void SinCosSmall(float a, float* s, float* c) {
#if defined(__CUDA_ARCH__)
  if (fabsf(a) <= 6.2831855f) {
    __sincosf(a, s, c);
  } else {
    sincosf(a, s, c);
  }
#else
  *s = std::sin(a);
  *c = std::cos(a);
#endif
}

// The last of `count` items (sorted by the offset member `kOffset`, the first at 0) whose offset
// is at or before g: the batch item a global vertex or row belongs to.
template <class Item, uint32_t Item::*kOffset>
SINEW_HD uint32_t ItemAt(const Item* items, uint32_t count, uint32_t g) {
  uint32_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (items[mid].*kOffset <= g) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace sinew::gpu
