// Position-based skinning's device program on CUDA: one block per item of the batch runs the
// item's whole frame (gpu/pbs/pbs.cuh), its threads splitting each colour and meeting at
// __syncthreads between colours. Suits rigs of a few thousand particles (the paper's); a kernel
// per colour across sessions would suit larger ones.
#include <cuda_runtime.h>

#include <string>

#include "gpu/pbs/pbs.cuh"

namespace sinew::gpu {
namespace {

constexpr uint32_t kThreads = 256;

// Host-device only so that the frame's template compiles for both; runs on the device alone.
struct BlockTeam {
  template <class F>
  __host__ __device__ void For(uint32_t n, const F& f) const {
#ifdef __CUDA_ARCH__
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) f(i);
#endif
  }
  __host__ __device__ void Sync() const {
#ifdef __CUDA_ARCH__
    __syncthreads();
#endif
  }
  __host__ __device__ bool Any(bool mine) const {
#ifdef __CUDA_ARCH__
    return __syncthreads_or(mine ? 1 : 0) != 0;
#else
    return mine;
#endif
  }
};

__global__ void PbsKernel(const PbsItem* items, const float* params, float* out) {
  const PbsItem& it = items[blockIdx.x];
  PbsFrame(BlockTeam{}, it, params + it.param_offset, out);
}

}  // namespace

bool RunPbsCuda(void* cuda_stream, const ProgramBatch& pb, std::string* error) {
  if (pb.count == 0) return true;
  PbsKernel<<<pb.count, kThreads, 0, static_cast<cudaStream_t>(cuda_stream)>>>(static_cast<const PbsItem*>(pb.items),
                                                                                 pb.params, pb.out);
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return true;
  if (error) *error = std::string("pbs program launch: ") + cudaGetErrorString(e);
  return false;
}

}  // namespace sinew::gpu
