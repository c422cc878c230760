// Per-vertex loops are compiled twice, for baseline x86-64 and for x86-64-v3 (AVX2, FMA), and
// the better one is picked at load time for the CPU at hand (GCC function multi-versioning).
// Portable binaries, full-width arithmetic where the CPU has it. The two round differently (FMA),
// so results can differ in the last bits between hosts; SINEW_BASELINE_ISA (a CMake option)
// compiles the baseline code only, the same instructions on every host.
#pragma once

// Not under ThreadSanitizer: the load-time resolver GCC makes for the clones is instrumented too
// and runs before TSan's runtime is up (every program crashed at start; scripts/sanitize.sh tsan).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(SINEW_BASELINE_ISA)
#define SINEW_VERTEX_LOOP __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SINEW_VERTEX_LOOP
#endif

// Hand-written AVX2 + FMA kernels (LBS's and DQS's, core/lbs/lbs.cc, core/dqs/dqs.cc) are compiled on x86-64 with
// GCC or Clang and chosen at run time with __builtin_cpu_supports; elsewhere the portable loops
// run.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(SINEW_BASELINE_ISA)
#define SINEW_HAVE_AVX2_KERNELS 1
#else
#define SINEW_HAVE_AVX2_KERNELS 0
#endif

#if SINEW_HAVE_AVX2_KERNELS
namespace sinew {
// Whether this CPU runs the AVX2 + FMA kernels (asked once).
inline bool CpuHasAvx2Fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
}  // namespace sinew
#endif
