// The one interface through which the server (or any host) runs a deformation method.
//
// A method is prepared once per session from an immutable, shared Rig and then evaluated per
// frame into a caller-owned buffer. Per-session state (scratch, simulation state) lives in the
// Deformer object; the Rig is never modified and is shared by every session on it.
//
// Nothing here knows a particular method: a method is a MethodInfo (name, parameters, inputs,
// factory) registered by one line in deformer/registry.cc, and everything else of it lives in
// its folder core/<method>/ (and gpu/<method>/ for a device kernel). docs/adding-a-method.md
// is the checklist.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "absl/status/statusor.h"
#include "core/deformer/params.h"
#include "core/parallel/thread_pool.h"
#include "core/rig/pose.h"
#include "core/rig/rig.h"

namespace sinew {

// A session's deformer: a registered method (by name) and that method's own parameters, or a
// pipeline of such stages.
struct DeformerConfig {
  DeformerConfig() = default;
  DeformerConfig(std::string method, std::shared_ptr<const MethodParams> params = nullptr)  // NOLINT: {"lbs"}
      : method(std::move(method)), params(std::move(params)) {}

  std::string method;  // MethodInfo::name, e.g. "lbs"
  // The method's parameters struct (core/<method>/); null: the method's defaults. A host that
  // does not know the method's types makes it with ParseDeformerConfig.
  std::shared_ptr<const MethodParams> params;
  // A pipeline (method empty): the stages in order, each deforming the positions of the one
  // before (see StageInput and core/deformer/pipeline.h). Stages do not nest.
  std::vector<DeformerConfig> stages;
};

// How a method uses the positions of the stage before it in a pipeline.
enum class StageInput : uint8_t {
  kFirst,  // it cannot follow another stage (it deforms the rig's rest mesh itself)
  kRest,   // it deforms them as its rest mesh (skinning after a cage: SuperCages' hybrid)
  kPosed,  // it corrects them: they replace its own starting point (implicit skinning after DQS)
};

// The method's parameters from `config` (its defaults when none were given). Methods call it
// with their own struct; CreateDeformer has checked that the struct is the method's.
template <class P>
const P& ParamsOf(const DeformerConfig& config) {
  static const P kDefaults{};
  const auto* p = dynamic_cast<const P*>(config.params.get());
  return p != nullptr ? *p : kDefaults;
}

// Asked by a long frame whether to stop (FrameInput::stop); it may be called from the frame's
// pool threads, several at once, so it must be thread-safe. Once it has said true, the frame
// stops (a method remembers the answer).
using StopFn = std::function<bool()>;

// The inputs of one frame. Pointers and spans refer to caller-owned data that stays valid
// during Deform.
struct FrameInput {
  const Pose* pose = nullptr;
  std::span<const CageFrame> cages;
  const CageFrame* posed_cage = nullptr;  // SuperCages: an edit of the current-pose cage
  // Methods with dynamics (pbs with jiggle): seconds since the previous frame; 0: the method's
  // own default (its time_step parameter); else at least 1e-6 s (shorter steps overflow the
  // velocities of methods with dynamics), finite. Hosts check it; pbs checks it again.
  double time_step = 0;
  // Point-set methods (baseline skinning): the sphere-mesh posed explicitly, or its radii edited
  // with a skeleton pose (core/rig/pose.h).
  const SphereFrame* spheres = nullptr;
  // Whether the host wants this frame stopped (its call cancelled, or past the client's
  // deadline), asked between a long frame's iterations; a method that stops returns CANCELLED, a
  // stateful one with its state as before the frame. The elastic implicit method (up to 1 024
  // sub-steps of up to 1 000 relaxation rounds each) asks before every round and after every
  // sub-step, pbs (up to 1 000 sweeps over up to 400k particles: about a minute) before every
  // sweep and recovery pass; other methods' frames are bounded by their parameters' limits and
  // finish. Null: never stop.
  const StopFn* stop = nullptr;
};

// Optional per-frame outputs besides the positions; null members are not wanted.
struct FrameExtras {
  std::vector<float>* posed_cage = nullptr;  // x,y,z per cage vertex
  std::vector<float>* rest_cage = nullptr;   // x,y,z per cage vertex
  std::vector<float>* joints = nullptr;      // x,y,z per joint
  // One status byte per vertex; the method defines the values (e.g. implicit skinning's
  // VertexState).
  std::vector<uint8_t>* vertex_states = nullptr;
  // x,y,z per vertex: the rig's uploaded normals moved by the method (point sets, which have no
  // triangles to take normals from; meshes: core/normals/normals.h from the positions).
  std::vector<float>* normals = nullptr;
  // Point-set methods that carry points over a surface (baseline skinning): x,y,z per point, the
  // point's base point on the posed sphere-mesh (points moved rigidly: the point itself).
  std::vector<float>* base_points = nullptr;
};

// The per-vertex stage of a method that a device (gpu/) can run; everything before it (pose
// decoding, forward kinematics, cage solves) stays on the CPU. Core knows nothing of devices:
// this only names the stage's device kernel and describes its data. The kernels and their
// per-frame parameter layouts are listed in gpu/runtime/kernels.h.
class Prepared;

struct DeviceStage {
  std::string_view kernel;  // e.g. "lbs", "cage+dqs", "implicit"; empty: no device stage
  bool with_rest = true;
  // Names the stage's per-rig device data (a coefficient matrix, an implicit model) so that the
  // sessions of one rig share one device copy (empty: none).
  std::string device_data_key;
  // Per-rig data the kernel keeps resident on the device (e.g. implicit skinning's model).
  std::shared_ptr<const Prepared> model;
  // The device produces the per-vertex states (FrameExtras::vertex_states) itself.
  bool device_vertex_states = false;
  // The device reads the method's parameters from every frame (DeviceFrame writes them), so
  // SetParams changes a device session's parameters too.
  bool params_per_frame = false;
  // A stateful method keeps its session's history on the device (pbs's particles, the elastic
  // implicit method's nodes): a host snapshots such a session with SaveDeviceState/LoadDeviceState
  // and the device's copy, the others (whose history stays on the host) with SaveState/LoadState.
  bool state_on_device = false;
};

// Data a method precomputes once per rig (and configuration), shared read-only by every
// session of that method on that rig.
class Prepared {
 public:
  virtual ~Prepared() = default;
  virtual size_t Bytes() const = 0;
  // What it holds, for people (a host shows it with the preparation); empty: nothing to say.
  virtual std::string Summary() const { return {}; }
};

// Progress of a long preparation, in [0, 1]. Returns false when the caller wants the preparation
// to stop: the method then returns CANCELLED at its next check. Checks come at least between
// stages and between chunks of its parallel loops (swing-twist: inside each joint's solves,
// between its iterations; cage-mvc, cage-green and supercages: every 16-512 vertices; implicit:
// between stages and field grids). It is called from the pool's threads, several at once: it
// must be thread-safe, and the fractions may arrive out of order.
using ProgressFn = std::function<bool(double)>;

class Deformer {
 public:
  virtual ~Deformer() = default;
  // Deforms one frame: writes x,y,z per rig vertex into `out` (3 * vertex_count floats).
  // Validates the frame's inputs first; INVALID_ARGUMENT names the field and index. Calls on
  // one Deformer must not overlap; different Deformers may run concurrently. `pool` may be
  // null (single-threaded).
  virtual absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) = 0;
  // After a successful Deform: fills the wanted extras. FAILED_PRECONDITION for extras the
  // method does not have.
  virtual absl::Status Extras(const FrameExtras& extras) const;
  // Whether the method has `wanted`'s extras, asked before a frame and computing nothing: OK, or
  // the FAILED_PRECONDITION Extras would give. A host refuses a frame that asks for an extra the
  // method lacks before deforming it (a stateful session's history must not move on for a frame
  // that is refused). The default: none, as Deformer::Extras says.
  virtual absl::Status Offers(const FrameExtras& wanted) const;
  // In a pipeline: deforms with `in` (3 floats per vertex, the previous stage's output, not
  // overlapping `out`) used as the method's StageInput says. FAILED_PRECONDITION for methods
  // that cannot follow a stage.
  virtual absl::Status DeformAfter(const FrameInput& frame, std::span<const float> in, std::span<float> out,
                                   ThreadPool* pool);
  // Stateful methods: forget the history; the next frame starts from the rest state.
  virtual void Reset() {}
  // Stateful methods: the session's state as bytes, and back, so that a host can snapshot a
  // session and restore it into a deformer made from the same rig and configuration (on another
  // host, with the same kind of backend) to continue bit for bit. A host asks only stateful
  // sessions. UNIMPLEMENTED for methods that cannot yet; LoadState refuses bytes that do not fit
  // this deformer (INVALID_ARGUMENT, DATA_LOSS) and then leaves its state as it was.
  virtual absl::StatusOr<std::string> SaveState() const;
  virtual absl::Status LoadState(std::string_view bytes);
  // The same for a session whose state lives on a device (DeviceStage::state_on_device): `resident` holds the
  // device state's floats (gpu::ProgramState::resident, laid out by the method's device program)
  // and the bytes are SaveState's; LoadDeviceState writes into `resident` (sized by the host to
  // the device's) what the host then puts on the device. UNIMPLEMENTED for methods that cannot.
  virtual absl::StatusOr<std::string> SaveDeviceState(std::span<const float> resident) const;
  virtual absl::Status LoadDeviceState(std::string_view bytes, std::span<float> resident);
  // Changes the method's parameters during a session (e.g. stiffnesses while a clip plays), from
  // the next frame on, keeping the session's state. The host has checked that `config` is the
  // same method with the same PrepareKey (the same prepared data). UNIMPLEMENTED for methods
  // whose parameters are fixed at creation; an error leaves the old parameters.
  virtual absl::Status SetParams(const DeformerConfig& config);
  // Bytes held per session (state and scratch), excluding the shared rig.
  virtual size_t StateBytes() const = 0;

