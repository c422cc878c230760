// The table of deformation methods. One line per method.
#include "core/deformer/deformer.h"
#include "core/dqs/dqs_deformer.h"
#include "core/lbs/lbs_deformer.h"

namespace sinew {

namespace {
const MethodInfo kMethods[] = {
    {Method::kLbs, "lbs", "linear blend skinning", false, &CreateLbsDeformer},
    {Method::kDqs, "dqs", "dual quaternion skinning (uniform scale blended linearly)", false,
     &CreateDqsDeformer},
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

absl::StatusOr<std::unique_ptr<Deformer>> CreateDeformer(std::shared_ptr<const Rig> rig,
                                                         const DeformerConfig& config) {
  const MethodInfo* m = FindMethod(config.method);
  if (m == nullptr) {
    return absl::InvalidArgumentError("deformer.method: not a method this server implements");
  }
  return m->create(std::move(rig), config);
}

}  // namespace sinew
