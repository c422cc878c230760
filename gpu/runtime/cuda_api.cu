// DeviceApi on CUDA: plain allocations (cudaMalloc, cudaMallocHost), one stream and two events
// per queue, one kernel per batch for the per-vertex methods and one kernel per pass of the
// implicit program. No device-wide synchronisation: a batch waits only for its own stream's
// event.
#include <cuda_runtime.h>

#include <string>

#include "gpu/implicit/program.cuh"
#include "gpu/runtime/batch.cuh"
#include "gpu/runtime/device_api.h"

namespace sinew::gpu {
namespace {

constexpr uint32_t kThreads = 256;

__global__ void SkinBatchKernel(const BatchItem* items, uint32_t item_count, const float* joint_data,
                                uint32_t total, float* out) {
  const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < total) BatchVertex(items, item_count, joint_data, g, out);
}

// The implicit program's passes (gpu/implicit/program.cuh): a thread per node or vertex
// (Grid) or item of the batch, and a block per item for the reductions.
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

bool Check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

struct Queue {
  int device;
  cudaStream_t stream;
  cudaEvent_t start, stop;
};

class CudaApi final : public DeviceApi {
 public:
  std::string kind() const override { return "cuda"; }

  int Count(std::string* error) override {
    int n = 0;
    if (!Check(cudaGetDeviceCount(&n), "cudaGetDeviceCount", error)) return 0;
    if (n == 0 && error) *error = "no CUDA device";
    return n;
  }

  bool Properties(int device, std::string* name, int* major, int* minor, uint64_t* total) override {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return false;
    *name = p.name;
    *major = p.major;
    *minor = p.minor;
    *total = p.totalGlobalMem;
    return true;
  }

  void* Alloc(int device, size_t bytes, std::string* error) override {
    void* p = nullptr;
    if (!Check(cudaSetDevice(device), "cudaSetDevice", error)) return nullptr;
    if (!Check(cudaMalloc(&p, bytes), "cudaMalloc", error)) return nullptr;
    return p;
  }
  void Free(int device, void* p) override {
    if (p == nullptr) return;
    cudaSetDevice(device);
    cudaFree(p);
  }
  void* AllocHost(size_t bytes, std::string* error) override {
    void* p = nullptr;
    if (!Check(cudaMallocHost(&p, bytes), "cudaMallocHost", error)) return nullptr;
    return p;
  }
  void FreeHost(void* p) override {
    if (p) cudaFreeHost(p);
  }
  bool Upload(int device, void* dst, const void* src, size_t bytes, std::string* error) override {
    return Check(cudaSetDevice(device), "cudaSetDevice", error) &&
           Check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy", error);
  }

  bool Clear(int device, void* dst, size_t bytes, std::string* error) override {
    return Check(cudaSetDevice(device), "cudaSetDevice", error) && Check(cudaMemset(dst, 0, bytes), "cudaMemset", error);
  }

  void* CreateQueue(int device, std::string* error) override {
    auto* q = new Queue{device, nullptr, nullptr, nullptr};
    if (!Check(cudaSetDevice(device), "cudaSetDevice", error) ||
        !Check(cudaStreamCreateWithFlags(&q->stream, cudaStreamNonBlocking), "cudaStreamCreate", error) ||
        !Check(cudaEventCreate(&q->start), "cudaEventCreate", error) ||
        !Check(cudaEventCreate(&q->stop), "cudaEventCreate", error)) {
      DestroyQueue(q);
      return nullptr;
    }
    return q;
  }
  void DestroyQueue(void* queue) override {
    auto* q = static_cast<Queue*>(queue);
    if (!q) return;
    cudaSetDevice(q->device);
    if (q->start) cudaEventDestroy(q->start);
    if (q->stop) cudaEventDestroy(q->stop);
    if (q->stream) cudaStreamDestroy(q->stream);
    delete q;
  }

  bool Launch(void* queue, const LaunchSpec& s, std::string* error) override {
    auto* q = static_cast<Queue*>(queue);
    if (!Check(cudaSetDevice(q->device), "cudaSetDevice", error)) return false;
    if (!Check(cudaEventRecord(q->start, q->stream), "cudaEventRecord", error)) return false;
    if (!Check(cudaMemcpyAsync(s.din, s.in, s.in_bytes, cudaMemcpyHostToDevice, q->stream), "cudaMemcpyAsync H2D", error)) {
      return false;
    }
    const char* din = static_cast<const char*>(s.din);
    const auto* params = reinterpret_cast<const float*>(din + s.params_offset);
    auto* out = static_cast<float*>(s.dout);
    if (s.total_vertices > 0) {
      SkinBatchKernel<<<CudaExec::Blocks(s.total_vertices), kThreads, 0, q->stream>>>(
          reinterpret_cast<const BatchItem*>(din), s.items, params, s.total_vertices, out);
    }
    if (s.implicit_items > 0) {
      const CudaExec x{{reinterpret_cast<const ImplicitItem*>(din + s.implicit_offset), s.implicit_items, params, out,
                        reinterpret_cast<uint8_t*>(out + 3 * size_t(s.total_vertices))},
                       s.implicit_nodes, s.implicit_vertices, q->stream};
      RunImplicitProgram(x, *s.limits);
    }
    if (!Check(cudaGetLastError(), "kernel launch", error)) return false;
    if (!Check(cudaMemcpyAsync(s.out, s.dout, s.out_bytes, cudaMemcpyDeviceToHost, q->stream), "cudaMemcpyAsync D2H", error)) {
      return false;
    }
    return Check(cudaEventRecord(q->stop, q->stream), "cudaEventRecord", error);
  }

  bool Wait(void* queue, double* busy_ms, std::string* error) override {
    auto* q = static_cast<Queue*>(queue);
    if (!Check(cudaEventSynchronize(q->stop), "cudaEventSynchronize", error)) return false;
    float ms = 0;
    cudaEventElapsedTime(&ms, q->start, q->stop);
    *busy_ms = ms;
    return true;
  }
};

}  // namespace

std::unique_ptr<DeviceApi> MakeCudaApi() { return std::make_unique<CudaApi>(); }

}  // namespace sinew::gpu
