// DeviceApi on CUDA: plain allocations (cudaMalloc, cudaMallocHost), one stream and two events
// per queue, one kernel per batch for the per-vertex stages, then each device program's passes
// (its own kernels, gpu/<method>/) on the same stream. No device-wide synchronisation: a batch waits only for its own stream's
// event (uploads and clears, on the default stream, wait for it).
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>

#include "gpu/runtime/batch.cuh"
#include "gpu/runtime/device_api.h"

namespace sinew::gpu {
namespace {

constexpr uint32_t kThreads = 256;

// Bounded to kThreads a block, so that ptxas keeps the registers a block of them can have.
template <bool kBaseline>
__global__ void __launch_bounds__(kThreads) SkinBatchKernel(const BatchItem* items, uint32_t item_count,
                                                            const float* joint_data, uint32_t total, float* out) {
  const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < total) BatchVertex<kBaseline>(items, item_count, joint_data, g, out);
}

bool Sticky(cudaError_t e);

// A failed call's error stays the thread's "last error" until read: a failed cudaMalloc (out of
// memory) was then reported by the next batch's cudaGetLastError after its launch, failing a
// batch that had nothing wrong with it (until 2026-12-03, found in review). Read here, unless
// it is sticky (the context is lost: every later call says so anyway).
bool Check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = std::string(what) + ": " + cudaGetErrorString(e);
  if (!Sticky(e)) (void)cudaGetLastError();
  return false;
}

