// The GPU backend: device-resident rigs (uploaded once per rig and device, shared by every
// session on that rig), per-session device state, and a per-device dispatcher that gathers the
// frames of many sessions into one kernel launch (dynamic batching, like inference servers):
// the first frame of a batch waits at most `batch_window` for others to join.
//
// This header has no CUDA types, so the server includes it whether or not CUDA is present; a
// build without CUDA (or a machine without a device) makes Create return UNAVAILABLE with the
// reason, and the server runs on the CPU.
//
// Layout of a skeletal method on the device (twin of core/lbs and core/dqs):
//   rig:     rest positions float[3N], weight offsets uint32[N+1], joints uint16[E], weights float[E]
//   frame:   12 floats per joint — LBS: the row-major 3x4 skinning matrix; DQS: the dual
//            quaternion (real x,y,z,w, dual x,y,z,w), the uniform scale, its shift x,y,z
//            (core/dqs/dqs.h's DualQuat: each joint scales about its rest centre)
//   output:  float[3N], copied into the caller's buffer (float32, or converted to float16)
//
// Device programs (gpu/runtime/program.h; implicit skinning in gpu/implicit/) keep a per-rig
// model resident and per-session state on the device; a frame is a sequence of passes run for
// every session of the program in a batch at once, after the per-vertex kernel. Frames of one
// such session run one at a time, in the order they were submitted. The batcher knows kernels
// (gpu/kernels.h), not methods.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/deformer/deformer.h"
#include "core/normals/normals.h"
#include "gpu/kernels.h"
#include "core/rig/rig.h"

namespace sinew::gpu {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  uint64_t total_bytes = 0;   // device memory
  uint64_t limit_bytes = 0;   // what Sinew may use on it
  // What Sinew's rigs and sessions hold on it: what they reserved, the batch buffers included
  // (each session's room for one frame in each of the two batch slots), and whatever the batch
  // buffers hold beyond that (e.g. while a batch runs after its sessions have closed).
  uint64_t used_bytes = 0;
  uint32_t rigs = 0, sessions = 0;
  double utilisation = 0;     // fraction of the last second with a batch in flight
  uint64_t frames = 0, batches = 0;
  // Frames submitted and waiting for a batch; frames in a batch (packed, running or being
  // copied back), not yet completed.
  uint32_t queued_frames = 0, running_frames = 0;
  // Non-empty once an error left the device unusable until the server restarts (a sticky CUDA
  // error), and why: it takes no new rig or session (BACKEND_AUTO sessions open on the CPU), and
  // its sessions' frames fail saying so.
  std::string failed;
};

struct GpuOptions {
  // Bytes Sinew may use per device, every allocation counted (the batch buffers too); 0: 90 % of
  // the device's memory.
  uint64_t memory_limit_bytes = 0;
  // How long the first frame of a batch waits for frames of other sessions.
  std::chrono::microseconds batch_window{0};  // 0: frames queued during a batch form the next
  // A batch closes early once it holds this many vertices.
  uint64_t max_batch_vertices = uint64_t{1} << 24;
  // Tests and machines without a GPU: this many devices emulated on the CPU (the kernels'
  // per-vertex code run on host memory), each with `emulate_bytes` of memory. 0: real CUDA.
  int emulate_devices = 0;
  uint64_t emulate_bytes = uint64_t{1} << 30;
  // Tests: an emulated device's launches after this many fail as a sticky CUDA error would
  // (DeviceApi::Broken). 0: never.
  uint64_t emulate_broken_after_launches = 0;
};

// Floats per joint in a frame's joint data.
inline constexpr size_t kJointFloats = 12;

// Output conversion applied when a frame's result is copied to the caller.
enum class OutputFormat { kFloat32, kFloat16 };

// Called once per submitted frame, from the device's completion thread, after the output has
// been written (or with the error that prevented it).
using FrameDone = void (*)(void* context, const absl::Status& status);

