// Fuzz target: a DeformRequest as a client sends it, decoded into a frame's inputs as the
// server does (server::FrameInputFromProto: pose, cages, posed cage, sphere-mesh, time_step),
// then deformed by LBS, DQS or mean-value-coordinate cages (chosen by the request's frame number)
// on a small limb, whose validation of the pose and cages is the rest of the server's path, and
// its positions checked for range as the server checks them before answering.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "core/deformer/deformer.h"
#include "core/procedural/limb.h"
#include "core/util/finite.h"
#include "server/convert.h"
#include "tests/fuzz/verbose.h"

namespace {

using namespace sinew;

struct Context {
  std::vector<std::unique_ptr<Deformer>> deformers;
  std::vector<size_t> floats;  // positions of each deformer's rig
  Pose pose;
  std::vector<CageFrame> cages;
  CageFrame posed_cage;
  SphereFrame spheres;
  std::vector<float> out;
};

std::unique_ptr<Deformer> Make(RigInput in, const char* method, size_t* floats) {
  auto rig = BuildRig(std::move(in));
  if (!rig.ok()) abort();
  auto shared = std::make_shared<const Rig>(std::move(*rig));
  *floats = shared->positions.size();
  auto d = CreateDeformer(shared, {method, nullptr});
  if (!d.ok()) abort();
  return std::move(*d);
}

Context& Ctx() {
  static Context* c = [] {
    auto* c = new Context;
    LimbOptions limb;
    limb.rings = 6;
    limb.segments = 8;
    limb.bones = 3;
    for (const char* method : {"lbs", "dqs"}) {
      c->floats.emplace_back();
      c->deformers.push_back(Make(MakeLimb(limb), method, &c->floats.back()));
    }
    RigInput caged = MakeLimb(limb);
    caged.rig.cages.push_back(MakeLimbCage(limb, 3));
    c->floats.emplace_back();
    c->deformers.push_back(Make(std::move(caged), "cage-mvc", &c->floats.back()));
    return c;
  }();
  return *c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Context& c = Ctx();
  v1::DeformRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  FrameInput input;
  const absl::Status decoded = server::FrameInputFromProto(req, c.pose, c.cages, c.posed_cage, c.spheres, input);
  fuzz::Say("decode", decoded);
  if (!decoded.ok()) return 0;
  const size_t k = req.frame() % c.deformers.size();
  c.out.assign(c.floats[k], 0.0f);
  const absl::Status deformed = c.deformers[k]->Deform(input, c.out, nullptr);
  fuzz::Say(k == 0 ? "lbs" : k == 1 ? "dqs" : "cage-mvc", deformed);
  if (deformed.ok()) {
    (void)FirstBeyond(c.out, std::numeric_limits<float>::max());
  }
  return 0;
}
