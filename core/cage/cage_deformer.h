// Cage deformation: the mesh follows a closed triangle cage through coordinates computed once
// per rig (mean value or Green coordinates); each frame gives the cage's vertex positions.
#pragma once

#include <memory>
#include <string>

#include "core/cage/green.h"
#include "core/cage/mvc.h"
#include "core/deformer/deformer.h"

namespace sinew {

using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

CageGeometry ToCageGeometry(const Cage& cage);
Eigen::Matrix3Xd ToPoints(std::span<const float> xyz);

// The cage positions a frame asks for: `frame.positions` (absolute) or rest + offsets.
void ResolveCage(const Cage& rest, const CageFrame& frame, Eigen::Matrix3Xd& out);

// Parameters of "cage-mvc" and "cage-green".
struct CageParams : MethodParams {
  uint32_t cage = 0;  // index into Rig::cages
};
std::span<const ParamSpec> CageParamSpecs();
absl::StatusOr<std::shared_ptr<const MethodParams>> ParseCageParams(const ParamSet& set, std::string_view field);

// "cage=N": the prepared data depends on the cage only.
std::string CageKey(const DeformerConfig& config);
// MethodInfo::check: the cage the parameters name is one of the rig's.
absl::Status CheckCageConfig(const Rig& rig, const DeformerConfig& config);

// The most bytes a cage method's coordinate matrices (float64, one row per mesh vertex, one
// column per cage vertex, and per cage face for Green coordinates) may take: 4 GiB.
inline constexpr uint64_t kMaxCoordinateBytes = uint64_t{4} << 30;
// RESOURCE_EXHAUSTED naming rig.cages[cage] when `rows` x `columns` doubles would pass
// kMaxCoordinateBytes, before anything is allocated (until 2026-12-01 a 500k-vertex mesh in a
// 10k-vertex cage asked for 40 GB and the allocation ended the process).
absl::Status CheckCoordinateBytes(uint64_t rows, uint64_t columns, uint32_t cage, const char* method);

// Φ (vertices x cage vertices) for "cage-mvc"; progress over the mesh vertices.
absl::StatusOr<std::shared_ptr<const Prepared>> PrepareMvcCage(const Rig& rig,
                                                               const DeformerConfig& config,
                                                               ThreadPool* pool,
                                                               const ProgressFn& progress);
// Green coordinates (φ, ψ) for "cage-green".
absl::StatusOr<std::shared_ptr<const Prepared>> PrepareGreenCage(const Rig& rig,
                                                                 const DeformerConfig& config,
                                                                 ThreadPool* pool,
                                                                 const ProgressFn& progress);
// Frames: exactly one CageFrame for the configured cage; no pose.
absl::StatusOr<std::unique_ptr<Deformer>> CreateCageDeformer(std::shared_ptr<const Rig> rig,
                                                             std::shared_ptr<const Prepared> prepared,
                                                             const DeformerConfig& config);

// out (3 floats per row of phi) = rest + Φ · delta, delta = deformed - rest cage (3 x n).
// Written as the difference so that the undeformed cage returns the rest mesh exactly.
void ApplyCageCoordinates(const RowMatrixXd& phi, std::span<const float> rest,
                          const Eigen::Matrix3Xd& delta, std::span<float> out, ThreadPool* pool);

}  // namespace sinew
