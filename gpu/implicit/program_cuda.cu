// Implicit skinning's device program on CUDA: a kernel per pass of gpu/implicit/program.cuh, a
// thread per node or vertex (grids), a thread per item and connected component for the loops'
// checks, and blocks per item and component for the reductions and chains, all on the batch's
// stream.
#include <cuda_runtime.h>

#include <string>

#include "gpu/implicit/program.cuh"

namespace sinew::gpu {
namespace {

constexpr uint32_t kThreads = 256;

template <class Grid, class Pass>
__global__ void ImplicitGridKernel(Pass pass, ImplicitBatch b, uint32_t total) {
  const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= total) return;
  const ImplicitItem& it = b.items[FindItem<Grid>(b, g)];
  const uint32_t i = g - Grid::Offset(it);
  if (i < Grid::Count(it)) pass(b, it, i);
}

// Chains and reductions: a block per item and component (gridDim.y per item, blockIdx.x the item;
// block y takes the item's components y, y + gridDim.y, ...) of kChainThreads threads. The threads
// run the pass and compute the values of kChainThreads nodes at a time, in parallel; lane l of
// kReduceLanes then adds the chunk's values l, l + kReduceLanes, ... from shared memory, so it sums
// nodes l, l + kReduceLanes, ... in ascending order, as the emulation's lanes do; then the lanes
// halve. (With one thread per lane, each walking its 17 nodes of a 4 200-node component, a chain
// took about 40 µs on an H200, 2026-12-04: the limb's frame less its other passes at 6 µs each;
// the frame 135 ms against 88 ms with these blocks.)
constexpr uint32_t kChainThreads = 4 * kReduceLanes;
static_assert(kChainThreads % kReduceLanes == 0 && kChainThreads <= 1024, "a chunk holds whole rows of lanes in one block");

// One stage of a chain for component c (first, size: its run of component_nodes). The block's
// barriers make the first thread's Finish visible to the next stage.
template <class Stage>
__device__ void ImplicitChainStage(const Stage& st, const ImplicitBatch& b, const ImplicitItem& it, uint32_t c,
                                   uint32_t first, uint32_t size, double* value, double* lane) {
  using Reduction = decltype(st.red);
  const uint32_t t = threadIdx.x;
  if (!st.red.Active(b, it, c)) {  // the same for the whole block
    for (uint32_t k = t; k < size; k += kChainThreads) st.pass(b, it, it.model.component_nodes[first + k]);
    __syncthreads();
    return;
  }
  double acc = 0;  // lane t's (t < kReduceLanes)
  for (uint32_t at = 0; at < size; at += kChainThreads) {
    if (at + t < size) {
      const uint32_t i = it.model.component_nodes[first + at + t];
      st.pass(b, it, i);
      value[t] = st.red.Value(b, it, i);
    }
    __syncthreads();
    if (t < kReduceLanes) {
      for (uint32_t j = t; j < kChainThreads && at + j < size; j += kReduceLanes) {
        acc = ReduceCombine<Reduction::kMax>(acc, value[j]);
      }
    }
    __syncthreads();  // value[] is rewritten by the next chunk
  }
  if (t < kReduceLanes) lane[t] = acc;
  __syncthreads();
  for (uint32_t stride = kReduceLanes / 2; stride > 0; stride /= 2) {
    if (t < stride) lane[t] = ReduceCombine<Reduction::kMax>(lane[t], lane[t + stride]);
    __syncthreads();
  }
  if (t == 0) st.red.Finish(b, it, c, lane[0]);
  __syncthreads();  // Finish's scalars, for the next stage; lane[] reused
}

// Exec::Chain (a reduction alone is a chain of one stage).
template <class... Stages>
__global__ void __launch_bounds__(kChainThreads) ImplicitChainKernel(ImplicitBatch b, Stages... stages) {
  const ImplicitItem& it = b.items[blockIdx.x];
  __shared__ double value[kChainThreads];
  __shared__ double lane[kReduceLanes];
  for (uint32_t c = blockIdx.y; c < it.model.component_count; c += gridDim.y) {
    const uint32_t first = it.model.component_offsets[c], size = it.model.component_offsets[c + 1] - first;
    (ImplicitChainStage(stages, b, it, c, first, size, value, lane), ...);
  }
}

// Sets the mapped host word when `hit` in any converged lane of this warp: one write across
// PCIe per warp, not per thread (a review, 2026-12-03: on a large mesh every marching node wrote
// it, uncached, at each check).
__device__ inline void FlagOnce(bool hit, unsigned* flag) {
  const unsigned active = __activemask();
  if (__any_sync(active, hit) && int(threadIdx.x & 31u) == __ffs(int(active)) - 1) *flag = 1;
}

// Any: a thread per item and connected component (up to the batch's most components); a warp
// with one that finds pred true writes 1 into a mapped host word.
template <class Pred>
__global__ void ImplicitAnyKernel(Pred pred, ImplicitBatch b, uint32_t components, unsigned* flag) {
  const uint64_t t = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= uint64_t(b.count) * components) return;
  const ImplicitItem& it = b.items[t / components];
  const uint32_t c = uint32_t(t % components);
  FlagOnce(c < it.model.component_count && pred(b, it, c), flag);
}

