// DeviceApi emulated on the CPU: "device" memory is host memory with a byte budget, a launch
// runs the batch's per-vertex code (the very functions the CUDA kernel runs) when it is waited
// for. Used by tests and by `sinew-server --gpu emulate` on machines without a GPU; never
// chosen automatically.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "gpu/runtime/batch.cuh"
#include "gpu/runtime/device_api.h"

namespace sinew::gpu {
namespace {

struct PendingLaunch {
  const void* in;
  void* din;
  size_t in_bytes, items, joint_data_offset;
  uint32_t total;
  void* dout;
  void* out;
  bool pending = false;
};

class EmulatedApi final : public DeviceApi {
 public:
  EmulatedApi(int devices, uint64_t bytes) : devices_(devices), bytes_(bytes) {}
  std::string kind() const override { return "emulated"; }
  int Count(std::string*) override { return devices_; }
  bool Properties(int device, std::string* name, int* major, int* minor, uint64_t* total) override {
    *name = "emulated device " + std::to_string(device);
    *major = 0;
    *minor = 0;
    *total = bytes_;
    return true;
  }
  void* Alloc(int, size_t bytes, std::string*) override { return std::malloc(bytes ? bytes : 1); }
  void Free(int, void* p) override { std::free(p); }
  void* AllocHost(size_t bytes, std::string*) override { return std::malloc(bytes ? bytes : 1); }
  void FreeHost(void* p) override { std::free(p); }
  bool Upload(int, void* dst, const void* src, size_t bytes, std::string*) override {
    std::memcpy(dst, src, bytes);
    return true;
  }
  void* CreateQueue(int, std::string*) override { return new PendingLaunch(); }
  void DestroyQueue(void* q) override { delete static_cast<PendingLaunch*>(q); }
  bool Launch(void* queue, const void* in, void* din, size_t in_bytes, size_t items,
              size_t joint_data_offset, uint32_t total, void* dout, void* out, std::string*) override {
    *static_cast<PendingLaunch*>(queue) = {in, din, in_bytes, items, joint_data_offset, total, dout, out, true};
    return true;
  }
  bool Wait(void* queue, double* busy_ms, std::string*) override {
    auto& l = *static_cast<PendingLaunch*>(queue);
    const auto t0 = std::chrono::steady_clock::now();
    if (l.pending) {
      std::memcpy(l.din, l.in, l.in_bytes);
      const auto* items = static_cast<const BatchItem*>(l.din);
      const auto* joints = reinterpret_cast<const float*>(static_cast<const char*>(l.din) + l.joint_data_offset);
      for (uint32_t g = 0; g < l.total; ++g) {
        BatchVertex(items, static_cast<uint32_t>(l.items), joints, g, static_cast<float*>(l.dout));
      }
      std::memcpy(l.out, l.dout, size_t{12} * l.total);
      l.pending = false;
    }
    *busy_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return true;
  }

 private:
  int devices_;
  uint64_t bytes_;
};

}  // namespace

std::unique_ptr<DeviceApi> MakeEmulatedApi(int devices, uint64_t bytes_per_device) {
  return std::make_unique<EmulatedApi>(devices, bytes_per_device);
}

}  // namespace sinew::gpu
