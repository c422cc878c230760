// The per-vertex kernels a batch item can run (BatchItem::method), shared by the host side of the
// backend, the CUDA kernels and their CPU emulation. A core method names its kernel in
// DeviceStage::kernel; gpu/kernels.cc maps the name to this number (KernelByName). Adding a
// kernel: its vertex function in gpu/<method>/, a value here, a case in gpu/runtime/batch.cuh
// and a row in the kernel table of gpu/kernels.cc (device programs: gpu/runtime/program.h).
#pragma once

#include <cstdint>

namespace sinew::gpu {

enum class GpuMethod : uint32_t {
  kLbs = 0,           // "lbs": 12 floats per joint (row-major 3x4 matrix)
  kDqs = 1,           // "dqs": 12 floats per joint (dual quaternion, scale, shift x,y,z)
  kCage = 2,          // "cage": rest (optional) + coefficients · 3-vectors; 3 floats per column
  kCageThenLbs = 3,   // "cage+lbs": the cage moves the rest point, then LBS; cage, then joints
  kCageThenDqs = 4,   // "cage+dqs"
  kImplicit = 5,         // "implicit": a device program (gpu/implicit/), core/implicit/device_layout.h
  kElasticImplicit = 6,  // "elastic-implicit": the same, one block per sub-step
  kBlend = 7,         // "blend": (1 - b) LBS + b DQS, b = the coefficient column; matrices, then dual quaternions
  kSwingTwist = 8,    // "swing-twist": influences as coefficient rows (joint, d, s, t); 48 floats per joint
  kPbs = 9,           // "pbs": a device program (gpu/pbs/), core/pbs/device_layout.h
  kBaseline = 10,     // "baseline": a PointCode per coefficient row; the bones' ends (core/baseline/device_layout.h)
};

}  // namespace sinew::gpu
