// How much implicit skinning's device program asked of its exec, for sinew-bench-implicit: the
// passes (on CUDA a kernel each, on the emulated device a loop) and the elastic loops' checks
// (Any, AnyNode: on CUDA the host waits for the device at each). Counted as asked: on CUDA a pass
// over no nodes, or a check without its mapped flag (it then answers true), launches nothing.
// Process-wide totals; plain C++, so that nvcc and the host compiler both include it.
#pragma once

#include <cstdint>

namespace sinew::gpu {

struct ImplicitProgramCounts {
  uint64_t passes = 0;  // passes, checks and retirements included
  uint64_t waits = 0;   // checks (Any, AnyNode)
};

// The totals since the process started (relaxed: read them when no batch is running).
ImplicitProgramCounts ImplicitProgramCountsSoFar();
void AddImplicitProgramCounts(const ImplicitProgramCounts& run);

}  // namespace sinew::gpu
