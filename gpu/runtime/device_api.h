// The few device operations the GPU backend needs, behind one interface with two
// implementations: CUDA (runtime/cuda_api.cu) and a CPU emulation (runtime/emulated_api.cc)
// that runs the same per-vertex code on host memory, so that batching, accounting and the
// service path are tested on machines without a GPU. Plain C++ (no absl) so nvcc compiles it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace sinew::gpu {

// One session's frame inside a batch. The same bytes on host and device: pointers are device
// addresses of the rig's arrays.
struct BatchItem {
  const float* rest;         // 3 per vertex (null: no rest term)
  const uint32_t* offsets;   // vertex_count + 1 (skinning methods)
  const uint16_t* joints;
  const float* weights;
  const float* coeffs;       // vertex_count x coeff_cols, row-major (cage methods)
  uint32_t param_offset;     // first float of this item's parameters in the batch's parameter data
  uint32_t vertex_offset;    // first vertex of this item in the batch's output
  uint32_t vertex_count;
  uint32_t method;           // GpuMethod
  uint32_t coeff_cols;
  uint32_t joint_count;      // the rig's joints (kernels that read two per-joint blocks)
};
static_assert(sizeof(BatchItem) == 64);

struct ImplicitLimits;

// One batch: what to upload, run and download.
struct LaunchSpec {
  const void* in = nullptr;  // host: the batch table, the implicit items, then the parameters
  void* din = nullptr;       // device copy of `in`
  size_t in_bytes = 0;
  uint32_t items = 0;           // BatchItems at the start of `in`
  size_t params_offset = 0;     // bytes: where the parameter data starts
  uint32_t total_vertices = 0;  // vertices of all items (the output rows)
  // Implicit skinning items (gpu/implicit/program.cuh), run after the per-vertex kernel.
  size_t implicit_offset = 0;   // bytes: where the ImplicitItem table starts
  uint32_t implicit_items = 0, implicit_nodes = 0, implicit_vertices = 0;
  const ImplicitLimits* limits = nullptr;
  // Output: 3 floats per vertex, then (with implicit items) one state byte per vertex.
  void* dout = nullptr;
  void* out = nullptr;  // host
  size_t out_bytes = 0;
};

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  virtual std::string kind() const = 0;  // "cuda" or "emulated"
  // Number of devices; 0 with `error` set when none can be used.
  virtual int Count(std::string* error) = 0;
  virtual bool Properties(int device, std::string* name, int* major, int* minor,
                          uint64_t* total_bytes) = 0;
  virtual void* Alloc(int device, size_t bytes, std::string* error) = 0;
  virtual void Free(int device, void* p) = 0;
  virtual void* AllocHost(size_t bytes, std::string* error) = 0;  // pinned (page-locked)
  virtual void FreeHost(void* p) = 0;
  virtual bool Upload(int device, void* dst, const void* src, size_t bytes, std::string* error) = 0;
  // Zeroes device memory (session state starts from zero).
  virtual bool Clear(int device, void* dst, size_t bytes, std::string* error) = 0;
  // A stream with its events; one per in-flight batch slot.
  virtual void* CreateQueue(int device, std::string* error) = 0;
  virtual void DestroyQueue(void* queue) = 0;
  // Asynchronously on `queue`: upload the batch, run the per-vertex kernel over every item and
  // the implicit program over the implicit items, download the output.
  virtual bool Launch(void* queue, const LaunchSpec& spec, std::string* error) = 0;
  // Waits for the queue's last launch; `busy_ms` is the time it took on the device.
  virtual bool Wait(void* queue, double* busy_ms, std::string* error) = 0;
};

// nullptr when Sinew was built without CUDA.
std::unique_ptr<DeviceApi> MakeCudaApi();
// `devices` emulated devices of `bytes_per_device` each.
std::unique_ptr<DeviceApi> MakeEmulatedApi(int devices, uint64_t bytes_per_device);

}  // namespace sinew::gpu