template <class Pred>
__global__ void ImplicitAnyNodeKernel(Pred pred, ImplicitBatch b, uint32_t total, unsigned* flag) {
  const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= total) return;
  const ImplicitItem& it = b.items[FindItem<NodeGrid>(b, g)];
  const uint32_t i = g - NodeGrid::Offset(it);
  FlagOnce(i < NodeGrid::Count(it) && pred(b, it, i), flag);
}

// ImplicitStops: the item's sub-steps end at `step` (the table is the batch's input buffer).
// Only ever lowers the item's sub-steps (ImplicitStops asks only items still running).
__global__ void ImplicitRetireKernel(ImplicitItem* item, uint32_t step) {
  if (step < item->substeps) item->substeps = step;
}

// The launching thread's mapped, pinned host word for Any (one per thread: a device's batches
// are launched by its backend's one thread, and each Any waits for its kernel before returning).
struct AnyFlag {
  unsigned* host = nullptr;
  unsigned* device = nullptr;  // the same word's device address
  bool failed = false;
  ~AnyFlag() {
    if (host) cudaFreeHost(host);
  }
  const AnyFlag* Get() {
    if (!host && !failed) {
      void* p = nullptr;
      void* d = nullptr;
      const cudaError_t pending = cudaPeekAtLastError();  // an earlier launch's, not to be cleared
      failed = cudaHostAlloc(&p, sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess ||
               cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess;
      if (failed) {
        // Without the word, Any answers true: nothing ends early. The allocation's error is
        // cleared, not an earlier launch's (which its own check reports).
        if (pending == cudaSuccess) (void)cudaGetLastError();
        if (p) cudaFreeHost(p);
      } else {
        host = static_cast<unsigned*>(p);
        device = static_cast<unsigned*>(d);
      }
    }
    return host ? this : nullptr;
  }
};

struct CudaExec {
  ImplicitBatch b;
  uint32_t nodes, vertices, components;
  cudaStream_t stream;
  const AnyFlag* flag;  // null: Any cannot tell

  static uint32_t Blocks(uint32_t n) { return (n + kThreads - 1) / kThreads; }
  template <class Pass>
  void Nodes(const Pass& pass) const {
    if (nodes) ImplicitGridKernel<NodeGrid><<<Blocks(nodes), kThreads, 0, stream>>>(pass, b, nodes);
  }
  template <class Pass>
  void Vertices(const Pass& pass) const {
    if (vertices) ImplicitGridKernel<VertexGrid><<<Blocks(vertices), kThreads, 0, stream>>>(pass, b, vertices);
  }
  // At most kReduceBlocksY blocks per item; a mesh of more components loops over them.
  dim3 ComponentGrid() const {
    constexpr uint32_t kReduceBlocksY = 1024;
    return dim3(b.count, components < kReduceBlocksY ? (components > 0 ? components : 1) : kReduceBlocksY);
  }
  template <class... Stages>
  void Chain(const Stages&... stages) const {
    ImplicitChainKernel<<<ComponentGrid(), kChainThreads, 0, stream>>>(b, stages...);
  }
  // Each waits for the stream. After a failed launch or wait they answer false, so the loops end
  // and RunImplicitCuda reports the error.
  template <class Pred>
  bool Any(const Pred& pred) const {
    if (flag == nullptr) return true;
    const uint32_t per_item = components > 0 ? components : 1;
    Clear();
    ImplicitAnyKernel<<<Blocks(b.count * per_item), kThreads, 0, stream>>>(pred, b, per_item, flag->device);
    return Read();
  }
  template <class Pred>
  bool AnyNode(const Pred& pred) const {
    if (flag == nullptr) return true;
    if (nodes == 0) return false;
    Clear();
    ImplicitAnyNodeKernel<<<Blocks(nodes), kThreads, 0, stream>>>(pred, b, nodes, flag->device);
    return Read();
  }
  void Retire(uint32_t t, uint32_t step) const {
    ImplicitRetireKernel<<<1, 1, 0, stream>>>(const_cast<ImplicitItem*>(b.items) + t, step);
  }
  // No kernel of ours writes the word between Clear and its launch: the previous Read waited.
  void Clear() const { *static_cast<volatile unsigned*>(flag->host) = 0; }
  bool Read() const {
    if (cudaStreamSynchronize(stream) != cudaSuccess) return false;
    return *static_cast<volatile unsigned*>(flag->host) != 0;
  }
};

}  // namespace

bool RunImplicitCuda(void* cuda_stream, const ProgramBatch& pb, std::string* error) {
  if (pb.count == 0) return true;
  const auto& limits = *static_cast<const ImplicitLimits*>(pb.limits);
  thread_local AnyFlag any;
  const CudaExec x{{static_cast<const ImplicitItem*>(pb.items), pb.count, pb.params, pb.out, pb.states},
                   limits.nodes, limits.vertices, limits.components, static_cast<cudaStream_t>(cuda_stream), any.Get()};
  RunImplicitProgram(x, limits, pb.count, pb.stops, static_cast<const ImplicitItem*>(pb.host_items));
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return true;
  if (error) *error = std::string("implicit program launch: ") + cudaGetErrorString(e);
  return false;
}

}  // namespace sinew::gpu
