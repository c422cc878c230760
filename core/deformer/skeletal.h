// Shared frame handling of the skeletal deformers (LBS, DQS, and the correctives that start
// from them): checks the rig once, validates each pose and runs forward kinematics into
// per-session scratch.
#pragma once

#include <vector>

#include "core/deformer/deformer.h"
#include "core/dqs/dqs.h"

namespace sinew {

// Checks a skeleton-only frame: a valid pose and no cage inputs. INVALID_ARGUMENT names the
// field.
absl::Status CheckSkeletalFrame(const Rig& rig, const FrameInput& frame, const char* method);

// What a skeletal device kernel reads per joint, 12 floats each: the row-major 3x4 skinning
// matrix (LBS); the dual quaternion (real x,y,z,w, dual x,y,z,w), the uniform scale and its
// shift (DQS: core/dqs/dqs.h's DualQuat, about the rest centres of `inverse_bind`); or both (kernels that blend the two): every joint's matrix, then every joint's dual
// quaternion.
enum class JointData : uint8_t { kMatrix = 1, kDualQuat = 2, kBoth = 3 };
inline size_t JointDataFloats(JointData d) { return d == JointData::kBoth ? 24 : 12; }

// Per-joint data of one frame for a device kernel. Validates the frame like
// SkeletalDeformer::Deform. `world` and `transforms` are caller-owned scratch of joint_count
// entries; allocates nothing.
absl::Status SkeletalJointData(const Rig& rig, JointData data, const FrameInput& frame,
                               std::span<Similarity> world, std::span<Affine34d> transforms,
                               std::span<float> out);
// The same from skinning transforms already computed.
void WriteJointData(JointData data, std::span<const Affine34d> transforms, std::span<float> out,
                    std::span<const Affine34d> inverse_bind = {});

class SkeletalDeformer : public Deformer {
 public:
  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) final;
  // Skins the previous stage's positions as the rest mesh (StageInput::kRest).
  absl::Status DeformAfter(const FrameInput& frame, std::span<const float> in, std::span<float> out,
                           ThreadPool* pool) final;
  // Point sets (no triangles) with uploaded normals: the normals moved by the frame's skinning
  // (LBS: the inverse transpose of the blended linear part; DQS: the blended rotation; the
  // blend: the two mixed by the vertex's weight, normalised).
  absl::Status Extras(const FrameExtras& extras) const override;
  absl::Status Offers(const FrameExtras& wanted) const override;
  size_t StateBytes() const override;
  DeviceStage device_stage() const override;
  size_t device_param_count() const override { return JointDataFloats(data_) * rig_->joint_count(); }
  absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params) override;

  // FAILED_PRECONDITION when the rig has no skeleton or no weights for `method_name`.
  static absl::Status CheckRig(const Rig& rig, const char* method_name);

 protected:
  // `kernel`: the device kernel (DeviceStage::kernel), which reads `data` per joint.
  SkeletalDeformer(std::shared_ptr<const Rig> rig, JointData data, const char* method_name, std::string_view kernel);
  // Deforms `rest` (the rig's rest positions, or a pipeline's previous stage) with the skinning
  // transforms of the current frame (in transforms()).
  virtual void Skin(std::span<const float> rest, std::span<float> out, ThreadPool* pool) = 0;
  const Rig& rig() const { return *rig_; }
  // How much of vertex v's normal follows DQS rather than LBS (0 LBS, 1 DQS).
  virtual float DualQuaternionShare(size_t v) const = 0;
  std::span<const Affine34d> transforms() const { return transforms_; }

 private:
  std::shared_ptr<const Rig> rig_;
  JointData data_;
  const char* method_name_;
  std::string_view kernel_;
  std::vector<Similarity> world_;
  std::vector<Affine34d> transforms_;
  mutable std::vector<DualQuat> rotations_;  // Extras' scratch: the joints' rotations (point-set normals)
};

}  // namespace sinew
