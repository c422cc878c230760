#include "core/deformer/skeletal.h"

#include "absl/strings/str_cat.h"

namespace sinew {

SkeletalDeformer::SkeletalDeformer(std::shared_ptr<const Rig> rig, const char* method_name)
    : rig_(std::move(rig)),
      method_name_(method_name),
      world_(rig_->joint_count()),
      transforms_(rig_->joint_count()) {}

absl::Status SkeletalDeformer::CheckRig(const Rig& rig, const char* method_name) {
  if (rig.joint_count() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("method ", method_name, " needs a skeleton; the rig has none"));
  }
  if (rig.weights.offsets.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("method ", method_name, " needs skinning weights; the rig has none"));
  }
  return absl::OkStatus();
}

absl::Status SkeletalDeformer::Deform(const FrameInput& frame, std::span<float> out,
                                      ThreadPool* pool) {
  if (frame.pose == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("pose: required by method ", method_name_));
  }
  if (auto st = ValidatePose(*frame.pose, rig_->joint_count()); !st.ok()) return st;
  if (auto st = ValidateCageFrames(*rig_, frame.cages); !st.ok()) return st;
  if (!frame.cages.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cages: method ", method_name_, " takes no cage input"));
  }
  if (out.size() != rig_->positions.size()) {
    return absl::InternalError("output buffer does not hold 3 floats per vertex");
  }
  SkinningTransforms(rig_->skeleton, *frame.pose, world_, transforms_);
  Skin(out, pool);
  return absl::OkStatus();
}

size_t SkeletalDeformer::StateBytes() const {
  return sizeof(*this) + world_.size() * sizeof(Similarity) + transforms_.size() * sizeof(Affine34d);
}

}  // namespace sinew