  // Device execution (see DeviceStage). A method with a stage runs DeviceFrame instead of
  // Deform: it validates the frame, does all but the per-vertex stage (Extras then work as
  // after Deform, except the vertex states of a stage that makes them on the device) and writes
  // the stage's parameters to `params`, resized to their count (frames of some methods vary;
  // the vector allocates only when it grows).
  virtual DeviceStage device_stage() const { return {}; }
  // The usual parameter count of a frame (a capacity hint).
  virtual size_t device_param_count() const { return 0; }
  // The stage's per-vertex coefficient matrix (rows = vertices, row-major): cage coordinates,
  // blend weights; shared on the device by the sessions with the same device_data_key.
  virtual void DeviceCoefficients(std::vector<float>& values, uint32_t& cols) const;
  virtual absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params);
  // Tells a deformer that its host runs it through DeviceFrame only: it may free the scratch
  // that only Deform uses (StateBytes then reports what is left). Deform still works after it,
  // allocating that scratch again.
  virtual void RunsOnDevice() {}
  // Whether the device's copy of this method's state can leave float's range (pbs's jiggle
  // dynamics under time steps that change by orders of magnitude). After a device frame whose
  // positions left it, the host then starts the session again from rest (Reset), as Deform
  // does by itself on the CPU.
  virtual bool DeviceStateCanDiverge() const { return false; }
  // The method that produced the last frame when it was not this deformer's own (a host serving a
  // fallback while the method's preparation runs, see MethodInfo::fallback); empty otherwise.
  virtual std::string_view produced_by() const { return {}; }
};

