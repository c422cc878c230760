#include "core/blend/blend.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/deformer/params.h"
#include "core/deformer/skeletal.h"
#include "core/dqs/dqs.h"
#include "core/lbs/lbs.h"

namespace sinew {
namespace {

constexpr ParamSpec kBlendSpecs[] = {
    {"weight", ParamSpec::Type::kNumber, "",
     "one blend weight for every vertex, 0 = LBS … 1 = DQS; unset: the rig's per-vertex \"dqs_blend\" attribute"},
};

constexpr size_t kBlock = 256;   // vertices whose DQS result waits on the stack
constexpr size_t kGrain = 8192;  // vertices per ParallelFor chunk, as LBS and DQS split theirs

class BlendDeformer final : public SkeletalDeformer {
 public:
  BlendDeformer(std::shared_ptr<const Rig> rig, std::vector<float> blend, std::string key)
      : SkeletalDeformer(std::move(rig), JointData::kBoth, "blend", "blend"),
        blend_(std::move(blend)),
        key_(std::move(key)),
        matrices_(this->rig().joint_count()),
        dual_quats_(this->rig().joint_count()) {}

  size_t StateBytes() const override {
    return SkeletalDeformer::StateBytes() + blend_.size() * sizeof(float) + matrices_.size() * sizeof(Affine34f) +
           dual_quats_.size() * sizeof(DualQuat);
  }
  DeviceStage device_stage() const override {
    DeviceStage s = SkeletalDeformer::device_stage();
    s.device_data_key = key_;
    return s;
  }
  void DeviceCoefficients(std::vector<float>& values, uint32_t& cols) const override {
    values = blend_;
    cols = 1;
  }

 private:
  float DualQuaternionShare(size_t v) const override { return blend_[v]; }
  void Skin(std::span<const float> rest, std::span<float> out, ThreadPool* pool) override {
    for (size_t j = 0; j < matrices_.size(); ++j) matrices_[j] = transforms()[j].cast<float>();
    ToDualQuats(transforms(), dual_quats_, rig().skeleton.inverse_bind);
    ParallelFor(pool, rig().vertex_count(), kGrain, [&](size_t b, size_t e) {
      BlendSkinningRange(rest, rig().weights, blend_, matrices_, dual_quats_, out, b, e);
    });
  }

  std::vector<float> blend_;  // one per vertex
  std::string key_;
  std::vector<Affine34f> matrices_;
  std::vector<DualQuat> dual_quats_;
};

}  // namespace

std::span<const ParamSpec> BlendParamSpecs() { return kBlendSpecs; }

absl::StatusOr<std::shared_ptr<const MethodParams>> ParseBlendParams(const ParamSet& set, std::string_view field) {
  auto p = std::make_shared<BlendParams>();
  if (set.Find("weight") != nullptr) {
    double w = 0;
    if (auto st = ParamReader(set, field).Number("weight", w, 0, 1).status(); !st.ok()) return st;
    p->weight = w;
  }
  return std::shared_ptr<const MethodParams>(std::move(p));
}

void BlendSkinningRange(std::span<const float> rest, const SkinWeights& weights, std::span<const float> blend,
                        std::span<const Affine34f> matrices, std::span<const DualQuat> dual_quats,
                        std::span<float> out, size_t begin, size_t end) {
  float dqs[3 * kBlock];
  for (size_t b = begin; b < end; b += kBlock) {
    const size_t e = std::min(end, b + kBlock);
    // DQS of the block, kept in the stack buffer (in L1), then LBS over it and the mix.
    DualQuaternionSkinningRange(rest, weights, dual_quats, out, b, e);
    std::copy(out.begin() + 3 * b, out.begin() + 3 * e, dqs);
    LinearBlendSkinningRange(rest, weights, matrices, out, b, e);
    for (size_t v = b; v < e; ++v) {
      const float t = blend[v];
      for (int k = 0; k < 3; ++k) {
        float& o = out[3 * v + k];
        o += t * (dqs[3 * (v - b) + k] - o);
      }
    }
  }
}

absl::StatusOr<std::unique_ptr<Deformer>> CreateBlendDeformer(std::shared_ptr<const Rig> rig,
                                                              std::shared_ptr<const Prepared>,
                                                              const DeformerConfig& config) {
  if (auto st = SkeletalDeformer::CheckRig(*rig, "blend"); !st.ok()) return st;
  if (!rig->skeleton.inverse_bind_is_similarity) {
    return absl::FailedPreconditionError(absl::StrCat(
        "method blend mixes in dual quaternion skinning, which needs inverse bind matrices that are similarities; "
        "this rig's ", NotSimilarity(rig->skeleton)));
  }
  const BlendParams& p = ParamsOf<BlendParams>(config);
  const size_t n = rig->vertex_count();
  std::vector<float> blend;
  std::string key;
  if (p.weight) {
    blend.assign(n, float(*p.weight));
    // The weights as the device holds them (floats) name its copy: StrCat's six digits gave
    // 0.5000001 and 0.5000004 one key, one device buffer, until 2026-12-07.
    key = absl::StrCat("blend weight=", KeyNumber(float(*p.weight)));
  } else {
    const AttributeMap* attr = nullptr;
    for (const AttributeMap& a : rig->attributes) {
      if (a.name == kBlendAttribute) attr = &a;
    }
    if (attr == nullptr) {
      return absl::FailedPreconditionError(
          "method blend needs a blend weight per vertex: the rig has no \"dqs_blend\" attribute; upload one "
          "(1 component, 0 = LBS … 1 = DQS) or set deformer.blend.weight");
    }
    if (auto st = CheckKnownAttribute(*attr, n, rig->joint_count(), "rig attribute"); !st.ok()) return st;
    blend = attr->values;
    key = "blend attribute";
  }
  return std::make_unique<BlendDeformer>(std::move(rig), std::move(blend), std::move(key));
}

}  // namespace sinew
