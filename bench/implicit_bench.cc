// sinew-bench-implicit: implicit skinning frames/s against DQS on the same rig, in the same run,
// at about 4k, 30k and 170k vertices (the thesis' Dana, Hand/Juna and Armadillo sizes), with 1
// and 2 threads; plus the real character BCN_Epileptic when assimp-testmodels is installed.
// Every frame of the clip animates all joints (the limb bends 120° at its elbow and twists
// 180° at its wrist). The thesis' figures are from a GTX 680 (Table 4.1, IS, full animation):
// 95 fps at 4 164 vertices, 15 fps at 31 750 / 32 056, 3 fps at 172 974.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "clients/import/asset_import.h"
#include "core/clip/clip.h"
#include "core/deformer/deformer.h"
#include "core/implicit/implicit_skinning.h"
#include "core/procedural/limb.h"

namespace {

using namespace sinew;
using Clock = std::chrono::steady_clock;

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Case {
  std::string label;
  std::shared_ptr<const Rig> rig;
  std::vector<Pose> clip;  // one cycle, played in order
  double thesis_fps;       // 0: none
};

// Mean frame time (ms) over `cycles` passes of the clip, in order, after one warm-up pass.
double Time(Deformer& d, const Case& c, ThreadPool* pool, int cycles) {
  std::vector<float> out(c.rig->positions.size());
  auto pass = [&] {
    for (const Pose& p : c.clip) {
      if (!d.Deform({&p, {}}, out, pool).ok()) std::abort();
    }
  };
  pass();
  const auto t0 = Clock::now();
  for (int k = 0; k < cycles; ++k) pass();
  return Millis(Clock::now() - t0) / (cycles * c.clip.size());
}

void Run(const Case& c, int cycles) {
  std::printf("\n%s: %zu vertices, %zu joints, %zu frames per cycle\n", c.label.c_str(), c.rig->vertex_count(),
              c.rig->joint_count(), c.clip.size());
  ThreadPool two(2);
  DeformerConfig config;
  config.method = Method::kImplicit;
  const auto t0 = Clock::now();
  auto prepared = PrepareImplicit(*c.rig, config, &two, {});
  if (!prepared.ok()) {
    std::printf("  prepare failed: %s\n", std::string(prepared.status().message()).c_str());
    return;
  }
  const double prepare_ms = Millis(Clock::now() - t0);
  auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
  std::printf("  preparation %.0f ms on 2 threads (%zu bone fields, %.1f MiB per rig)\n", prepare_ms,
              model->fields.size(), model->Bytes() / 1048576.0);
  std::printf("  %-18s %12s %12s %10s %10s %12s\n", "method", "1 thread ms", "2 threads ms", "fps (2 thr)",
              "÷ DQS", "thesis fps");
  double dqs2 = 0;
  for (Method m : {Method::kDqs, Method::kImplicit, Method::kElasticImplicit}) {
    config.method = m;
    auto make = [&]() -> std::unique_ptr<Deformer> {
      auto d = m == Method::kDqs ? CreateDeformer(c.rig, config) : CreateImplicitDeformer(c.rig, model, config);
      if (!d.ok()) std::abort();
      return std::move(*d);
    };
    auto d1 = make();
    const double one = Time(*d1, c, nullptr, cycles);
    auto d2 = make();
    const double two_ms = Time(*d2, c, &two, cycles);
    if (m == Method::kDqs) dqs2 = two_ms;
    const char* name = m == Method::kDqs ? "dqs" : m == Method::kImplicit ? "implicit" : "elastic-implicit";
    char thesis[32] = "";
    if (m == Method::kImplicit && c.thesis_fps > 0) std::snprintf(thesis, sizeof thesis, "%.0f", c.thesis_fps);
    std::printf("  %-18s %12.2f %12.2f %10.1f %10.1f %12s\n", name, one, two_ms, 1000 / two_ms, two_ms / dqs2, thesis);
  }
}

Case Limb(size_t vertices, double thesis_fps, int frames) {
  LimbOptions o;
  o.segments = 100;
  o.rings = uint32_t(std::max<size_t>(vertices / o.segments, 4));
  o.bones = 4;
  o.max_influences = 2;
  o.blend = 0.15f;
  auto rig = BuildRig(MakeLimb(o));
  if (!rig.ok()) std::abort();
  Case c;
  c.label = "procedural limb";
  c.rig = std::make_shared<const Rig>(std::move(*rig));
  for (int k = 0; k < frames; ++k) c.clip.push_back(LimbPose(c.rig->skeleton, double(k) / frames));
  c.thesis_fps = thesis_fps;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  // --quick: fewer cycles and no 170k case (CI smoke run).
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int cycles = quick ? 1 : 3;
  std::printf("sinew-bench-implicit: mean frame time over whole clips (every joint moving), DQS on the same rig "
              "as the reference\n");
  Run(Limb(4200, 95, 48), cycles);
  Run(Limb(32000, 15, 48), cycles);
  if (!quick) Run(Limb(172000, 3, 24), 1);
  const std::string bcn = std::string(SINEW_ASSIMP_MODELS) + "/X/BCN_Epileptic.X";
  if (std::filesystem::exists(bcn)) {
    auto asset = ImportAsset(bcn);
    auto rig = asset.ok() ? BuildRig(asset->rig) : absl::StatusOr<Rig>(asset.status());
    if (rig.ok() && !asset->clips.empty()) {
      Case c;
      c.label = "BCN_Epileptic.X (assimp-testmodels)";
      c.rig = std::make_shared<const Rig>(std::move(*rig));
      const Clip& clip = asset->clips[0];
      const int frames = 48;
      for (int k = 0; k < frames; ++k) {
        Pose p;
        SampleClip(clip, c.rig->skeleton, clip.duration * k / frames, p);
        c.clip.push_back(std::move(p));
      }
      c.thesis_fps = 0;
      Run(c, cycles);
    }
  }
  std::printf("\nThesis (GTX 680, Table 4.1, IS with every joint animated): Dana 4 164 vertices 95 fps, Hand 31 750 and "
              "Juna 32 056 15 fps, Armadillo 172 974 3 fps.\n");
  return 0;
}
