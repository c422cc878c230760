// sinew-bench-swingtwist [--runtime-only]: the elasticity-inspired deformers (swing-twist) against LBS in the same
// binary, and the precompute per joint.
//   runtime: frames/s of swing-twist ÷ frames/s of LBS on the procedural limb (100k and 1M
//            vertices, 1 and 2 threads), the same poses; the paper claims "minimal overhead
//            compared to LBS" (issue goal ≥ 0.5).
//   precompute: seconds per EMW joint and in total on BCN_Epileptic and the SuperCages Arm at the
//            default voxel size, and on the limb at grid sizes near the paper's Table 1 (20k–45k
//            grid vertices; the paper: 12–24 s per joint for both EMW solves, hardware not stated).
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "clients/import/asset_import.h"
#include "clients/import/supercages.h"
#include "core/deformer/deformer.h"
#include "core/procedural/limb.h"
#include "core/swingtwist/blas.h"
#include "core/swingtwist/method.h"
#include "bench/load_average.h"

namespace sinew {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Frames per second of `d` over the limb's clip (at least 0.5 s of frames).
double Rate(Deformer& d, const Rig& rig, ThreadPool* pool) {
  std::vector<float> out(rig.positions.size());
  std::vector<Pose> poses;
  for (int k = 0; k < 16; ++k) poses.push_back(LimbPose(rig.skeleton, k / 16.0));
  int frames = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (Seconds(t0) < 0.5 || frames < 8) {
    if (!d.Deform({&poses[frames % 16], {}}, out, pool).ok()) std::abort();
    ++frames;
  }
  return frames / Seconds(t0);
}

void Precompute(const char* name, const Rig& rig, double voxel, ThreadPool* pool) {
  DeformerConfig config("swing-twist");
  auto p = std::make_shared<SwingTwistParams>();
  p->voxel_size = voxel;
  config.params = p;
  const auto t0 = std::chrono::steady_clock::now();
  auto prepared = PrepareSwingTwist(rig, config, pool, {});
  const double s = Seconds(t0);
  if (!prepared.ok()) {
    std::printf("  %-22s %s\n", name, std::string(prepared.status().message()).c_str());
    return;
  }
  const auto& m = static_cast<const SwingTwistModel&>(**prepared);
  std::printf("  %-22s %6zu vertices %3zu joints  voxel %.4f: %6zu grid vertices, %2zu EMW joints  %6.2f s total, "
              "%5.2f s per EMW joint (2 threads)\n",
              name, rig.vertex_count(), rig.joint_count(), m.stats.voxel_size, m.stats.grid_vertices,
              m.stats.solved_joints, s, m.stats.solved_joints ? s / m.stats.solved_joints : 0.0);
}

}  // namespace
}  // namespace sinew

int main(int argc, char** argv) {
  const sinew::bench::LoadAverageReport load_average;  // printed before and after the run
  const bool runtime_only = argc > 1 && std::string(argv[1]) == "--runtime-only";
  using namespace sinew;
  ThreadPool pool(1);  // one worker and the calling thread: the "2 threads" printed below
  std::printf("runtime: swing-twist frames/s ÷ LBS frames/s, procedural limb, same poses\n");
  for (uint32_t vertices : {100000u, 1000000u}) {
    LimbOptions o;
    o.rings = vertices / o.segments;
    o.max_influences = 2;
    auto rig = std::make_shared<const Rig>(*BuildRig(MakeLimb(o)));
    DeformerConfig config("swing-twist");
    auto p = std::make_shared<SwingTwistParams>();
    p->voxel_size = 0.03;
    config.params = p;
    auto st = CreateDeformer(rig, config, &pool);
    auto lbs = CreateDeformer(rig, DeformerConfig("lbs"));
    if (!st.ok() || !lbs.ok()) return 1;
    for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const double a = Rate(**st, *rig, threads), b = Rate(**lbs, *rig, threads);
      std::printf("  %7u vertices, %d thread%s: swing-twist %8.1f/s, LBS %8.1f/s, ratio %.2f\n", vertices,
                  threads ? 2 : 1, threads ? "s" : " ", a, b, a / b);
    }
  }
  if (runtime_only) return 0;
  std::printf("precompute (both EMW solves per joint, biharmonic blend weights, transfer), BLAS: %s\n",
              SystemBlas().name.c_str());
  const std::string bcn = "/usr/share/assimp/models/X/BCN_Epileptic.X";
  if (std::filesystem::exists(bcn)) {
    auto asset = ImportAsset(bcn);
    if (asset.ok()) Precompute("BCN_Epileptic", *BuildRig(asset->rig), 0, &pool);
  }
  const std::string arm = std::string(SINEW_SHARED_DATA) + "/supercages-arm";
  if (std::filesystem::exists(arm)) {
    auto sc = ReadSuperCages(SuperCagesFilesIn(arm, "arm"));
    if (sc.ok()) Precompute("SuperCages Arm", *BuildRig(sc->rig), 0, &pool);
  }
  for (double voxel : {0.033, 0.026}) {  // the limb at about 20k and 40k grid vertices, the paper's range
    LimbOptions o;
    o.rings = 200;
    o.bones = 3;
    const Rig rig = *BuildRig(MakeLimb(o));
    Precompute(voxel == 0.033 ? "limb, voxel 0.033" : "limb, voxel 0.026", rig, voxel, &pool);
  }
  return 0;
}
