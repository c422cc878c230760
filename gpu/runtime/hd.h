// SINEW_HD marks functions compiled for both host and device: the per-vertex deformers of
// gpu/<method>/ run in CUDA kernels and, unchanged, in the CPU emulation of a device that the
// tests use where no GPU exists.
#pragma once

#if defined(__CUDACC__)
#define SINEW_HD __host__ __device__ __forceinline__
#else
#define SINEW_HD inline
#endif

#include <cstdint>

namespace sinew::gpu {

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
