// sinew-bench-swingtwist [--runtime-only | --precompute-only | --fit-only]: the elasticity-inspired deformers
// (swing-twist) against LBS in the same binary, and the precompute per joint.
//   rotation fit (always; alone with --fit-only): the EMW local step's fit ÷ JacobiSVD's Kabsch.
//   runtime: frames/s of swing-twist ÷ frames/s of LBS on the procedural limb (100k and 1M
//            vertices, 1 and 2 threads) and on BCN_Epileptic's clip, the same poses; the paper
//            claims "minimal overhead compared to LBS" (issue goal ≥ 0.5).
//   precompute: seconds per EMW joint and in total on BCN_Epileptic and the SuperCages Arm at the
//            default voxel size, and on the limb at grid sizes near the paper's Table 1 (20k–45k
//            grid vertices; the paper: 12–24 s per joint for both EMW solves, hardware not stated).
#include <Eigen/SVD>
#include <chrono>
#include <numbers>
#include <random>
#include <cstdio>
#include <filesystem>

#include "clients/import/asset_import.h"
#include "clients/import/supercages.h"
#include "core/clip/clip.h"
#include "core/deformer/deformer.h"
#include "core/procedural/limb.h"
#include "core/rig/pose.h"
#include "core/swingtwist/swing_twist.h"
#include "core/swingtwist/blas.h"
#include "core/swingtwist/emw.h"
#include "core/swingtwist/method.h"
#include "bench/load_average.h"

namespace sinew {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Frames per second of one frame function, best of several windows of at least 0.1 s (others'
// work on a shared machine only ever slows a window down).
template <class Frame>
double BestRate(Frame&& frame, int windows) {
  double best = 0;
  for (int w = 0; w < windows; ++w) {
    int frames = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (Seconds(t0) < 0.1 || frames < 4) frame(frames++);
    best = std::max(best, frames / Seconds(t0));
  }
  return best;
}

struct Rates {
  double swing_twist = 0, lbs = 0, portable = 0;
};

// Swing-twist through its deformer (the kernel where the CPU has one), LBS, and swing-twist's
// portable loop (SwingTwistSkinning without the kernel's blocks, its records made as the deformer
// makes them) over the same 16 poses, in alternating rounds.
Rates Measure(Deformer& st, Deformer& lbs, const Rig& rig, const SwingTwistModel& m, const std::vector<Pose>& poses,
              ThreadPool* pool) {
  std::vector<float> out(rig.positions.size());
  std::vector<Similarity> world(rig.joint_count());
  std::vector<Affine34d> skinning(rig.joint_count());
  std::vector<JointRecord> records(rig.joint_count());
  auto through = [&](Deformer& d) {
    return [&](int k) {
      if (!d.Deform({&poses[k % poses.size()], {}}, out, pool).ok()) std::abort();
    };
  };
  auto portable = [&](int k) {
    SkinningTransforms(rig.skeleton, poses[k % poses.size()], world, skinning);
    if (!SwingTwistJoints(rig, m.frames, skinning, records, m.weights.parents).ok()) std::abort();
    SwingTwistSkinning(rig.positions, m.weights, records, out, pool);
  };
  Rates r;
  for (int round = 0; round < 4; ++round) {
    r.swing_twist = std::max(r.swing_twist, BestRate(through(st), 2));
    r.lbs = std::max(r.lbs, BestRate(through(lbs), 2));
    r.portable = std::max(r.portable, BestRate(portable, 1));
  }
  return r;
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

// The EMW local step's rotation fit (FitRotation) against Kabsch by JacobiSVD, the plain
// reference, on the same covariances: a voxel's edges turned (any angle) and stretched by up to
// 30 %, the start 1e-3 rad from the fit (what the solve's later iterations give it) and the
// identity (its first). Fits per second, best of three runs of 200 000 each; the largest
// difference between the two fits.
void RotationFit() {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(-1, 1);
  auto turn = [&](double angle) {
    return Eigen::AngleAxisd(angle, Eigen::Vector3d(u(rng), u(rng), u(rng)).normalized()).toRotationMatrix();
  };
  auto kabsch = [](const Eigen::Matrix3d& cov) {
    Eigen::JacobiSVD<Eigen::Matrix3d> svd(cov, Eigen::ComputeFullU | Eigen::ComputeFullV);
    const double d = (svd.matrixV() * svd.matrixU().transpose()).determinant() < 0 ? -1.0 : 1.0;
    return Eigen::Matrix3d(svd.matrixV() * Eigen::Vector3d(1, 1, d).asDiagonal() * svd.matrixU().transpose());
  };
  constexpr size_t kFits = 200000;
  std::vector<Eigen::Matrix3d> cov(kFits), near(kFits), out(kFits);
  for (size_t k = 0; k < kFits; ++k) {
    const Eigen::Matrix3d q = turn(std::numbers::pi * std::abs(u(rng)));
    const Eigen::Matrix3d f = Eigen::Matrix3d::Identity() + 0.3 * Eigen::Matrix3d::NullaryExpr([&] { return u(rng); });
    cov[k] = 0.0625 * (q * f).transpose();
    near[k] = turn(1e-3) * kabsch(cov[k]);
  }
  auto rate = [&](auto&& fit) {
    double best = 0;
    for (int run = 0; run < 3; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t k = 0; k < kFits; ++k) out[k] = fit(k);
      best = std::max(best, kFits / Seconds(t0));
    }
    return best;
  };
  const double svd = rate([&](size_t k) { return kabsch(cov[k]); });
  const std::vector<Eigen::Matrix3d> reference = out;
  const double warm = rate([&](size_t k) { return FitRotation(cov[k], near[k]); });
  double differs = 0;
  for (size_t k = 0; k < kFits; ++k) differs = std::max(differs, (out[k] - reference[k]).norm());
  const double cold = rate([&](size_t k) { return FitRotation(cov[k], Eigen::Matrix3d::Identity()); });
  for (size_t k = 0; k < kFits; ++k) differs = std::max(differs, (out[k] - reference[k]).norm());
  std::printf("rotation fit (the EMW local step), fits/s: JacobiSVD %.3g; FitRotation from 1e-3 rad %.3g (%.1fx), "
              "from the identity %.3g (%.1fx); largest difference from JacobiSVD's %.1e\n",
              svd, warm, warm / svd, cold, cold / svd, differs);
}

}  // namespace
}  // namespace sinew

