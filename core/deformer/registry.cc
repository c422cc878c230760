// The table of deformation methods. One line per method.
#include "absl/strings/str_cat.h"
#include "core/baseline/baseline.h"
#include "core/blend/blend.h"
#include "core/swingtwist/method.h"
#include "core/cage/cage_deformer.h"
#include "core/deformer/deformer.h"
#include "core/deformer/pipeline.h"
#include "core/dqs/dqs_deformer.h"
#include "core/implicit/implicit_skinning.h"
#include "core/lbs/lbs_deformer.h"
#include "core/pbs/pbs.h"
#include "core/supercages/supercages.h"

namespace sinew {

namespace {
// One entry per method; `id` is its number in sinew.v1.Method.
const MethodInfo kMethods[] = {
    {.id = 1, .name = "lbs", .description = "linear blend skinning", .create = &CreateLbsDeformer,
     .device_stage = true, .params_field = "lbs", .follows = StageInput::kRest},
    {.id = 2, .name = "dqs", .description = "dual quaternion skinning (uniform scale blended linearly)",
     .create = &CreateDqsDeformer, .device_stage = true, .params_field = "dqs", .follows = StageInput::kRest},
    {.id = 3, .name = "cage-mvc", .description = "cage deformation, mean value coordinates",
     .create = &CreateCageDeformer, .prepare = &PrepareMvcCage, .prepare_key = &CageKey, .check = &CheckCageConfig, .device_stage = true,
     .inputs = kInputCages, .params_field = "cage", .params = CageParamSpecs(), .parse = &ParseCageParams,
     .params_type = &typeid(CageParams)},
    {.id = 4, .name = "cage-green", .description = "cage deformation, Green coordinates",
     .create = &CreateCageDeformer, .prepare = &PrepareGreenCage, .prepare_key = &CageKey, .check = &CheckCageConfig, .device_stage = true,
     .inputs = kInputCages, .params_field = "cage", .params = CageParamSpecs(), .parse = &ParseCageParams,
     .params_type = &typeid(CageParams)},
    {.id = 5, .name = "supercages",
     .description = "SuperCages: cage-deformed rest mesh posed by the skeleton (LBS or DQS), skeleton and cage "
                    "updaters, reverse cage deformer",
     .stateful = true, .create = &CreateSuperCagesDeformer, .prepare = &PrepareSuperCages,
     .prepare_key = &SuperCagesKey, .check = &CheckSuperCagesConfig, .device_stage = true, .inputs = kInputPose | kInputCages | kInputPosedCage,
     .params_field = "supercages", .params = SuperCagesParamSpecs(), .parse = &ParseSuperCagesParams,
     .params_type = &typeid(SuperCagesParams)},
    {.id = 6, .name = "implicit",
     .description = "implicit skinning: DQS corrected by marching to per-bone implicit fields, contact and bulge "
                    "at joints (history-independent)",
     .create = &CreateImplicitDeformer, .prepare = &PrepareImplicit, .prepare_key = &ImplicitKey, .check = &CheckImplicitConfig,
     .device_stage = true, .prepare_group = "implicit", .params_field = "implicit", .params = ImplicitParamSpecs(),
     .parse = &ParseImplicitParams, .params_type = &typeid(ImplicitConfig), .vertex_states = true,
     .follows = StageInput::kPosed},
    {.id = 7, .name = "elastic-implicit",
     .description = "elastic implicit skinning: tracks the implicit surface from the previous frame, relaxing "
                    "by ARAP held to the surface and to each side of a contact (history-dependent; frames in order)",
     .stateful = true, .cost_follows_motion = true, .create = &CreateImplicitDeformer, .prepare = &PrepareImplicit,
     .prepare_key = &ImplicitKey, .check = &CheckImplicitConfig, .device_stage = true, .prepare_group = "implicit", .params_field = "implicit",
     .params = ImplicitParamSpecs(), .parse = &ParseImplicitParams, .params_type = &typeid(ImplicitConfig),
     .vertex_states = true},
    {.id = 8, .name = "blend",
     .description = "LBS/DQS blend: per vertex (1 - b) LBS + b DQS, b from the rig's \"dqs_blend\" attribute or "
                    "one weight per session",
     .create = &CreateBlendDeformer, .device_stage = true, .params_field = "blend", .params = BlendParamSpecs(),
     .parse = &ParseBlendParams, .params_type = &typeid(BlendParams), .follows = StageInput::kRest},
    {.id = 9, .name = "swing-twist",
     .description = "elasticity-inspired joint deformers (Kavan & Sorkine 2012): per joint a swing and a twist "
                    "deformer with energy-minimizing weights precomputed from a voxelization of the rest mesh",
     .stateful_with = &SwingTwistStateful,
     .create = &CreateSwingTwistDeformer, .prepare = &PrepareSwingTwist, .prepare_key = &SwingTwistKey, .check = &CheckSwingTwistConfig,
     .save_prepared = &SaveSwingTwist, .load_prepared = &LoadSwingTwist, .device_stage = true, .params_field = "swing_twist", .params = SwingTwistParamSpecs(), .parse = &ParseSwingTwistParams,
     .params_type = &typeid(SwingTwistParams), .fallback = "dqs"},
    {.id = 10, .name = "pbs",
     .description = "position-based skinning (Abu Rumman & Fratarcangeli 2015): LBS of a tetrahedral mesh's "
                    "particles corrected by position-based dynamics (edge, volume and bone-distance constraints); "
                    "the render mesh follows its tets; optional jiggle",
     .stateful_with = &PbsStateful,
     .create = &CreatePbsDeformer, .prepare = &PreparePbs, .prepare_key = &PbsKey, .check = &CheckPbsConfig, .device_stage = true,
     .params_field = "pbs",
     .params = PbsParamSpecs(), .parse = &ParsePbsParams, .params_type = &typeid(PbsParams), .fallback = "lbs"},
    {.id = 11, .name = "baseline",
     .description = "baseline skinning of point sets (Fu, Chaine & Digne 2021): points encoded over baselines of "
                    "a sphere-mesh skeleton, moved by its twist and bend model; no weights, no triangles",
     .create = &CreateBaselineDeformer, .prepare = &PrepareBaseline, .prepare_key = &BaselineKey,
     .device_stage = true, .inputs = kInputPose | kInputSpheres, .params_field = "baseline", .params = BaselineParamSpecs(),
     .parse = &ParseBaselineParams, .params_type = &typeid(BaselineParams), .vertex_states = true},
};
}  // namespace

std::span<const MethodInfo> Methods() { return kMethods; }

const MethodInfo* FindMethodById(uint32_t id) {
  for (const MethodInfo& m : kMethods) {
    if (m.id == id) return &m;
  }
  return nullptr;
}

const MethodInfo* FindMethod(std::string_view name) {
  for (const MethodInfo& m : kMethods) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string_view StageInputName(StageInput input) {
  switch (input) {
    case StageInput::kFirst: return "first";
    case StageInput::kRest: return "rest";
    case StageInput::kPosed: return "posed";
  }
  return "?";
}

absl::StatusOr<std::string> Deformer::SaveState() const {
  return absl::UnimplementedError("this method cannot save its session state yet");
}

absl::Status Deformer::LoadState(std::string_view) {
  return absl::UnimplementedError("this method cannot restore a session state yet");
}

absl::StatusOr<std::string> Deformer::SaveDeviceState(std::span<const float>) const {
  return absl::UnimplementedError("this method cannot save the state of a session on a device yet");
}

absl::Status Deformer::LoadDeviceState(std::string_view, std::span<float>) {
  return absl::UnimplementedError("this method cannot restore the state of a session on a device yet");
}

absl::Status Deformer::SetParams(const DeformerConfig&) {
  return absl::UnimplementedError("this method's parameters are fixed when its session is created");
}

absl::Status Deformer::DeformAfter(const FrameInput&, std::span<const float>, std::span<float>, ThreadPool*) {
  return absl::FailedPreconditionError("this method cannot follow another stage");
}

std::vector<std::string_view> FrameInputNames(uint32_t inputs) {
  std::vector<std::string_view> out;
  if (inputs & kInputPose) out.push_back("pose");
  if (inputs & kInputCages) out.push_back("cages");
  if (inputs & kInputPosedCage) out.push_back("posed_cage");
  if (inputs & kInputSpheres) out.push_back("spheres");
  return out;
}

absl::StatusOr<DeformerConfig> ParseDeformerConfig(const MethodInfo& method, const ParamSet& set,
                                                   std::string_view field) {
  if (auto st = CheckParams(method.params, set, field); !st.ok()) return st;
  DeformerConfig config;
  config.method = std::string(method.name);
  if (method.parse != nullptr) {
    auto p = method.parse(set, field);
    if (!p.ok()) return p.status();
    config.params = std::move(*p);
  }
  return config;
}

absl::Status Deformer::Extras(const FrameExtras& extras) const {
  // Each named by its field (until 2026-12-07 one message for the three).
  if (extras.posed_cage) return absl::FailedPreconditionError("outputs.posed_cage: this method has no cage to return");
  if (extras.rest_cage) return absl::FailedPreconditionError("outputs.rest_cage: this method has no cage to return");
  if (extras.joints) return absl::FailedPreconditionError("outputs.joints: this method has no joints to return");
  if (extras.vertex_states) {
    return absl::FailedPreconditionError("outputs.vertex_states: this method has no vertex states");
  }
  if (extras.normals) {
    return absl::FailedPreconditionError(
        "outputs.normals: this rig has no triangles, and this method cannot move uploaded normals");
  }
  if (extras.base_points) {
    return absl::FailedPreconditionError("outputs.base_points: this method has no base points (baseline skinning has)");
  }
  return absl::OkStatus();
}

absl::Status Deformer::Offers(const FrameExtras& wanted) const { return Deformer::Extras(wanted); }

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
  if (!config.stages.empty()) {
    if (!config.method.empty() || config.params) {
      return absl::InvalidArgumentError("deformer.method: leave it unset in a pipeline (give deformer.stages only)");
    }
    if (auto st = CheckPipeline(config, "deformer"); !st.ok()) return st;
    std::vector<std::unique_ptr<Deformer>> stages;
    for (size_t k = 0; k < config.stages.size(); ++k) {
      auto d = CreateDeformer(rig, config.stages[k], pool);
      if (!d.ok()) return InStage(d.status(), k);
      stages.push_back(std::move(*d));
    }
    return MakePipeline(std::move(rig), config, std::move(stages));
  }
  const MethodInfo* m = FindMethod(config.method);
  if (m == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("deformer.method: \"", config.method, "\" is not a registered method"));
  }
  if (const auto* params = config.params.get();
      params != nullptr && (m->params_type == nullptr || typeid(*params) != *m->params_type)) {
    return absl::InvalidArgumentError(absl::StrCat("deformer.params: not the parameters of method ", std::string(m->name)));
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
