// SINEW_HD marks functions compiled for both host and device: the per-vertex deformers of
// gpu/<method>/ run in CUDA kernels and, unchanged, in the CPU emulation of a device that the
// tests use where no GPU exists.
#pragma once

#if defined(__CUDACC__)
#define SINEW_HD __host__ __device__ __forceinline__
#else
#define SINEW_HD inline
#endif
