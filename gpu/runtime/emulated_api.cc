// DeviceApi emulated on the CPU: "device" memory is host memory with a byte budget (an
// allocation past a device's bytes fails, as cudaMalloc's would), a launch
// runs the batch's per-vertex code and the device programs' passes (the very functions the CUDA
// kernels run) when it is waited for. Used by tests and by `sinew-server --gpu emulate` on
// machines without a GPU; never chosen automatically.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "gpu/runtime/batch.cuh"
#include "gpu/runtime/device_api.h"

namespace sinew::gpu {
namespace {

struct PendingLaunch {
  int device = 0;
  LaunchSpec spec;
  bool pending = false;
};

class EmulatedApi final : public DeviceApi {
 public:
  EmulatedApi(int devices, uint64_t bytes, uint64_t broken_after)
      : devices_(devices),
        bytes_(bytes),
        broken_after_(broken_after),
        used_(std::make_unique<std::atomic<uint64_t>[]>(devices)),
        launches_(std::make_unique<std::atomic<uint64_t>[]>(devices)) {}
  std::string kind() const override { return "emulated"; }
  int Count(std::string*) override { return devices_; }
  bool Properties(int device, std::string* name, int* major, int* minor, uint64_t* total) override {
    *name = "emulated device " + std::to_string(device);
    *major = 0;
    *minor = 0;
    *total = bytes_;
    return true;
  }
  // Each block carries its size in a header (kHeader bytes, keeping the malloc alignment).
  void* Alloc(int device, size_t bytes, std::string* error) override {
    std::atomic<uint64_t>& used = used_[device];
    uint64_t now = used.load();
    do {
      if (bytes > bytes_ - now) {
        if (error) {
          *error = "out of memory: " + std::to_string(bytes) + " bytes asked, " + std::to_string(bytes_ - now) +
                   " of the emulated device's " + std::to_string(bytes_) + " free";
        }
        return nullptr;
      }
    } while (!used.compare_exchange_weak(now, now + bytes));
    auto* block = static_cast<char*>(std::malloc(kHeader + (bytes ? bytes : 1)));
    if (block == nullptr) {
      used -= bytes;
      if (error) *error = "out of host memory emulating the device";
      return nullptr;
    }
    std::memcpy(block, &bytes, sizeof bytes);
    return block + kHeader;
  }
  void Free(int device, void* p) override {
    if (p == nullptr) return;
    char* block = static_cast<char*>(p) - kHeader;
    size_t bytes = 0;
    std::memcpy(&bytes, block, sizeof bytes);
    used_[device] -= bytes;
    std::free(block);
  }
  void* AllocHost(size_t bytes, std::string*) override { return std::malloc(bytes ? bytes : 1); }
  void FreeHost(void* p) override { std::free(p); }
  bool Upload(int, void* dst, const void* src, size_t bytes, std::string*) override {
    std::memcpy(dst, src, bytes);
    return true;
  }
  bool Download(int, void* dst, const void* src, size_t bytes, std::string*) override {
    std::memcpy(dst, src, bytes);
    return true;
  }
  bool Clear(int, void* dst, size_t bytes, std::string*) override {
    std::memset(dst, 0, bytes);
    return true;
  }
  void* CreateQueue(int device, std::string*) override {
    auto* q = new PendingLaunch();
    q->device = device;
    return q;
  }
  void DestroyQueue(void* q) override { delete static_cast<PendingLaunch*>(q); }
  bool Launch(void* queue, const LaunchSpec& spec, std::string* error) override {
    auto& l = *static_cast<PendingLaunch*>(queue);
    if (broken_after_ > 0 && ++launches_[l.device] > broken_after_) {
      if (error) *error = "kernel launch: an illegal memory access was encountered (emulated)";
      return false;
    }
    l.spec = spec;  // its programs and limits stay valid until Wait (LaunchSpec)
    l.pending = true;
    return true;
  }
  bool Wait(void* queue, double* busy_ms, std::string*) override {
    auto& l = *static_cast<PendingLaunch*>(queue);
    const auto t0 = std::chrono::steady_clock::now();
    if (l.pending) {
      const LaunchSpec& s = l.spec;
      std::memcpy(s.din, s.in, s.in_bytes);
      const char* din = static_cast<const char*>(s.din);
      const auto* items = reinterpret_cast<const BatchItem*>(din);
      const auto* params = reinterpret_cast<const float*>(din + s.params_offset);
      auto* out = static_cast<float*>(s.dout);
      for (uint32_t g = 0; g < s.total_vertices; ++g) BatchVertex(items, s.items, params, g, out);
      auto* states = static_cast<uint8_t*>(s.dout) + s.states_offset;  // after the normals' rows
      for (uint32_t k = 0; k < s.program_count; ++k) {
        const ProgramRun& r = s.programs[k];
        r.runner->RunEmulated(
            ProgramBatch{din + r.table_offset, r.items, params, out, states, r.limits, r.stops, r.host_table});
      }
      std::memcpy(s.out, s.dout, s.out_bytes);
      l.pending = false;
    }
    *busy_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return true;
  }

  std::string Broken(int device) override {
    return broken_after_ > 0 && launches_[device] > broken_after_
               ? "an illegal memory access was encountered (emulated sticky error)"
               : std::string();
  }

 private:
  static constexpr size_t kHeader = alignof(std::max_align_t);
  int devices_;
  uint64_t bytes_;
  uint64_t broken_after_;
  std::unique_ptr<std::atomic<uint64_t>[]> used_;      // per device: bytes allocated
  std::unique_ptr<std::atomic<uint64_t>[]> launches_;  // per device: launches so far
};

}  // namespace

std::unique_ptr<DeviceApi> MakeEmulatedApi(int devices, uint64_t bytes_per_device, uint64_t broken_after_launches) {
  return std::make_unique<EmulatedApi>(devices, bytes_per_device, broken_after_launches);
}

}  // namespace sinew::gpu
