// sinew-bench-supercages: frame time of every cage mode against plain LBS on the same rig, in
// the same run, for the thesis' Arm (2089 vertices, 58-vertex cage) and a 120k-vertex
// procedural limb with a box cage; plus the one-off preparation times. The thesis' single-
// threaded figures (Table 4.1) are printed beside ours: Arm LBS frame 0.88 ms (coarse cage) to
// 1.61 ms (medium, the 58-vertex cage used here); 120k Rattlesnake LBS frame 50.03 ms.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "clients/import/supercages.h"
#include "core/deformer/deformer.h"
#include "core/procedural/limb.h"
#include "core/supercages/supercages.h"
#include "bench/load_average.h"

namespace {

using namespace sinew;
using Clock = std::chrono::steady_clock;

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Median frame time in ms of `frames` calls.
double Time(const std::function<void()>& frame, int frames) {
  std::vector<double> t;
  for (int i = 0; i < frames; ++i) {
    const auto t0 = Clock::now();
    frame();
    t.push_back(Millis(Clock::now() - t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void Bench(const std::string& label, std::shared_ptr<const Rig> rig, const Pose& pose,
           const std::vector<float>& offsets, int frames, double thesis_lbs_ms) {
  std::printf("\n%s: %zu vertices, %zu joints, cage %zu vertices / %zu faces\n", label.c_str(),
              rig->vertex_count(), rig->joint_count(), rig->cages[0].vertex_count(),
              rig->cages[0].triangles.size() / 3);
  const CageFrame cage{0, CageInputMode::kOffsets, offsets};
  std::vector<float> out(rig->positions.size());
  struct Mode {
    const char* name;
    const char* method;
    bool dqs;  // "supercages": DQS skinning (else LBS)
    bool pose, cage, edit;
  };
  const Mode modes[] = {
      {"skeleton only, LBS", "lbs", false, true, false, false},
      {"skeleton only, DQS", "dqs", false, true, false, false},
      {"cage only, MVC", "cage-mvc", false, false, true, false},
      {"cage only, Green", "cage-green", false, false, true, false},
      {"hybrid SuperCages, LBS", "supercages", false, true, true, false},
      {"hybrid SuperCages, DQS", "supercages", true, true, true, false},
      {"hybrid + posed-cage edit (LBS)", "supercages", false, true, true, true},
  };
  std::printf("  %-32s %10s %12s %12s %10s\n", "mode", "prepare ms", "1 thread ms", "2 threads ms", "÷ LBS");
  double lbs1 = 0;
  for (const Mode& m : modes) {
    DeformerConfig config;
    config.method = m.method;
    if (config.method == "supercages") {
      auto params = std::make_shared<SuperCagesParams>();
      params->dqs = m.dqs;
      config.params = params;
    }
    const MethodInfo* info = FindMethod(m.method);
    const auto t0 = Clock::now();
    std::shared_ptr<const Prepared> prepared;
    ThreadPool prep_pool(1);
    if (info->prepare) {
      auto p = info->prepare(*rig, config, &prep_pool, {});
      if (!p.ok()) {
        std::printf("  %-32s %s\n", m.name, p.status().ToString().c_str());
        continue;
      }
      prepared = *p;
    }
    const double prepare_ms = Millis(Clock::now() - t0);
    auto d = info->create(rig, prepared, config);
    if (!d.ok()) {
      std::printf("  %-32s %s\n", m.name, d.status().ToString().c_str());
      continue;
    }
    std::vector<float> edit(offsets.size());
    for (size_t i = 0; i < edit.size(); ++i) edit[i] = 1e-3f * float(i % 7);
    const CageFrame posed{0, CageInputMode::kOffsets, edit};
    FrameInput in{m.pose ? &pose : nullptr, m.cage ? std::span(&cage, 1) : std::span<const CageFrame>(),
                  m.edit ? &posed : nullptr};
    double ms[2];
    ThreadPool pool(1);
    for (int threads : {1, 2}) {
      ThreadPool* p = threads == 1 ? nullptr : &pool;
      (void)(*d)->Deform(in, out, p);  // warm-up
      ms[threads - 1] = Time([&] { (void)(*d)->Deform(in, out, p); }, frames);
    }
    if (config.method == "lbs") lbs1 = ms[0];
    std::printf("  %-32s %10.1f %12.3f %12.3f %10.2f\n", m.name, prepare_ms, ms[0], ms[1], ms[0] / lbs1);
  }
  std::printf("  thesis (single-threaded, 2015 laptop): LBS frame %.2f ms -> ours %.3f ms (%.0fx)\n",
              thesis_lbs_ms, lbs1, thesis_lbs_ms / lbs1);
}

}  // namespace

int main(int argc, char** argv) {
  const sinew::bench::LoadAverageReport load_average;  // printed before and after the run
  std::string data = SINEW_SHARED_DATA;
  if (argc > 1) data = argv[1];
  const std::string arm = data + "/supercages-arm";
  if (std::filesystem::exists(arm + "/arm.obj")) {
    auto sc = ReadSuperCages(SuperCagesFilesIn(arm, "arm"));
    if (!sc.ok()) {
      std::fprintf(stderr, "%s\n", sc.status().ToString().c_str());
      return 1;
    }
    auto rig = BuildRig(sc->rig);
    if (!rig.ok()) return 1;
    auto shared = std::make_shared<const Rig>(std::move(*rig));
    Pose pose;
    SampleClip(sc->skeleton_clip, shared->skeleton, 5.0, pose);
    std::vector<float> offsets;
    SampleCageClip(sc->cage_clip, 1.5, offsets);
    Bench("Arm (thesis fixture)", shared, pose, offsets, 200, 1.61);
  } else {
    std::printf("Arm data not found in %s (pass the shared data folder as argument)\n", arm.c_str());
  }
  LimbOptions o;
  o.rings = 1200;
  o.segments = 100;  // 120 000 vertices, like the thesis' Timber Rattlesnake (120 066)
  o.bones = 8;
  o.max_influences = 4;
  RigInput in = MakeLimb(o);
  in.rig.cages.push_back(MakeLimbCage(o, 10));
  auto rig = BuildRig(std::move(in));
  if (!rig.ok()) {
    std::fprintf(stderr, "%s\n", rig.status().ToString().c_str());
    return 1;
  }
  auto shared = std::make_shared<const Rig>(std::move(*rig));
  const Pose pose = LimbPose(shared->skeleton, 0.3);
  std::vector<float> offsets(shared->cages[0].positions.size());
  for (size_t i = 0; i < offsets.size(); i += 3) offsets[i + 1] = 0.05f * float((i / 12) % 3);
  Bench("procedural limb, 120k vertices", shared, pose, offsets, 20, 50.03);
  return 0;
}
