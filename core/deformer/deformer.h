// The one interface through which the server (or any host) runs a deformation method.
//
// A method is prepared once per session from an immutable, shared Rig and then evaluated per
// frame into a caller-owned buffer. Per-session state (scratch, simulation state) lives in the
// Deformer object; the Rig is never modified and is shared by every session on it.
//
// Adding a method: implement a Deformer in the method's folder (core/<method>/), give it a
// factory, and add one line to the table in deformer/registry.cc.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/parallel/thread_pool.h"
#include "core/rig/pose.h"
#include "core/rig/rig.h"

namespace sinew {

enum class Method {
  kLbs = 1,
  kDqs = 2,
  kCageMvc = 3,
  kCageGreen = 4,
  kSuperCages = 5,
  kImplicit = 6,         // implicit skinning, history-independent (seed 000, [VBG+13])
  kElasticImplicit = 7,  // elastic implicit skinning, history-dependent ([VGB+14])
};

// How implicit skinning composes the fields of the two bones that meet at a joint (seed 000
// §2.5): max, clean union, contact (g_dc) or bulge in contact (g_db).
enum class JointOperator : uint8_t { kUnion = 1, kCleanUnion = 2, kContact = 3, kBulge = 4 };

struct ImplicitConfig {
  // The operator of every joint not listed in joint_operators; contact is the thesis' default.
  JointOperator default_operator = JointOperator::kContact;
  std::vector<std::pair<uint32_t, JointOperator>> joint_operators;  // (child joint, operator)
  // Tracking (both variants).
  double sigma = 0.35;                 // Newton step damping
  uint32_t max_iterations = 40;        // projection steps per frame (IS) or per sub-step (EIS)
  double contact_angle_degrees = 55;   // gradient jump that stops a vertex at a contact
  uint32_t smoothing_iterations = 3;   // IS: β-weighted Laplacian steps at contacts
  // EIS.
  uint32_t relaxation_iterations = 40;  // conjugate-gradient iterations per relaxation round
  double min_substep_radians = 0.1;     // floor of the sub-step rule (bend / 3)
  uint32_t max_substeps = 32;
};

struct DeformerConfig {
  Method method = Method::kLbs;
  uint32_t cage = 0;  // cage methods: index into Rig::cages
  // SuperCages.
  Method skinning = Method::kLbs;  // kLbs or kDqs
  bool skeleton_updater = true;
  double localisation_exponent = 0.1;  // s in L = -1 + w^s + (1 - w)^s (thesis eq. 3.3)
  ImplicitConfig implicit = {};  // kImplicit, kElasticImplicit
};

// The inputs of one frame. Pointers and spans refer to caller-owned data that stays valid
// during Deform.
struct FrameInput {
  const Pose* pose = nullptr;
  std::span<const CageFrame> cages;
  const CageFrame* posed_cage = nullptr;  // SuperCages: an edit of the current-pose cage
};

// Optional per-frame outputs besides the positions; null members are not wanted.
struct FrameExtras {
  std::vector<float>* posed_cage = nullptr;  // x,y,z per cage vertex
  std::vector<float>* rest_cage = nullptr;   // x,y,z per cage vertex
  std::vector<float>* joints = nullptr;      // x,y,z per joint
  // Implicit skinning: one VertexState per vertex.
  std::vector<uint8_t>* vertex_states = nullptr;
};

// Per-vertex outcome of implicit skinning's tracking.
enum class VertexState : uint8_t {
  kFree = 0,       // outside every field (follows the initial skinning)
  kConverged = 1,  // on its iso-surface
  kContact = 2,    // stopped at a contact (gradient jump or loss of monotonicity)
  kNullGradient = 3,
  kMaxIterations = 4,
  kReseeded = 5,   // left its own bone's field: restarted from (kept at) dual quaternion skinning
};

// The per-vertex stage of a method that a device (gpu/) can run; everything before it (pose
// decoding, forward kinematics, cage solves) stays on the CPU. Core knows nothing of devices:
// this only describes the stage and its per-frame parameters.
enum class DeviceStageKind {
  kNone,         // the method has no device stage
  kLbs,          // parameters: 12 floats per joint (row-major 3x4 skinning matrix)
  kDqs,          // parameters: 12 floats per joint (dual quaternion, scale, 3 zeros)
  kCage,         // out = rest (if with_rest) + coefficients · parameters (3 floats per column)
  kCageThenLbs,  // the cage stage moves the rest point, then LBS: parameters cage, then joints
  kCageThenDqs,
  // Implicit skinning's whole per-vertex part (DQS, marching, relaxation, smoothing) on the
  // device, with the per-rig model resident there; parameters as core/implicit/device_layout.h.
  kImplicit,
  kElasticImplicit,  // the same for the elastic method, whose tracking state stays on the device
};

class Prepared;

struct DeviceStage {
  DeviceStageKind kind = DeviceStageKind::kNone;
  bool with_rest = true;
  // Names the stage's per-rig device data (a coefficient matrix, an implicit model) so that the
  // sessions of one rig share one device copy (empty: none).
  std::string device_data_key;
  // Implicit stages: the per-rig model the device keeps resident (an ImplicitModel).
  std::shared_ptr<const Prepared> model;
  // The device produces the per-vertex states (FrameExtras::vertex_states) itself.
  bool device_vertex_states = false;
};

// Data a method precomputes once per rig (and configuration), shared read-only by every
// session of that method on that rig.
class Prepared {
 public:
  virtual ~Prepared() = default;
  virtual size_t Bytes() const = 0;
};

// Progress of a long preparation, in [0, 1].
using ProgressFn = std::function<void(double)>;

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
  // Stateful methods: forget the history; the next frame starts from the rest state.
  virtual void Reset() {}
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
  // The stage's coefficient matrix (rows = vertices, row-major), for cage stages.
  virtual void DeviceCoefficients(std::vector<float>& values, uint32_t& cols) const;
  virtual absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params);
  // Tells a deformer that its host runs it through DeviceFrame only: it may free the scratch
  // that only Deform uses (StateBytes then reports what is left). Deform still works after it,
  // allocating that scratch again.
  virtual void RunsOnDevice() {}
};

