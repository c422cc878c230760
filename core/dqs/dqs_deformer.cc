#include "core/dqs/dqs_deformer.h"

#include "core/deformer/skeletal.h"
#include "core/dqs/dqs.h"

namespace sinew {
namespace {

class DqsDeformer final : public SkeletalDeformer {
 public:
  explicit DqsDeformer(std::shared_ptr<const Rig> rig)
      : SkeletalDeformer(std::move(rig), JointData::kDualQuat, "dqs", "dqs"), dqs_(this->rig().joint_count()) {}

  size_t StateBytes() const override {
    return SkeletalDeformer::StateBytes() + dqs_.size() * sizeof(DualQuat);
  }

 private:
  float DualQuaternionShare(size_t) const override { return 1.f; }
  void Skin(std::span<const float> rest, std::span<float> out, ThreadPool* pool) override {
    ToDualQuats(transforms(), dqs_, rig().skeleton.inverse_bind);
    DualQuaternionSkinning(rest, rig().weights, dqs_, out, pool);
  }
  std::vector<DualQuat> dqs_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Deformer>> CreateDqsDeformer(std::shared_ptr<const Rig> rig,
                                                            std::shared_ptr<const Prepared>,
                                                            const DeformerConfig&) {
  if (auto st = SkeletalDeformer::CheckRig(*rig, "dqs"); !st.ok()) return st;
  if (!rig->skeleton.inverse_bind_is_similarity) {
    return absl::FailedPreconditionError(absl::StrCat(
        "method dqs needs inverse bind matrices that are similarities (rotation, uniform scale, "
        "translation); this rig's ", NotSimilarity(rig->skeleton), ": use lbs"));
  }
  return std::make_unique<DqsDeformer>(std::move(rig));
}

}  // namespace sinew