// Precomputation of a method for one rig; may take seconds (reports progress) and runs once per
// rig and PrepareKey. Null for methods that need none.
using PrepareFn = absl::StatusOr<std::shared_ptr<const Prepared>> (*)(
    const Rig& rig, const DeformerConfig& config, ThreadPool* pool, const ProgressFn& progress);
// The part of the configuration the prepared data depends on (e.g. "cage=0").
using PrepareKeyFn = std::string (*)(const DeformerConfig& config);
// A preparation as bytes, so that a host can keep it across restarts (e.g. a server's cache
// directory), and back: the rig and configuration it was made for are the host's to match (by
// rig id and PrepareKey); Load checks the bytes against the rig and refuses (INVALID_ARGUMENT,
// DATA_LOSS) what does not fit.
using SavePreparedFn = std::string (*)(const Prepared& prepared);
using LoadPreparedFn = absl::StatusOr<std::shared_ptr<const Prepared>> (*)(const Rig& rig, const DeformerConfig& config,
                                                                          std::string_view bytes);
// What a configuration needs of the rig (weights, triangles, the cage or joints it names),
// checked cheaply, before a host asks for the preparation: a configuration refused here leaves
// no failed preparation behind. (A host keeps a failed preparation under its key, so that it is
// not retried; a key need not hold every parameter a refusal depends on, so a refused joint list
// would otherwise be reported to later sessions that never sent it.) The preparation checks the
// same again for callers that do not use this.
using CheckConfigFn = absl::Status (*)(const Rig& rig, const DeformerConfig& config);
using DeformerFactory = absl::StatusOr<std::unique_ptr<Deformer>> (*)(
    std::shared_ptr<const Rig> rig, std::shared_ptr<const Prepared> prepared,
    const DeformerConfig& config);