class GpuRig;
class GpuSession;
class GpuCoefficients;
class GpuModel;
class GpuMesh;
class Device;

// What a session runs on the device.
struct SessionSpec {
  GpuMethod method = GpuMethod::kLbs;
  std::shared_ptr<GpuCoefficients> coefficients;  // cage and blend stages
  bool with_rest = true;  // cage stages: add the rest positions (others need them: INVALID_ARGUMENT)
  std::shared_ptr<GpuModel> model;                // device programs (UploadModel)
  // The method's parameters; device programs read theirs (e.g. implicit stages: an
  // ImplicitConfig, its defaults when null).
  std::shared_ptr<const MethodParams> params;
  // Kernels whose frame size is the method's (KernelInfo::method_frame): its floats per frame
  // (Deformer::device_param_count).
  uint32_t frame_floats = 0;
};

// Where a frame's results go. Every pointer must stay valid until the frame's `done`.
struct FrameOutput {
  void* positions = nullptr;  // 3 floats, or 3 halves, per vertex
  OutputFormat format = OutputFormat::kFloat32;
  uint8_t* states = nullptr;  // device programs: one state byte per vertex (null: not wanted)
  // Per-vertex unit normals of the deformed mesh (float32 x,y,z; null: not wanted), computed
  // on the device from the rig's triangles `mesh` (UploadMesh).
  float* normals = nullptr;
  const GpuMesh* mesh = nullptr;
  // Load shedding: a frame still queued for a batch at this time is not run; `done` gets
  // DEADLINE_EXCEEDED (saying how long it waited) and nothing is written. Only frames of sessions
  // without device state (no device program) are ever dropped: a program's frames always run,
  // in order, since its state goes on from each. max(): never dropped.
  std::chrono::steady_clock::time_point shed_after = std::chrono::steady_clock::time_point::max();
  // Device programs with long frames (the elastic implicit method): asked on the device's thread
  // between the frame's long loops (ProgramStops); once it says true the frame ends there and
  // `done` gets CANCELLED naming the step. Its outputs are then not written, and its session's
  // device state is left part way: the host must start the session's next frame from rest.
  // Must stay valid until `done`; null: never stopped.
  const StopFn* stop = nullptr;
};

class GpuBackend {
 public:
  // UNAVAILABLE (with the reason: not built with CUDA, no device, driver too old) when there is
  // no usable device.
  static absl::StatusOr<std::unique_ptr<GpuBackend>> Create(const GpuOptions& options);
  ~GpuBackend();

  std::vector<DeviceInfo> Devices() const;
  // Why device `index` is unusable until the server restarts; empty while it is usable (or no
  // such device).
  std::string DeviceFailed(int index) const;

  // Puts the rig's arrays on the device with the most free budget (the next freest where that
  // one's budget is taken meanwhile). RESOURCE_EXHAUSTED when no device can hold it within its
  // limit.
  absl::StatusOr<std::shared_ptr<GpuRig>> Upload(const Rig& rig);

  // A dense row-major coefficient matrix (rows = the rig's vertices) on the rig's device, for
  // the cage stages (e.g. mean value coordinates), shared by the sessions that use it.
  absl::StatusOr<std::shared_ptr<GpuCoefficients>> UploadCoefficients(const GpuRig& rig,
                                                                      const std::vector<float>& values,
                                                                      uint32_t cols);

  // A device program's per-rig model (`prepared`: the core data of the method's DeviceStage,
  // e.g. an ImplicitModel prepared for `rig`) on the rig's device, shared by the sessions that
  // use it. FAILED_PRECONDITION when the program cannot run it (e.g. a composition tree deeper
  // than it evaluates), RESOURCE_EXHAUSTED over the memory limit, INTERNAL when `kernel` is not
  // a device program.
  absl::StatusOr<std::shared_ptr<GpuModel>> UploadModel(std::shared_ptr<GpuRig> rig, GpuMethod kernel,
                                                        const Prepared& prepared);