// Precomputation of a method for one rig; may take seconds (reports progress) and runs once per
// rig and PrepareKey. Null for methods that need none.
using PrepareFn = absl::StatusOr<std::shared_ptr<const Prepared>> (*)(
    const Rig& rig, const DeformerConfig& config, ThreadPool* pool, const ProgressFn& progress);
// The part of the configuration the prepared data depends on (e.g. "cage=0").
using PrepareKeyFn = std::string (*)(const DeformerConfig& config);
using DeformerFactory = absl::StatusOr<std::unique_ptr<Deformer>> (*)(
    std::shared_ptr<const Rig> rig, std::shared_ptr<const Prepared> prepared,
    const DeformerConfig& config);

struct MethodInfo {
  Method method;
  std::string_view name;  // short lowercase name: "lbs"
  std::string_view description;
  bool stateful;  // frames depend on earlier frames of the session (see Deformer::Reset)
  DeformerFactory create;
  PrepareFn prepare = nullptr;
  PrepareKeyFn prepare_key = nullptr;
  bool device_stage = true;  // its deformers have a DeviceStage (a GPU backend can run them)
  // Methods with the same non-empty group share their preparations (same PrepareFn and key).
  std::string_view prepare_group = {};
};

// Every registered method.
std::span<const MethodInfo> Methods();
// nullptr when `method` is not registered.
const MethodInfo* FindMethod(Method method);
const MethodInfo* FindMethod(std::string_view name);

// Prepares (when the method needs it, without caching) and creates `config.method` on `rig`.
// INVALID_ARGUMENT / FAILED_PRECONDITION when the rig lacks what the method needs (e.g.
// skinning weights, a cage). Hosts that share preparations between sessions call
// MethodInfo::prepare and ::create themselves.
absl::StatusOr<std::unique_ptr<Deformer>> CreateDeformer(std::shared_ptr<const Rig> rig,
                                                         const DeformerConfig& config,
                                                         ThreadPool* pool = nullptr);

}  // namespace sinew
