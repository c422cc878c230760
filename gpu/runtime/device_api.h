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

// Host side: whether the callers of a program's items still want their frames. A program whose
// frames can run long asks between the iterations of its host loops (on the thread that runs
// it) and stops an item whose caller has given up: the item's later passes do nothing, its output
// rows and its session's device state are left part way, and the program says so (Stopped).
class ProgramStops {
 public:
  virtual bool GivenUp(uint32_t item) const = 0;
  virtual void Stopped(uint32_t item, uint32_t step) = 0;  // `step`: the program's step it was in

 protected:
  ~ProgramStops() = default;
};

// What a device program's run gets (gpu/runtime/program.h): device addresses of the batch's
// buffers and its own item table, and its per-batch limits on the host.
struct ProgramBatch {
  const void* items;    // the program's item table (device)
  uint32_t count;       // its items
  const float* params;  // the batch's parameter data (device)
  float* out;           // 3 floats per batch vertex (device)
  uint8_t* states;      // one byte per batch vertex (device)
  const void* limits;   // host: what the program's host loops are bounded by this batch
  ProgramStops* stops;  // host: asked between long loops' iterations; null: no item stops
  const void* host_items;  // host: the item table as packed (null: not kept), valid as `limits`
};

// The part of a device program the DeviceApi implementations call: its passes on a CUDA stream,
// or the same passes on the host for the emulated device.
class ProgramRunner {
 public:
  virtual bool RunCuda(void* cuda_stream, const ProgramBatch& batch, std::string* error) const = 0;
  virtual void RunEmulated(const ProgramBatch& batch) const = 0;

 protected:
  ~ProgramRunner() = default;
};

// One program's share of a batch.
struct ProgramRun {
  const ProgramRunner* runner = nullptr;
  size_t table_offset = 0;  // bytes: where its item table starts in the batch's input
  uint32_t items = 0;
  const void* limits = nullptr;  // host; valid until the launch has been waited for
  ProgramStops* stops = nullptr;  // host, the same; null: its items are never stopped
  const void* host_table = nullptr;  // host: its item table as packed, valid as `limits`
};

// One batch: what to upload, run and download.
struct LaunchSpec {
  const void* in = nullptr;  // host: the batch table, the programs' item tables, then the parameters
  void* din = nullptr;       // device copy of `in`
  size_t in_bytes = 0;
  uint32_t items = 0;           // BatchItems at the start of `in`
  size_t params_offset = 0;     // bytes: where the parameter data starts
  uint32_t total_vertices = 0;  // vertices of all items (the output rows)
  bool baseline = false;        // an item is GpuMethod::kBaseline (the per-vertex kernel with it)
  // Device programs, run in order after the per-vertex kernel; valid until Wait.
  const ProgramRun* programs = nullptr;
  uint32_t program_count = 0;
  // Output: 3 floats per vertex, then the normals' rows, then (with program items) one state
  // byte per vertex, from `states_offset` bytes on.
  void* dout = nullptr;
  void* out = nullptr;  // host
  size_t out_bytes = 0;
  size_t states_offset = 0;
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
  // Synchronous copy to the host (session snapshots: memory no batch in flight uses).
  virtual bool Download(int device, void* dst, const void* src, size_t bytes, std::string* error) = 0;
  // Zeroes device memory (session state starts from zero).
  virtual bool Clear(int device, void* dst, size_t bytes, std::string* error) = 0;
  // A stream with its events; one per in-flight batch slot.
  virtual void* CreateQueue(int device, std::string* error) = 0;
  virtual void DestroyQueue(void* queue) = 0;
  // Asynchronously on `queue`: upload the batch, run the per-vertex kernel over every item and
  // each device program over its items, download the output. When it fails (false, `error`
  // set), nothing it queued is still running.
  virtual bool Launch(void* queue, const LaunchSpec& spec, std::string* error) = 0;
  // Waits for the queue's last launch; `busy_ms` is the time it took on the device.
  virtual bool Wait(void* queue, double* busy_ms, std::string* error) = 0;
  // Why the device can no longer be used until the process restarts, once an error left it so
  // (CUDA's sticky errors: an illegal address, a failed launch, an uncorrectable ECC error);
  // empty while it can.
  virtual std::string Broken(int /*device*/) { return {}; }
};

// nullptr when Sinew was built without CUDA.
std::unique_ptr<DeviceApi> MakeCudaApi();
// What this build's GPU backend holds, for --version and deployment checks: "CUDA 13.0 runtime
// (static), device code 80-real;90" or "not built (nvcc was not found at build time)".
std::string CudaBuildInfo();
// `devices` emulated devices of `bytes_per_device` each. `broken_after_launches` > 0 (tests):
// a device's launches after that many fail as a sticky error would, and Broken says so.
std::unique_ptr<DeviceApi> MakeEmulatedApi(int devices, uint64_t bytes_per_device, uint64_t broken_after_launches = 0);

}  // namespace sinew::gpu
