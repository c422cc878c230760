// sinew-bench-gpu: GPU LBS, DQS and swing/twist throughput on one device at 100k, 1M and 10M
// vertices (procedural limb, 8 bones, 4 influences), as vertices/s and as a ratio to the device's
// own memory-copy bandwidth (device-to-device cudaMemcpy, same run; bytes read + written). The
// swing/twist rows carry the limb's skinning weights as d and s = t = 0.5: the kernel's cost does
// not depend on the values (its precompute at 10M vertices would take hours), its joint records
// are real ones. Kernel time only (CUDA events); the service path with batching, uploads and
// downloads is measured by bench/gpu_concurrency.sh. Prints "no GPU: <reason>" and exits 0
// where there is no device.
#include <cstdio>
#include <string>
#include <vector>

#include "bench/gpu_bench_kernels.h"
#include "core/deformer/skeletal.h"
#include "core/procedural/limb.h"
#include "core/swingtwist/swing_twist.h"
#include "bench/load_average.h"

int main() {
  const sinew::bench::LoadAverageReport load_average;  // printed before and after the run
  using namespace sinew;
  std::string error;
  const std::string name = bench::GpuName(&error);
  if (name.empty()) {
    std::printf("no GPU: %s\n", error.c_str());
    return 0;
  }
  std::printf("device 0: %s\n%-10s %-5s %11s %14s %10s %10s\n", name.c_str(), "vertices", "", "ms/frame",
              "vertices/s", "GB/s", "÷ memcpy");
  for (uint32_t n : {100'000u, 1'000'000u, 10'000'000u}) {
    LimbOptions o;
    o.segments = 100;
    o.rings = n / 100;
    o.bones = 8;
    o.max_influences = 4;
    auto rig = BuildRig(MakeLimb(o));
    if (!rig.ok()) return 1;
    const Pose pose = LimbPose(rig->skeleton, 0.5);
    std::vector<Similarity> world(rig->joint_count());
    std::vector<Affine34d> transforms(rig->joint_count());
    std::vector<float> lbs(12 * rig->joint_count()), dqs(12 * rig->joint_count());
    (void)SkeletalJointData(*rig, JointData::kMatrix, {&pose, {}}, world, transforms, lbs);
    (void)SkeletalJointData(*rig, JointData::kDualQuat, {&pose, {}}, world, transforms, dqs);
    const size_t entries = rig->weights.joints.size();
    // Swing/twist: the device layout of synthetic weights, the records of this pose.
    SwingTwistWeights sw;
    sw.offsets = rig->weights.offsets;
    sw.joints = rig->weights.joints;
    sw.d = rig->weights.weights;
    sw.s.assign(entries, 0.5f);
    sw.t.assign(entries, 0.5f);
    std::vector<float> rows, records(kSwingTwistDeviceJointFloats * rig->joint_count());
    uint32_t cols = 0;
    SwingTwistDeviceRows(sw, rows, cols);
    auto frames = ComputeCanonicalFrames(*rig);
    std::vector<JointRecord> joint_records(rig->joint_count());
    if (!frames.ok() || !SwingTwistJoints(*rig, *frames, transforms, joint_records).ok()) return 1;
    SwingTwistDeviceJoints(joint_records, records);
    // Bytes a frame reads and writes: rest + output positions, offsets, joints, weights (LBS,
    // DQS); rest + output positions and the rows (swing/twist). The reference copy moves half of
    // the LBS bytes (each byte it copies is read once and written once), so both sides of the
    // ratio count device-memory traffic, and GB/s is read + written.
    const size_t bytes = 2 * sizeof(float) * rig->positions.size() + 4 * rig->weights.offsets.size() + 6 * entries;
    const size_t st_bytes = 2 * sizeof(float) * rig->positions.size() + sizeof(float) * rows.size();
    bench::GpuTimes t;
    if (!bench::TimeGpuSkinning(rig->positions.data(), rig->weights.offsets.data(), rig->weights.joints.data(),
                                rig->weights.weights.data(), rig->vertex_count(), entries, lbs.data(), dqs.data(),
                                rig->joint_count(), {rows.data(), cols, records.data()}, bytes / 2, &t, &error)) {
      std::printf("no GPU: %s\n", error.c_str());
      return 0;
    }
    const double copy_rate = bytes / (t.copy_ms * 1e6);  // GB/s
    for (auto [label, ms, b] : {std::tuple{"copy", t.copy_ms, bytes}, std::tuple{"LBS", t.lbs_ms, bytes},
                                std::tuple{"DQS", t.dqs_ms, bytes}, std::tuple{"swing", t.swing_twist_ms, st_bytes}}) {
      std::printf("%-10u %-5s %11.4f %14.3e %10.1f %10.2f\n", n, label, ms, n / (ms * 1e-3), b / (ms * 1e6),
                  b / (ms * 1e6) / copy_rate);
    }
    std::printf("%-10u swing-twist ÷ LBS (vertices/s): %.2f\n", n, t.lbs_ms / t.swing_twist_ms);
  }
  return 0;
}
