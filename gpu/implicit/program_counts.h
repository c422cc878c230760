// How much implicit skinning's device program launched, for sinew-bench-implicit: per run of a
// batch's frame, the passes (on CUDA a kernel each, on the emulated device a loop) and the host's
// waits for the device (the elastic loops' Any checks). Process-wide totals; plain C++, so that
// nvcc and the host compiler both include it.
#pragma once

#include <cstdint>

namespace sinew::gpu {

struct ImplicitProgramCounts {
  uint64_t runs = 0;    // batches' frames run
  uint64_t passes = 0;  // passes launched, checks and retirements included
  uint64_t waits = 0;   // checks that waited for the device (Any, AnyNode)
};

// The totals since the process started (relaxed: read them when no batch is running).
ImplicitProgramCounts ImplicitProgramCountsSoFar();
void AddImplicitProgramCounts(const ImplicitProgramCounts& run);

}  // namespace sinew::gpu
