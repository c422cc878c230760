#include "core/lbs/lbs_deformer.h"

#include "core/deformer/skeletal.h"
#include "core/lbs/lbs.h"

namespace sinew {
namespace {

class LbsDeformer final : public SkeletalDeformer {
 public:
  explicit LbsDeformer(std::shared_ptr<const Rig> rig)
      : SkeletalDeformer(std::move(rig), JointData::kMatrix, "lbs", "lbs"), matrices_(this->rig().joint_count()) {}

  size_t StateBytes() const override {
    return SkeletalDeformer::StateBytes() + matrices_.size() * sizeof(Affine34f);
  }

 private:
  float DualQuaternionShare(size_t) const override { return 0.f; }
  void Skin(std::span<const float> rest, std::span<float> out, ThreadPool* pool) override {
    for (size_t j = 0; j < matrices_.size(); ++j) matrices_[j] = transforms()[j].cast<float>();
    LinearBlendSkinning(rest, rig().weights, matrices_, out, pool);
  }
  std::vector<Affine34f> matrices_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Deformer>> CreateLbsDeformer(std::shared_ptr<const Rig> rig,
                                                            std::shared_ptr<const Prepared>,
                                                            const DeformerConfig&) {
  if (auto st = SkeletalDeformer::CheckRig(*rig, "lbs"); !st.ok()) return st;
  return std::make_unique<LbsDeformer>(std::move(rig));
}

}  // namespace sinew
