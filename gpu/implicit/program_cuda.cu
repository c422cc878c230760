// Implicit skinning's device program on CUDA: a kernel per pass of gpu/implicit/program.cuh, a
// thread per node or vertex (grids) or item of the batch, and a block per item for the
// reductions, all on the batch's stream.
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

template <class Pass>
__global__ void ImplicitItemsKernel(Pass pass, ImplicitBatch b) {
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < b.count) pass(b, b.items[t]);
}

// One block of kReduceLanes threads per item: lanes accumulate strided nodes, then halve.
template <class Reduction>
__global__ void ImplicitReduceKernel(Reduction r, ImplicitBatch b) {
  const ImplicitItem& it = b.items[blockIdx.x];
  if (!r.Active(b, it)) return;  // the same for the whole block
  __shared__ double lane[kReduceLanes];
  double acc = 0;
  for (uint32_t i = threadIdx.x; i < it.model.node_count; i += kReduceLanes) {
    acc = ReduceCombine<Reduction::kMax>(acc, r.Value(b, it, i));
  }
  lane[threadIdx.x] = acc;
  __syncthreads();
  for (uint32_t stride = kReduceLanes / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) lane[threadIdx.x] = ReduceCombine<Reduction::kMax>(lane[threadIdx.x], lane[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x == 0) r.Finish(b, it, lane[0]);
}

struct CudaExec {
  ImplicitBatch b;
  uint32_t nodes, vertices;
  cudaStream_t stream;

  static uint32_t Blocks(uint32_t n) { return (n + kThreads - 1) / kThreads; }
  template <class Pass>
  void Nodes(const Pass& pass) const {
    if (nodes) ImplicitGridKernel<NodeGrid><<<Blocks(nodes), kThreads, 0, stream>>>(pass, b, nodes);
  }
  template <class Pass>
  void Vertices(const Pass& pass) const {
    if (vertices) ImplicitGridKernel<VertexGrid><<<Blocks(vertices), kThreads, 0, stream>>>(pass, b, vertices);
  }
  template <class Pass>
  void Items(const Pass& pass) const {
    ImplicitItemsKernel<<<Blocks(b.count), kThreads, 0, stream>>>(pass, b);
  }
  template <class Reduction>
  void Reduce(const Reduction& r) const {
    ImplicitReduceKernel<<<b.count, kReduceLanes, 0, stream>>>(r, b);
  }
};

}  // namespace

bool RunImplicitCuda(void* cuda_stream, const ProgramBatch& pb, std::string* error) {
  if (pb.count == 0) return true;
  const auto& limits = *static_cast<const ImplicitLimits*>(pb.limits);
  const CudaExec x{{static_cast<const ImplicitItem*>(pb.items), pb.count, pb.params, pb.out, pb.states},
                   limits.nodes, limits.vertices, static_cast<cudaStream_t>(cuda_stream)};
  RunImplicitProgram(x, limits);
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return true;
  if (error) *error = std::string("implicit program launch: ") + cudaGetErrorString(e);
  return false;
}

}  // namespace sinew::gpu
