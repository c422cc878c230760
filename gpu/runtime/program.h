// A device program: a method's multi-pass frame on the device, for methods that a per-vertex
// kernel (gpu/runtime/batch.cuh) cannot express — a per-rig model resident on the device,
// per-session state that persists between frames, passes that must see all of a session's nodes
// finished before they go on. Implicit skinning (gpu/implicit/) is one.
//
// The batcher (gpu/backend.cc) knows only this interface: it uploads a program's per-rig model
// once per rig and device, creates each session's state, lets a session have at most one frame
// in flight, packs one item per frame into the program's table and hands the batch to the
// program, which runs after the per-vertex kernel. The program's own code lives in its folder:
// its host side implements DeviceProgram, its passes run on a CUDA stream and on the emulated
// device (ProgramRunner, gpu/runtime/device_api.h). A kernel names its program in gpu/kernels.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/deformer/deformer.h"
#include "gpu/runtime/device_api.h"
#include "gpu/runtime/kernels.h"

namespace sinew::gpu {

// A resident rig's skinning arrays (device addresses), which a program's model may point into;
// the backend keeps the rig alive while the model is.
struct RigOnDevice {
  const float* rest = nullptr;
  const uint32_t* offsets = nullptr;
  const uint16_t* joints = nullptr;
  const float* weights = nullptr;
  uint32_t vertex_count = 0, joint_count = 0;
};

// The device a program's data lives on: its allocations and its byte budget. Outlives every
// model and state made on it.
class ProgramDevice {
 public:
  virtual int index() const = 0;
  virtual DeviceApi& api() = 0;
  // Takes `bytes` from the device's budget, or RESOURCE_EXHAUSTED naming `what` and the flag.
  virtual absl::Status Reserve(uint64_t bytes, std::string_view what) = 0;
  virtual void Release(uint64_t bytes) = 0;
  // A per-device object shared by the models of every rig (e.g. lookup tables), keyed by `key`:
  // made by `make` on first use, kept while anyone holds it, made again after.
  using MakeShared = std::function<absl::StatusOr<std::shared_ptr<const void>>()>;
  virtual absl::StatusOr<std::shared_ptr<const void>> Shared(const void* key, const MakeShared& make) = 0;

 protected:
  ~ProgramDevice() = default;
};

// A program's per-rig model on one device (shared by the sessions on that rig). Returns its
// bytes to the budget when destroyed.
class ProgramModel {
 public:
  virtual ~ProgramModel() = default;
  virtual uint64_t bytes() const = 0;
};

// One session's state on the device. Returns its bytes to the budget when destroyed.
class ProgramState {
 public:
  virtual ~ProgramState() = default;
  virtual uint64_t bytes() const = 0;
  virtual size_t frame_floats() const = 0;  // parameters of a frame of one step
  // The floats a snapshot of the session holds (the method's Deformer::SaveDeviceState reads
  // them in its program's layout), at the start of its device memory; null/0: not saveable.
  virtual void* resident() const { return nullptr; }
  virtual uint64_t resident_bytes() const { return 0; }
};

class DeviceProgram : public ProgramRunner {
 public:
  // The per-rig model from core's prepared data (Prepared of the method's DeviceStage).
  // FAILED_PRECONDITION when the program cannot run it, RESOURCE_EXHAUSTED over the budget.
  virtual absl::StatusOr<std::shared_ptr<ProgramModel>> UploadModel(ProgramDevice& device, const RigOnDevice& rig,
                                                                    const Prepared& prepared) const = 0;
  // A session's state (zeroed: its first frame starts from scratch) for `kernel` (a program may
  // serve several) with the method's parameters (null: the defaults).
  virtual absl::StatusOr<std::unique_ptr<ProgramState>> CreateState(ProgramDevice& device, GpuMethod kernel,
                                                                    std::shared_ptr<ProgramModel> model,
                                                                    const MethodParams* params) const = 0;
  // OK when `params` is a frame this session can run (INTERNAL naming the mismatch).
  virtual absl::Status CheckFrame(const ProgramState& state, std::span<const float> params) const = 0;

  // Packing a batch: `limits_bytes` of limits are initialised by BeginBatch, then every frame
  // of the program writes its item (`item_bytes`: the size of the program's item type; the
  // table is an array of them, 16-byte aligned) and updates the limits.
  // `vertex_offset`/`param_offset`: where the frame's output rows and parameters sit in the batch.
  virtual size_t item_bytes() const = 0;
  virtual size_t limits_bytes() const = 0;
  virtual void BeginBatch(void* limits) const = 0;
  virtual void Pack(const ProgramState& state, const float* params, uint32_t vertex_offset, uint32_t param_offset,
                    void* item, void* limits) const = 0;

 protected:
  ~DeviceProgram() = default;
};

}  // namespace sinew::gpu
