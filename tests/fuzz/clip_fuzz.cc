// Fuzz target: a DeformClipRequest's clip or pose list validated as the server validates it
// (server::ClipBatchFromProto: rate, tracks, key times and values, first_frame/max_frames and the
// bound on the frames one batch sends) against a 3-joint limb; a clip that passes is sampled at
// its first, last and a few frames between, and every sampled pose must pass ValidatePose (a
// validated clip that samples into an invalid pose is a finding: abort).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/clip/clip.h"
#include "core/procedural/limb.h"
#include "server/convert.h"
#include "tests/fuzz/verbose.h"

namespace {
constexpr uint64_t kMaxFramesSent = 10'000'000;  // DeformClip's bound (server/frame_calls.cc)
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sinew;
  static const Skeleton* skeleton = [] {
    LimbOptions limb;
    limb.rings = 4;
    limb.segments = 8;
    auto rig = BuildRig(MakeLimb(limb));
    if (!rig.ok()) abort();
    return new Skeleton(rig->skeleton);
  }();
  static Pose pose;
  v1::DeformClipRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto batch = server::ClipBatchFromProto(req, skeleton->parents.size(), kMaxFramesSent);
  fuzz::Say(req.has_clip() ? "clip" : "poses", batch.status());
  if (!batch.ok() || !req.has_clip()) return 0;
  if (batch->end > batch->first && batch->end - batch->first > kMaxFramesSent) abort();  // the bound held
  const uint64_t frames[] = {0, 1, batch->total / 2, batch->total > 0 ? batch->total - 1 : 0, batch->first};
  for (uint64_t f : frames) {
    const double t = double(f) / batch->fps;
    SampleClip(batch->clip, *skeleton, t, pose);
    if (auto st = ValidatePose(pose, skeleton->parents.size()); !st.ok()) {
      std::fprintf(stderr, "a validated clip sampled at %g s gives an invalid pose: %s\n", t,
                   std::string(st.message()).c_str());
      abort();
    }
  }
  return 0;
}
