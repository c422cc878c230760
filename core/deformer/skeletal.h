// Shared frame handling of the skeletal deformers (LBS, DQS, and the correctives that start
// from them): checks the rig once, validates each pose and runs forward kinematics into
// per-session scratch.
#pragma once

#include <vector>

#include "core/deformer/deformer.h"

namespace sinew {

class SkeletalDeformer : public Deformer {
 public:
  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) final;
  size_t StateBytes() const override;

  // FAILED_PRECONDITION when the rig has no skeleton or no weights for `method_name`.
  static absl::Status CheckRig(const Rig& rig, const char* method_name);

 protected:
  SkeletalDeformer(std::shared_ptr<const Rig> rig, const char* method_name);
  // Deforms with the skinning transforms of the current frame (in transforms()).
  virtual void Skin(std::span<float> out, ThreadPool* pool) = 0;
  const Rig& rig() const { return *rig_; }
  std::span<const Affine34d> transforms() const { return transforms_; }

 private:
  std::shared_ptr<const Rig> rig_;
  const char* method_name_;
  std::vector<Similarity> world_;
  std::vector<Affine34d> transforms_;
};

}  // namespace sinew
