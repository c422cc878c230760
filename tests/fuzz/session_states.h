// The stateful sessions of the session_state fuzz target and of its seeds (make_seeds.cc): one
// deformer per stateful method (and a pipeline) on a small limb, each input's first byte choosing
// one (modulo their count), the rest the bytes a client gives SetSessionState.method_state.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/deformer/deformer.h"
#include "core/implicit/implicit_params.h"
#include "core/pbs/pbs.h"
#include "core/procedural/limb.h"
#include "core/supercages/supercages.h"
#include "core/swingtwist/method.h"

namespace sinew::fuzz {

struct StatefulSession {
  const char* name;
  std::shared_ptr<const Rig> rig;
  std::unique_ptr<Deformer> deformer;
};

inline std::vector<StatefulSession> MakeStatefulSessions() {
  LimbOptions limb;
  limb.rings = 6;
  limb.segments = 8;
  limb.bones = 3;
  RigInput input = MakeLimb(limb);
  input.rig.cages.push_back(MakeLimbCage(limb, 3));
  std::vector<float> jiggle(input.rig.positions.size() / 3);
  for (size_t v = 0; v < jiggle.size(); ++v) jiggle[v] = input.rig.positions[3 * v] > limb.length / 2 ? 1.f : 0.f;
  input.rig.attributes.push_back({"pbs_jiggle", 1, std::move(jiggle)});
  auto built = BuildRig(std::move(input));
  if (!built.ok()) abort();
  auto rig = std::make_shared<const Rig>(std::move(*built));

  std::vector<StatefulSession> out;
  auto add = [&](const char* name, DeformerConfig config) {
    auto d = CreateDeformer(rig, config);
    if (!d.ok()) abort();
    out.push_back({name, rig, std::move(*d)});
  };
  // Few sub-steps and rounds: a loaded state may be any pose away from the frame's, and an input
  // must take well under libFuzzer's timeout under the sanitizers (what is fuzzed is the state).
  auto elastic = std::make_shared<ImplicitConfig>();
  elastic->max_substeps = 4;
  elastic->relaxation_rounds = 4;
  add("elastic-implicit", {"elastic-implicit", elastic});
  auto pbs = std::make_shared<PbsParams>();
  pbs->jiggle = true;
  pbs->tets = PbsParams::Tets::kVoxels;
  pbs->voxel_size = 0.1;
  add("pbs", {"pbs", pbs});
  add("supercages", {"supercages", nullptr});
  auto swing = std::make_shared<SwingTwistParams>();
  swing->unwrap_twist = true;
  swing->voxel_size = 0.1;
  add("swing-twist", {"swing-twist", swing});
  DeformerConfig chain;
  chain.stages.push_back({"elastic-implicit", elastic});
  chain.stages.push_back({"lbs", nullptr});
  add("pipeline", chain);
  return out;
}

// A bent, twisted pose of the limb (the seeds play a few of them; the target plays one after a
// state is loaded).
inline Pose StatefulSessionPose(const Rig& rig, double t) {
  return LimbPose(rig.skeleton, t, LimbMotion{.bend_degrees = 100, .twist_degrees = 200});
}

}  // namespace sinew::fuzz
