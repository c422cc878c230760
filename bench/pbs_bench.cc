// sinew-bench-pbs: position-based skinning's solver speed beside the paper's Table 1 (6.7–13.9 ms
// per frame for 11k–35k constraints at 12 iterations on a 2.5 GHz laptop i5: 20–31 M constraint
// projections/s). On the elbow cylinder (radius 1, length 6, two bones, 90° bend) with voxel tets
// sized to land near the paper's constraint counts; each frame is the LBS prediction and 12
// sweeps of stretch, volume and bind constraints, colour by colour; 1 and 2 threads (a pool of
// one worker plus the caller). Projections/s = constraints × iterations ÷ frame time. The issue's
// goal: ≥ 2× the paper's rate on 2 cores.
#include <chrono>
#include <cstdio>
#include <memory>

#include "core/pbs/pbs.h"
#include "core/procedural/limb.h"
#include "core/rig/pose.h"
#include "bench/load_average.h"

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int main() {
  const sinew::bench::LoadAverageReport load_average;  // printed before and after the run
  using namespace sinew;
  ThreadPool pool(1);  // one worker and the calling thread: the "2 threads" printed below
  std::printf("%-8s %9s %8s %11s %9s %9s %14s %14s\n", "voxel", "particles", "tets", "constraints", "ms 1 thr",
              "ms 2 thr", "M proj/s 1 thr", "M proj/s 2 thr");
  LimbOptions o;
  o.rings = 121;
  o.segments = 32;
  o.bones = 2;
  o.length = 6;
  o.radius = 1;
  o.blend = 0.1f;
  auto rig = BuildRig(MakeLimb(o));
  if (!rig.ok()) return 1;
  for (double h : {0.28, 0.2, 0.16}) {
    DeformerConfig config("pbs");
    auto p = std::make_shared<PbsParams>();
    p->tets = PbsParams::Tets::kVoxels;
    p->voxel_size = h;
    config.params = p;
    auto prepared = PreparePbs(*rig, config, &pool, {});
    if (!prepared.ok()) return 1;
    const auto& model = static_cast<const PbsModel&>(**prepared);
    Pose pose = RestPose(rig->skeleton);
    pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(1.5707963, Eigen::Vector3d::UnitZ())));
    std::vector<Similarity> world(rig->joint_count());
    std::vector<Affine34d> skinning(rig->joint_count());
    SkinningTransforms(rig->skeleton, pose, world, skinning);
    std::vector<Affine34f> matrices;
    for (const auto& m : skinning) matrices.push_back(m.cast<float>());
    PbsState state;
    const size_t constraints = model.stretch.size() + model.volume.size() + model.bind.size();
    double ms[2];
    for (int t = 0; t < 2; ++t) {
      ThreadPool* threads = t == 0 ? nullptr : &pool;
      for (int k = 0; k < 5; ++k) SolvePbsFrame(model, *p, matrices, p->time_step, state, threads);  // warm-up
      int frames = 0;
      const auto start = Clock::now();
      while (Clock::now() - start < std::chrono::milliseconds(1500)) {
        SolvePbsFrame(model, *p, matrices, p->time_step, state, threads);
        ++frames;
      }
      ms[t] = std::chrono::duration<double, std::milli>(Clock::now() - start).count() / frames;
    }
    std::printf("%-8.2f %9zu %8zu %11zu %9.2f %9.2f %14.1f %14.1f\n", h, model.mesh.rest.size(), model.mesh.tets.size(),
                constraints, ms[0], ms[1], constraints * 12.0 / (ms[0] * 1e3), constraints * 12.0 / (ms[1] * 1e3));
  }
  std::printf("paper (Table 1, i5 laptop, 12 iterations): 11k-35k constraints in 6.7-13.9 ms, 20-31 M projections/s\n");
  return 0;
}