// What a method reads from a frame (FrameInput); hosts show it and check it.
enum FrameInputs : uint32_t {
  kInputPose = 1,       // FrameInput::pose
  kInputCages = 2,      // FrameInput::cages
  kInputPosedCage = 4,  // FrameInput::posed_cage
  kInputSpheres = 8,    // FrameInput::spheres
};
// "pose", "cages", "posed_cage", "spheres" for the bits set in `inputs`.
std::vector<std::string_view> FrameInputNames(uint32_t inputs);

// Parses a checked ParamSet (see CheckParams) into the method's own parameters struct.
// INVALID_ARGUMENT names the field (`field` + "." + name).
using ParseParamsFn = absl::StatusOr<std::shared_ptr<const MethodParams>> (*)(const ParamSet& set,
                                                                              std::string_view field);

struct MethodInfo {
  // The method's number on the wire (sinew.v1.Method); unique, never reused.
  uint32_t id = 0;
  std::string_view name;  // short lowercase name: "lbs"
  std::string_view description;
  bool stateful = false;  // frames depend on earlier frames of the session (see Deformer::Reset)
  // A frame's cost grows with how far the inputs moved since the last frame (the elastic implicit
  // method's sub-steps: microseconds at rest, seconds or more for a deep jump), so a host cannot
  // judge a frame's cost by the last one's (the server's --inline-frame-us).
  bool cost_follows_motion = false;
  // Stateful only with some parameters (e.g. swing-twist's unwrap_twist): null, or true for those.
  bool (*stateful_with)(const DeformerConfig& config) = nullptr;
  DeformerFactory create = nullptr;
  PrepareFn prepare = nullptr;
  PrepareKeyFn prepare_key = nullptr;
  CheckConfigFn check = nullptr;  // optional, with prepare (see CheckConfigFn)
  // Optional: preparations worth keeping on disk (minutes to compute).
  SavePreparedFn save_prepared = nullptr;
  LoadPreparedFn load_prepared = nullptr;
  bool device_stage = false;  // its deformers have a DeviceStage (a GPU backend can run them)
  // Methods with the same non-empty group share their preparations (same PrepareFn and key).
  std::string_view prepare_group = {};
  uint32_t inputs = kInputPose;  // FrameInputs bits
  // Parameters: the name of the method's parameters message in the wire's DeformerConfig
  // (empty: none), what they are, their parser and the struct it makes.
  std::string_view params_field = {};
  std::span<const ParamSpec> params = {};
  ParseParamsFn parse = nullptr;
  const std::type_info* params_type = nullptr;
  // Per-vertex outputs besides the positions that the method can return (FrameExtras names).
  bool vertex_states = false;
  // In a pipeline: what it makes of the previous stage's positions (Deformer::DeformAfter).
  StageInput follows = StageInput::kFirst;
  // A method without preparation that a host may serve while this method's preparation runs in
  // the background (e.g. "dqs"), switching at the first frame after it is done; empty: sessions
  // wait for the preparation.
  std::string_view fallback = {};
};
std::string_view StageInputName(StageInput input);  // "first", "rest", "posed"

// Every registered method.
std::span<const MethodInfo> Methods();
// nullptr when the method is not registered.
const MethodInfo* FindMethodById(uint32_t id);
const MethodInfo* FindMethod(std::string_view name);

// The config of `method` with parameters from `set`, checked against the method's ParamSpecs and
// parsed by it. INVALID_ARGUMENT names the field under `field` (e.g. "deformer.implicit").
absl::StatusOr<DeformerConfig> ParseDeformerConfig(const MethodInfo& method, const ParamSet& set,
                                                   std::string_view field);

// Prepares (when the method needs it, without caching) and creates `config.method` on `rig`.
// INVALID_ARGUMENT for an unknown method or parameters of another method; FAILED_PRECONDITION when the rig lacks what the method needs (e.g.
// skinning weights, a cage). Hosts that share preparations between sessions call
// MethodInfo::prepare and ::create themselves.
absl::StatusOr<std::unique_ptr<Deformer>> CreateDeformer(std::shared_ptr<const Rig> rig,
                                                         const DeformerConfig& config,
                                                         ThreadPool* pool = nullptr);

}  // namespace sinew