// Errors after which the CUDA context is unusable: every later call in the process fails.
bool Sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    // Documented as needing the process restarted too (until 2026-12-07 missing: a device
    // contained by Hopper's error containment, an NVLink or hardware fault, stayed in use).
    case cudaErrorContained:
    case cudaErrorExternalDevice:
    case cudaErrorMpsClientTerminated:
      return true;
    default:
      return false;
  }
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
    // A device this build has no kernels for (its architecture missing from the device code)
    // fails every launch with "no kernel image": refused here, so that the server runs on the CPU
    // instead of answering INTERNAL for every GPU frame.
    for (int d = 0; d < n; ++d) {
      cudaFuncAttributes attributes;
      cudaError_t e = cudaSetDevice(d);
      if (e == cudaSuccess) e = cudaFuncGetAttributes(&attributes, SkinBatchKernel<false>);
      if (e != cudaSuccess) {
        cudaDeviceProp p;
        const bool named = cudaGetDeviceProperties(&p, d) == cudaSuccess;
        (void)cudaGetLastError();
        // Only a missing kernel image asks for a rebuild; anything else (a device held in
        // exclusive mode by another process, no memory for the context) is said as it is.
        const bool no_image = e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction;
        if (error) {
          *error = "device " + std::to_string(d) +
                   (named ? " (" + std::string(p.name) + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ")"
                          : std::string()) +
                   (no_image ? ": this build has no kernels for it (device code " SINEW_CUDA_ARCHS
                               "); configure with -DSINEW_CUDA_ARCHITECTURES naming its architecture"
                             : std::string(": ") + cudaGetErrorString(e));
        }
        return 0;
      }
    }
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
    if (!Check(cudaSetDevice(device), "cudaSetDevice", error)) return Noted<void*>(device, nullptr);
    // cudaMalloc of 0 bytes succeeds with a null pointer, which callers read as a failure; the
    // emulated device gives a block.
    if (!Check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc", error)) return Noted<void*>(device, nullptr);
    return p;
  }
  void Free(int device, void* p) override {
    if (p == nullptr) return;
    cudaSetDevice(device);
    (void)Check(cudaFree(p), "cudaFree", nullptr);  // a failure must not stay the next launch's last error
  }
  void* AllocHost(size_t bytes, std::string* error) override {
    void* p = nullptr;
    if (!Check(cudaMallocHost(&p, bytes), "cudaMallocHost", error)) return nullptr;
    return p;
  }
  void FreeHost(void* p) override {
    if (p) (void)Check(cudaFreeHost(p), "cudaFreeHost", nullptr);
  }
  // Upload and Clear run on the legacy default stream, which the queues' non-blocking streams do
  // not wait for: a pageable cudaMemcpy may return before its DMA lands and cudaMemset before it
  // runs, so both wait for that stream before returning (they are rare: rigs, state writes).
  // Each marks the device broken when its failure is a sticky error (not only launches: an
  // upload may be the first call to meet a lost context).
  bool Upload(int device, void* dst, const void* src, size_t bytes, std::string* error) override {
    return Noted(device, Check(cudaSetDevice(device), "cudaSetDevice", error) &&
                             Check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy", error) &&
                             Check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize", error));
  }

  bool Download(int device, void* dst, const void* src, size_t bytes, std::string* error) override {
    return Noted(device, Check(cudaSetDevice(device), "cudaSetDevice", error) &&
                             Check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", error));
  }

  bool Clear(int device, void* dst, size_t bytes, std::string* error) override {
    return Noted(device, Check(cudaSetDevice(device), "cudaSetDevice", error) &&
                             Check(cudaMemset(dst, 0, bytes), "cudaMemset", error) &&
                             Check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize", error));
  }

  void* CreateQueue(int device, std::string* error) override {
    auto* q = new Queue{device, nullptr, nullptr, nullptr};
    if (!Check(cudaSetDevice(device), "cudaSetDevice", error) ||
        !Check(cudaStreamCreateWithFlags(&q->stream, cudaStreamNonBlocking), "cudaStreamCreate", error) ||
        !Check(cudaEventCreate(&q->start), "cudaEventCreate", error) ||
        !Check(cudaEventCreate(&q->stop), "cudaEventCreate", error)) {
      DestroyQueue(q);
      return Noted<void*>(device, nullptr);
    }
    return q;
  }
  void DestroyQueue(void* queue) override {
    auto* q = static_cast<Queue*>(queue);
    if (!q) return;
    cudaSetDevice(q->device);
    if (q->start) (void)Check(cudaEventDestroy(q->start), "cudaEventDestroy", nullptr);
    if (q->stop) (void)Check(cudaEventDestroy(q->stop), "cudaEventDestroy", nullptr);
    if (q->stream) (void)Check(cudaStreamDestroy(q->stream), "cudaStreamDestroy", nullptr);
    delete q;
  }

  // A launch that fails part way has queued work (the upload, kernels) that may still read the
  // batch's buffers, which the next batch in the slot reuses: it is synchronised before failing.
  bool Launch(void* queue, const LaunchSpec& s, std::string* error) override {
    if (LaunchQueued(queue, s, error)) return true;
    cudaStreamSynchronize(static_cast<Queue*>(queue)->stream);
    NoteSticky(static_cast<Queue*>(queue)->device);
    return false;
  }

  std::string Broken(int device) override {
    std::lock_guard lock(broken_mu_);
    const auto it = broken_.find(device);
    return it == broken_.end() ? std::string() : it->second;
  }

  // `result`, after noting a failure's sticky error (a false or null result).
  template <typename T>
  T Noted(int device, T result) {
    if (!result) NoteSticky(device);
    return result;
  }

  // A sticky error stays the last error of every later call: looked at after a failure.
  void NoteSticky(int device) {
    const cudaError_t e = cudaPeekAtLastError();
    if (!Sticky(e)) return;
    std::lock_guard lock(broken_mu_);
    broken_.emplace(device, cudaGetErrorString(e));
  }
  bool LaunchQueued(void* queue, const LaunchSpec& s, std::string* error) {
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
      const uint32_t blocks = (s.total_vertices + kThreads - 1) / kThreads;
      const auto* items = reinterpret_cast<const BatchItem*>(din);
      if (s.baseline) {
        SkinBatchKernel<true><<<blocks, kThreads, 0, q->stream>>>(items, s.items, params, s.total_vertices, out);
      } else {
        SkinBatchKernel<false><<<blocks, kThreads, 0, q->stream>>>(items, s.items, params, s.total_vertices, out);
      }
      // Checked here: a program's own checks below would take this launch's error for theirs.
      if (!Check(cudaGetLastError(), "SkinBatchKernel launch", error)) return false;
    }
    auto* states = static_cast<uint8_t*>(s.dout) + s.states_offset;  // after the normals' rows
    for (uint32_t k = 0; k < s.program_count; ++k) {
      const ProgramRun& r = s.programs[k];
      const ProgramBatch b{din + r.table_offset, r.items, params, out, states, r.limits, r.stops, r.host_table};
      if (!r.runner->RunCuda(q->stream, b, error)) return false;
    }
    if (!Check(cudaGetLastError(), "kernel launch", error)) return false;
    if (!Check(cudaMemcpyAsync(s.out, s.dout, s.out_bytes, cudaMemcpyDeviceToHost, q->stream), "cudaMemcpyAsync D2H", error)) {
      return false;
    }
    return Check(cudaEventRecord(q->stop, q->stream), "cudaEventRecord", error);
  }

  bool Wait(void* queue, double* busy_ms, std::string* error) override {
    auto* q = static_cast<Queue*>(queue);
    if (const cudaError_t e = cudaEventSynchronize(q->stop); e != cudaSuccess) {
      Check(e, "cudaEventSynchronize", error);
      if (Sticky(e)) {
        std::lock_guard lock(broken_mu_);
        broken_.emplace(q->device, cudaGetErrorString(e));
      }
      return false;
    }
    float ms = 0;
    (void)Check(cudaEventElapsedTime(&ms, q->start, q->stop), "cudaEventElapsedTime", nullptr);
    *busy_ms = ms;
    return true;
  }

 private:
  std::mutex broken_mu_;
  std::map<int, std::string> broken_;  // devices a sticky error left unusable, and why
};

}  // namespace

std::unique_ptr<DeviceApi> MakeCudaApi() { return std::make_unique<CudaApi>(); }

std::string CudaBuildInfo() {
  return "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
         " runtime (static), device code " SINEW_CUDA_ARCHS;
}

}  // namespace sinew::gpu