int main(int argc, char** argv) {
  const sinew::bench::LoadAverageReport load_average;  // printed before and after the run
  const bool runtime_only = argc > 1 && std::string(argv[1]) == "--runtime-only";
  using namespace sinew;
  const bool precompute_only = argc > 1 && std::string(argv[1]) == "--precompute-only";
  RotationFit();
  if (argc > 1 && std::string(argv[1]) == "--fit-only") return 0;
  ThreadPool pool(1);  // one worker and the calling thread: the "2 threads" printed below
  if (!precompute_only) {
    std::printf("runtime: swing-twist frames/s ÷ LBS frames/s, same poses, best of alternating 0.1 s windows (the kernel; the portable loop in brackets)\n");
  }
  for (uint32_t vertices : {100000u, 1000000u}) {
    if (precompute_only) break;
    LimbOptions o;
    o.rings = vertices / o.segments;
    o.max_influences = 2;
    auto rig = std::make_shared<const Rig>(*BuildRig(MakeLimb(o)));
    DeformerConfig config("swing-twist");
    auto p = std::make_shared<SwingTwistParams>();
    p->voxel_size = 0.03;
    config.params = p;
    auto prepared = PrepareSwingTwist(*rig, config, &pool, {});
    if (!prepared.ok()) return 1;
    const auto& w = static_cast<const SwingTwistModel&>(**prepared).weights;
    uint32_t widest = 0;
    for (size_t v = 0; v + 1 < w.offsets.size(); ++v) widest = std::max(widest, w.offsets[v + 1] - w.offsets[v]);
    const auto t0 = std::chrono::steady_clock::now();
    const SwingTwistBlocks blocks =
        SwingTwistCpuBlocks(rig->positions, w, static_cast<const SwingTwistModel&>(**prepared).frames);
    std::printf("  %7u vertices: %.2f swing-twist influences per vertex (widest %u), LBS %.2f; the kernel's layout "
                "made in %.3f s, %.1f MB\n",
                vertices, double(w.offsets.back()) / rig->vertex_count(), widest,
                double(rig->weights.offsets.back()) / rig->vertex_count(), Seconds(t0), blocks.Bytes() / 1e6);
    auto st = CreateSwingTwistDeformer(rig, *prepared, config);
    auto lbs = CreateDeformer(rig, DeformerConfig("lbs"));
    if (!st.ok() || !lbs.ok()) return 1;
    std::vector<Pose> poses;
    for (int k = 0; k < 16; ++k) poses.push_back(LimbPose(rig->skeleton, k / 16.0));
    for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const Rates r = Measure(**st, **lbs, *rig, static_cast<const SwingTwistModel&>(**prepared), poses, threads);
      std::printf("  %7u vertices, %d thread%s: swing-twist %8.1f/s, LBS %8.1f/s, ratio %.2f (portable loop %.2f)\n",
                  vertices, threads ? 2 : 1, threads ? "s" : " ", r.swing_twist, r.lbs, r.swing_twist / r.lbs,
                  r.portable / r.lbs);
    }
  }
  const std::string bcn = "/usr/share/assimp/models/X/BCN_Epileptic.X";
  if (auto asset = precompute_only ? absl::StatusOr<ImportedAsset>(absl::CancelledError()) : ImportAsset(bcn);
      asset.ok() && !asset->clips.empty()) {
    // A real character: 58 joints, its vertices in the file's order (more joints, and shorter
    // runs, per block than the limb's).
    auto rig = std::make_shared<const Rig>(*BuildRig(asset->rig));
    DeformerConfig config("swing-twist");
    auto prepared = PrepareSwingTwist(*rig, config, &pool, {});
    if (!prepared.ok()) return 1;
    const auto& m = static_cast<const SwingTwistModel&>(**prepared);
    std::vector<Pose> poses(16);
    for (int k = 0; k < 16; ++k) SampleClip(asset->clips[0], rig->skeleton, asset->clips[0].duration * k / 15, poses[k]);
    auto st = CreateSwingTwistDeformer(rig, *prepared, config);
    auto lbs = CreateDeformer(rig, DeformerConfig("lbs"));
    if (!st.ok() || !lbs.ok()) return 1;
    const size_t lanes = m.cpu_blocks.x.size(), influences = m.weights.offsets.back();
    size_t dense = 0;
    for (uint8_t d : m.cpu_blocks.dense) dense += d;
    std::printf("  BCN_Epileptic, %zu vertices: %.2f influences per vertex, LBS %.2f; %zu kernel lanes (%.0f %% padding, "
                "%.0f %% in rows of eight vertices)\n",
                rig->vertex_count(), double(influences) / rig->vertex_count(),
                double(rig->weights.offsets.back()) / rig->vertex_count(), lanes,
                lanes ? 100.0 * double(lanes - influences) / lanes : 0.0,
                lanes ? 100.0 * 8 * double(dense) / lanes : 0.0);
    for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const Rates r = Measure(**st, **lbs, *rig, m, poses, threads);
      std::printf("  BCN_Epileptic, %d thread%s: swing-twist %8.1f/s, LBS %8.1f/s, ratio %.2f (portable loop %.2f)\n",
                  threads ? 2 : 1, threads ? "s" : " ", r.swing_twist, r.lbs, r.swing_twist / r.lbs, r.portable / r.lbs);
    }
  }
  if (runtime_only) return 0;
  std::printf("precompute (both EMW solves per joint, biharmonic blend weights, transfer), BLAS: %s\n",
              SystemBlas().name.c_str());
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
