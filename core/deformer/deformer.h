// The one interface through which the server (or any host) runs a deformation method.
//
// A method is prepared once per session from an immutable, shared Rig and then evaluated per
// frame into a caller-owned buffer. Per-session state (scratch, simulation state) lives in the
// Deformer object; the Rig is never modified and is shared by every session on it.
//
// Adding a method: implement a Deformer in the method's folder (core/<method>/), give it a
// factory, and add one line to the table in deformer/registry.cc.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/parallel/thread_pool.h"
#include "core/rig/pose.h"
#include "core/rig/rig.h"

namespace sinew {

enum class Method { kLbs = 1, kDqs = 2 };

struct DeformerConfig {
  Method method = Method::kLbs;
};

// The inputs of one frame. Pointers and spans refer to caller-owned data that stays valid
// during Deform.
struct FrameInput {
  const Pose* pose = nullptr;
  std::span<const CageFrame> cages;
};

class Deformer {
 public:
  virtual ~Deformer() = default;
  // Deforms one frame: writes x,y,z per rig vertex into `out` (3 * vertex_count floats).
  // Validates the frame's inputs first; INVALID_ARGUMENT names the field and index. Calls on
  // one Deformer must not overlap; different Deformers may run concurrently. `pool` may be
  // null (single-threaded).
  virtual absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) = 0;
  // Bytes held per session (state and scratch), excluding the shared rig.
  virtual size_t StateBytes() const = 0;
};

using DeformerFactory = absl::StatusOr<std::unique_ptr<Deformer>> (*)(
    std::shared_ptr<const Rig> rig, const DeformerConfig& config);

struct MethodInfo {
  Method method;
  std::string_view name;  // short lowercase name: "lbs"
  std::string_view description;
  bool stateful;  // frames depend on earlier frames of the session
  DeformerFactory create;
};

// Every registered method.
std::span<const MethodInfo> Methods();
// nullptr when `method` is not registered.
const MethodInfo* FindMethod(Method method);
const MethodInfo* FindMethod(std::string_view name);

// Prepares `config.method` on `rig`. INVALID_ARGUMENT / FAILED_PRECONDITION when the rig lacks
// what the method needs (e.g. skinning weights).
absl::StatusOr<std::unique_ptr<Deformer>> CreateDeformer(std::shared_ptr<const Rig> rig,
                                                         const DeformerConfig& config);

}  // namespace sinew
