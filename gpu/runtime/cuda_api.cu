// DeviceApi on CUDA: plain allocations (cudaMalloc, cudaMallocHost), one stream and two events
// per queue, one kernel per batch. No device-wide synchronisation: a batch waits only for its
// own stream's event.
#include <cuda_runtime.h>

#include <string>

#include "gpu/runtime/batch.cuh"
#include "gpu/runtime/device_api.h"

namespace sinew::gpu {
namespace {

__global__ void SkinBatchKernel(const BatchItem* items, uint32_t item_count, const float* joint_data,
                                uint32_t total, float* out) {
  const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < total) BatchVertex(items, item_count, joint_data, g, out);
}

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

  bool Launch(void* queue, const void* in, void* din, size_t in_bytes, size_t items,
              size_t joint_data_offset, uint32_t total_vertices, void* dout, void* out,
              std::string* error) override {
    auto* q = static_cast<Queue*>(queue);
    if (!Check(cudaSetDevice(q->device), "cudaSetDevice", error)) return false;
    if (!Check(cudaEventRecord(q->start, q->stream), "cudaEventRecord", error)) return false;
    if (!Check(cudaMemcpyAsync(din, in, in_bytes, cudaMemcpyHostToDevice, q->stream), "cudaMemcpyAsync H2D", error)) return false;
    constexpr uint32_t kThreads = 256;
    const uint32_t blocks = (total_vertices + kThreads - 1) / kThreads;
    SkinBatchKernel<<<blocks, kThreads, 0, q->stream>>>(
        static_cast<const BatchItem*>(din), static_cast<uint32_t>(items),
        reinterpret_cast<const float*>(static_cast<const char*>(din) + joint_data_offset),
        total_vertices, static_cast<float*>(dout));
    if (!Check(cudaGetLastError(), "kernel launch", error)) return false;
    if (!Check(cudaMemcpyAsync(out, dout, size_t{12} * total_vertices, cudaMemcpyDeviceToHost, q->stream), "cudaMemcpyAsync D2H", error)) return false;
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
