// The device kernels a core DeviceStage can name (DeviceStage::kernel), and what each needs:
// the table in gpu/kernels.cc is the one place a method's GPU stage is registered.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "gpu/runtime/kernels.h"

namespace sinew::gpu {

class DeviceProgram;

struct KernelInfo {
  std::string_view name;  // DeviceStage::kernel
  GpuMethod kernel;
  // A per-vertex coefficient matrix on the device (GpuBackend::UploadCoefficients).
  bool coefficients = false;
  // A frame's parameters: `joint_blocks` blocks of 12 floats per joint, after 3 floats per
  // coefficient column when `cage_points`.
  uint32_t joint_blocks = 0;
  bool cage_points = false;
  // A device program (per-rig model, per-session state; gpu/runtime/program.h), or null.
  const DeviceProgram* (*program)() = nullptr;
  // The coefficient matrix's shape: null when `cols` suits the kernel, else what it needs.
  // Null function: any width.
  const char* (*check_cols)(uint32_t cols) = nullptr;
  // A frame's parameter count is the method's (SessionSpec::frame_floats, its deformer's
  // device_param_count), not a function of the joints.
  bool method_frame = false;
};

// The kernel that runs a DeviceStage (e.g. "cage+dqs"); FAILED_PRECONDITION naming it when
// this backend has no such kernel.
absl::StatusOr<GpuMethod> KernelByName(std::string_view kernel);
// The kernel's row (never null for a GpuMethod value in the table).
const KernelInfo* FindKernel(GpuMethod kernel);
// True for kernels that are device programs with per-rig models and per-session state
// (GpuBackend::UploadModel, SessionSpec::model).
bool KernelHasModel(GpuMethod kernel);
// True for kernels that read a per-vertex coefficient matrix (GpuBackend::UploadCoefficients).
bool KernelHasCoefficients(GpuMethod kernel);

}  // namespace sinew::gpu
