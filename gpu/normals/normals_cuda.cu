// The normals pass on CUDA: a thread per normal row of the batch.
#include <cuda_runtime.h>

#include <string>

#include "gpu/normals/normals.cuh"

namespace sinew::gpu {
namespace {

__global__ void NormalsKernel(const NormalsItem* items, uint32_t count, uint32_t rows) {
  const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < rows) NormalRow(items, count, g);
}

}  // namespace

bool RunNormalsCuda(void* cuda_stream, const NormalsItem* items, uint32_t count, uint32_t rows, std::string* error) {
  if (count == 0 || rows == 0) return true;
  constexpr uint32_t kThreads = 256;
  NormalsKernel<<<(rows + kThreads - 1) / kThreads, kThreads, 0, static_cast<cudaStream_t>(cuda_stream)>>>(items, count,
                                                                                                           rows);
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return true;
  if (error) *error = std::string("normals pass launch: ") + cudaGetErrorString(e);
  return false;
}

}  // namespace sinew::gpu
