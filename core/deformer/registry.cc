// The table of deformation methods. One line per method.
#include "absl/strings/str_cat.h"
#include "core/cage/cage_deformer.h"
#include "core/deformer/deformer.h"
#include "core/dqs/dqs_deformer.h"
#include "core/implicit/implicit_skinning.h"
#include "core/lbs/lbs_deformer.h"
#include "core/supercages/supercages.h"

namespace sinew {

namespace {
const MethodInfo kMethods[] = {
    {Method::kLbs, "lbs", "linear blend skinning", false, &CreateLbsDeformer},
    {Method::kDqs, "dqs", "dual quaternion skinning (uniform scale blended linearly)", false,
     &CreateDqsDeformer},
    {Method::kCageMvc, "cage-mvc", "cage deformation, mean value coordinates", false,
     &CreateCageDeformer, &PrepareMvcCage, &CageKey},
    {Method::kCageGreen, "cage-green", "cage deformation, Green coordinates", false,
     &CreateCageDeformer, &PrepareGreenCage, &CageKey},
    {Method::kSuperCages, "supercages",
     "SuperCages: cage-deformed rest mesh posed by the skeleton (LBS or DQS), skeleton and cage "
     "updaters, reverse cage deformer", true, &CreateSuperCagesDeformer, &PrepareSuperCages,
     &SuperCagesKey},
    {Method::kImplicit, "implicit",
     "implicit skinning: DQS corrected by marching to per-bone implicit fields, contact and bulge "
     "at joints (history-independent)", false, &CreateImplicitDeformer, &PrepareImplicit, &ImplicitKey,
     /*device_stage=*/true, /*prepare_group=*/"implicit"},
    {Method::kElasticImplicit, "elastic-implicit",
     "elastic implicit skinning: tracks the implicit surface from the previous frame with "
     "tangential ARAP relaxation (history-dependent; frames in order)", true, &CreateImplicitDeformer,
     &PrepareImplicit, &ImplicitKey, /*device_stage=*/true, /*prepare_group=*/"implicit"},
};
}  // namespace

std::span<const MethodInfo> Methods() { return kMethods; }

const MethodInfo* FindMethod(Method method) {
  for (const MethodInfo& m : kMethods) {
    if (m.method == method) return &m;
  }
  return nullptr;
}

const MethodInfo* FindMethod(std::string_view name) {
  for (const MethodInfo& m : kMethods) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

absl::Status Deformer::Extras(const FrameExtras& extras) const {
  if (extras.posed_cage || extras.rest_cage || extras.joints) {
    return absl::FailedPreconditionError("outputs: this method has no posed cage, rest cage or joints to return");
  }
  if (extras.vertex_states) {
    return absl::FailedPreconditionError("outputs.vertex_states: only implicit skinning methods have vertex states");
  }
  return absl::OkStatus();
}

void Deformer::DeviceCoefficients(std::vector<float>& values, uint32_t& cols) const {
  values.clear();
  cols = 0;
}

absl::Status Deformer::DeviceFrame(const FrameInput&, std::vector<float>&) {
  return absl::UnimplementedError("this method has no device stage");
}

absl::StatusOr<std::unique_ptr<Deformer>> CreateDeformer(std::shared_ptr<const Rig> rig,
                                                         const DeformerConfig& config,
                                                         ThreadPool* pool) {
  const MethodInfo* m = FindMethod(config.method);
  if (m == nullptr) {
    return absl::InvalidArgumentError("deformer.method: not a method this server implements");
  }
  std::shared_ptr<const Prepared> prepared;
  if (m->prepare != nullptr) {
    auto p = m->prepare(*rig, config, pool, {});
    if (!p.ok()) return p.status();
    prepared = std::move(*p);
  }
  return m->create(std::move(rig), std::move(prepared), config);
}

}  // namespace sinew
