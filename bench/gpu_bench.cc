// sinew-bench-gpu: GPU LBS and DQS throughput on one device at 100k, 1M and 10M vertices
// (procedural limb, 8 bones, 4 influences), as vertices/s and as a ratio to the device's own
// memory-copy bandwidth on the bytes a frame reads and writes (device-to-device cudaMemcpy,
// same run). Kernel time only (CUDA events); the service path with batching, uploads and
// downloads is measured by bench/gpu_concurrency.sh. Prints "no GPU: <reason>" and exits 0
// where there is no device.
#include <cstdio>
#include <string>
#include <vector>

#include "bench/gpu_bench_kernels.h"
#include "core/deformer/skeletal.h"
#include "core/procedural/limb.h"

int main() {
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
    // Bytes a frame reads and writes: rest + output positions, offsets, joints, weights. The
    // reference copy moves half of them (each byte it copies is read once and written once), so
    // both sides of the ratio count the same device-memory traffic, and GB/s is read + written.
    const size_t bytes = 2 * sizeof(float) * rig->positions.size() + 4 * rig->weights.offsets.size() + 6 * entries;
    bench::GpuTimes t;
    if (!bench::TimeGpuSkinning(rig->positions.data(), rig->weights.offsets.data(), rig->weights.joints.data(),
                                rig->weights.weights.data(), rig->vertex_count(), entries, lbs.data(), dqs.data(),
                                rig->joint_count(), bytes / 2, &t, &error)) {
      std::printf("no GPU: %s\n", error.c_str());
      return 0;
    }
    for (auto [label, ms] : {std::pair{"copy", t.copy_ms}, std::pair{"LBS", t.lbs_ms}, std::pair{"DQS", t.dqs_ms}}) {
      std::printf("%-10u %-5s %11.4f %14.3e %10.1f %10.2f\n", n, label, ms, n / (ms * 1e-3), bytes / (ms * 1e6),
                  t.copy_ms / ms);
    }
  }
  return 0;
}
