// Shared frame handling of the skeletal deformers (LBS, DQS, and the correctives that start
// from them): checks the rig once, validates each pose and runs forward kinematics into
// per-session scratch.
#pragma once

#include <vector>

#include "core/deformer/deformer.h"

namespace sinew {

// Checks a skeleton-only frame: a valid pose and no cage inputs. INVALID_ARGUMENT names the
// field.
absl::Status CheckSkeletalFrame(const Rig& rig, const FrameInput& frame, const char* method);

// Per-joint data of one frame for a GPU twin of LBS or DQS, 12 floats per joint: LBS the
// row-major 3x4 skinning matrix; DQS the dual quaternion (real x,y,z,w, dual x,y,z,w), the
// uniform scale and 3 zeros. Validates the frame like SkeletalDeformer::Deform. `world` and
// `transforms` are caller-owned scratch of joint_count entries; allocates nothing.
absl::Status SkeletalJointData(const Rig& rig, Method method, const FrameInput& frame,
                               std::span<Similarity> world, std::span<Affine34d> transforms,
                               std::span<float> out);

class SkeletalDeformer : public Deformer {
 public:
  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) final;
  size_t StateBytes() const override;
  DeviceStage device_stage() const override;
  size_t device_param_count() const override { return 12 * rig_->joint_count(); }
  absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params) override;

  // FAILED_PRECONDITION when the rig has no skeleton or no weights for `method_name`.
  static absl::Status CheckRig(const Rig& rig, const char* method_name);

 protected:
  SkeletalDeformer(std::shared_ptr<const Rig> rig, Method method, const char* method_name);
  // Deforms with the skinning transforms of the current frame (in transforms()).
  virtual void Skin(std::span<float> out, ThreadPool* pool) = 0;
  const Rig& rig() const { return *rig_; }
  std::span<const Affine34d> transforms() const { return transforms_; }

 private:
  std::shared_ptr<const Rig> rig_;
  Method method_;
  const char* method_name_;
  std::vector<Similarity> world_;
  std::vector<Affine34d> transforms_;
};

}  // namespace sinew