  // The rig's vertex → triangle adjacency (core's VertexNormals, not empty) on the rig's device,
  // for frames that want normals; shared by the rig's sessions.
  absl::StatusOr<std::shared_ptr<GpuMesh>> UploadMesh(const GpuRig& rig, const VertexNormals& normals);

  // Per-session state on the rig's device (its share of the batch buffers is reserved here,
  // and a device program's session state). Kernels with coefficients need spec.coefficients,
  // device programs spec.model.
  absl::StatusOr<std::unique_ptr<GpuSession>> CreateSession(std::shared_ptr<GpuRig> rig, const SessionSpec& spec);
  absl::StatusOr<std::unique_ptr<GpuSession>> CreateSession(
      std::shared_ptr<GpuRig> rig, GpuMethod method,
      std::shared_ptr<GpuCoefficients> coefficients = nullptr, bool with_rest = true);

  // Adds room for the normals' rows to the session's share of the batch buffers, once (the first
  // frame that wants normals does it otherwise, and fails alone where it cannot).
  // RESOURCE_EXHAUSTED over the memory limit.
  absl::Status ReserveNormals(GpuSession& session);

  // Queues one frame. `params` (GpuSession::param_count() floats; device programs: as many as
  // the deformer's DeviceFrame wrote, checked by the program) is copied before Submit returns;
  // `out` must stay valid until `done` is called (3 floats, or 3 halves, per vertex), and so must
  // `states` (device programs: one state byte per vertex, e.g. implicit skinning's VertexState;
  // null: not wanted).
  void Submit(GpuSession& session, std::span<const float> params, void* out, OutputFormat format,
              FrameDone done, void* context, uint8_t* states = nullptr);
  // The same with every output; normals need output.mesh uploaded for the session's rig.
  void Submit(GpuSession& session, std::span<const float> params, const FrameOutput& output, FrameDone done,
              void* context);
  // A device program session's saved state (ProgramState::resident: the floats its method's
  // Deformer::SaveDeviceState reads), copied once the session's queued and in-flight frames are
  // done; the caller submits none meanwhile (a host holds the session's lock). WriteState puts
  // such floats back (as many as ReadState gives). UNIMPLEMENTED for sessions whose kernel keeps
  // no saveable state.
  absl::StatusOr<std::vector<float>> ReadState(GpuSession& session);
  absl::Status WriteState(GpuSession& session, std::span<const float> floats);

 private:
  explicit GpuBackend(std::vector<std::unique_ptr<Device>> devices);
  std::vector<std::unique_ptr<Device>> devices_;
};

// Device-resident rig (shared). Freed, and its bytes returned to the device budget, when the
// last reference goes.
class GpuRig {
 public:
  virtual ~GpuRig() = default;
  virtual int device() const = 0;
  virtual uint64_t bytes() const = 0;
  virtual size_t vertex_count() const = 0;
  virtual size_t joint_count() const = 0;
};

class GpuCoefficients {
 public:
  virtual ~GpuCoefficients() = default;
  virtual uint32_t cols() const = 0;
  virtual uint64_t bytes() const = 0;
};

// A device program's per-rig model on a device (shared).
class GpuModel {
 public:
  virtual ~GpuModel() = default;
  virtual int device() const = 0;
  virtual uint64_t bytes() const = 0;  // without what it shares with other rigs' models
};

// A rig's triangle adjacency on its device (shared).
class GpuMesh {
 public:
  virtual ~GpuMesh() = default;
  virtual uint64_t bytes() const = 0;
};

class GpuSession {
 public:
  virtual ~GpuSession() = default;
  virtual int device() const = 0;
  virtual uint64_t bytes() const = 0;  // device bytes reserved for this session
  virtual GpuMethod method() const = 0;
  virtual size_t param_count() const = 0;  // floats of parameters per frame (programs: of one step)
};

}  // namespace sinew::gpu
