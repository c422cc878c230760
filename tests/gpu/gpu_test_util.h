// Helpers shared by the GPU backend suites: which backend a test instance runs on, and a latch
// for frames completed on the device's thread.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "gpu/backend.h"

namespace sinew::gpu {

// Every GPU test runs on the machine's CUDA devices (skipped, with the reason, where there is
// none) and on the CPU emulation of a device.
enum class Kind { kCuda, kEmulated };

inline std::string Name(Kind k) { return k == Kind::kCuda ? "Cuda" : "Emulated"; }

inline absl::StatusOr<std::unique_ptr<GpuBackend>> Make(Kind kind, GpuOptions options = {}) {
  if (kind == Kind::kEmulated && options.emulate_devices == 0) options.emulate_devices = 1;
  return GpuBackend::Create(options);
}

// Waits for `remaining` frames; keeps the last error.
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 1;
  absl::Status status;
  static void Done(void* self, const absl::Status& s) {
    auto& l = *static_cast<Latch*>(self);
    std::lock_guard lock(l.mu);
    if (!s.ok()) l.status = s;
    if (--l.remaining == 0) l.cv.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return remaining == 0; });
  }
};

}  // namespace sinew::gpu
