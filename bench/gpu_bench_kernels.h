// Plain-C++ interface of sinew-bench-gpu's CUDA side (kept free of core headers so that nvcc
// compiles it as C++17).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sinew::bench {

struct GpuTimes {
  double copy_ms = 0, lbs_ms = 0, dqs_ms = 0, swing_twist_ms = 0;  // per frame, mean of 20
};

// Swing/twist's device data (core/swingtwist/swing_twist.h's device layout).
struct SwingTwistData {
  const float* rows = nullptr;  // vertices x cols
  uint32_t cols = 0;
  const float* joints = nullptr;  // 48 floats per joint
};

// Device name, or "" with `error` set when there is no usable device.
std::string GpuName(std::string* error);

// Uploads one rig (host arrays) and times LBS, DQS, swing/twist and a device-to-device copy of
// `copy_bytes`.
bool TimeGpuSkinning(const float* rest, const uint32_t* offsets, const uint16_t* joints,
                     const float* weights, size_t vertices, size_t entries, const float* lbs_joints,
                     const float* dqs_joints, size_t joint_count, const SwingTwistData& swing_twist,
                     size_t copy_bytes, GpuTimes* out, std::string* error);

}  // namespace sinew::bench
