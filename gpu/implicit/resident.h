// Implicit skinning's device-resident data, laid out for gpu/implicit/program.cuh: core's
// per-rig ImplicitModel flattened into device arrays, the composition operators (once per
// device), and one session's tracking state carved out of a single allocation. The device
// program (gpu/implicit/device_program.cc) accounts for the bytes and owns the allocations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/deformer/deformer.h"
#include "core/implicit/implicit_skinning.h"
#include "gpu/implicit/implicit.cuh"
#include "gpu/runtime/device_api.h"

namespace sinew::gpu {

// Device allocations made for one resident object, freed by its owner through the DeviceApi.
struct DeviceAllocations {
  std::vector<void*> pointers;
  uint64_t bytes = 0;
};

// Device arrays of one model. `view` holds every device pointer but the rig's skinning arrays,
// which the caller fills from its resident rig.
struct ResidentModel {
  ImplicitModelView view{};
  DeviceAllocations memory;
  double mean_edge = 0;  // ImplicitModel::mean_edge (the relaxation's tolerance is a fraction of it)
};

// OK when the device program can run the model; FAILED_PRECONDITION names what it cannot.
absl::Status CheckImplicitModel(const ImplicitModel& model);
// Device bytes of the model's arrays (without the operators).
uint64_t ImplicitModelBytes(const ImplicitModel& model);
// Allocates and uploads. On failure, what was allocated is in out->memory.
bool UploadImplicitModel(DeviceApi& api, int device, const ImplicitModel& model, ResidentModel* out, std::string* error);

// The contact and bulge operator grids on one device.
struct ResidentOperators {
  const Float4* contact = nullptr;
  const Float4* bulge = nullptr;
  int n = 0, nd = 0;
  DeviceAllocations memory;
};
uint64_t OperatorBytes(const CompositionOperators& operators);
bool UploadOperators(DeviceApi& api, int device, const CompositionOperators& operators, ResidentOperators* out,
                     std::string* error);

// One session's tracking state: its bytes for `nodes` nodes in `components` connected components
// (the elastic relaxation's scalars are per component), and its arrays carved out of one zeroed
// allocation of that size.
uint64_t ImplicitStateBytes(uint32_t nodes, uint32_t components, bool elastic);
ImplicitStateView CarveImplicitState(void* base, uint32_t nodes, uint32_t components, bool elastic);

// `mean_edge`: the model's (ImplicitModel::mean_edge), which scales the relaxation's tolerance.
ImplicitSettings MakeImplicitSettings(const ImplicitConfig& config, bool elastic, double mean_edge);

}  // namespace sinew::gpu
