// Composition operators of implicit skinning (seed 000 §2.5): binary functions g(f1, f2) of two
// compact fields (0.5 on the surface, > 0.5 inside) that build one field for the whole
// character out of the per-bone fields.
//
// - union: max(f1, f2), gradient of the larger field (discontinuous where f1 = f2);
// - clean union: the same 0.5 iso-surface as max, smooth elsewhere;
// - contact g_dc: from clean union (d = 0) to full contact (d = 1), a 0.5 "valley" along the
//   diagonal f1 = f2 that becomes the contact surface between two interpenetrating parts;
// - bulge in contact g_db: the contact valley plus an inflation of the 0.5 iso-line near the
//   crease (cubic B-spline profile through the thesis' control points).
// d comes from a controller of the angle between the two gradients (§2.5.2–2.5.3).
//
// The grid operators are tabulated over (f1, f2, d) ∈ [0, 1]³ by solving the bi-harmonic
// equation Δ²g = 0 on every d slice with the boundary conditions of the thesis' Eq. 4.3
// (g(f,0) = f, g(0,f) = f, g(f,1) = g(1,f) = 1, zero normal slope on the two axes) and g = 0.5
// on the operator's profile curve (Eq. 4.4), discretised with the 13-point stencil (spec
// §2.5.4). They do not depend on any character: built once, cached on disk, shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "absl/status/statusor.h"
#include "core/deformer/deformer.h"
#include "core/implicit/implicit_params.h"
#include "core/parallel/thread_pool.h"

namespace sinew {

const char* JointOperatorName(JointOperator op);

enum class OperatorShape : uint8_t { kContact = 1, kBulge = 2 };

struct OperatorGridOptions {
  int resolution = 129;  // nodes per f axis, odd so that 0.5 is a node (thesis: 128)
  int slices = 33;       // nodes along d
  double kappa = 0.95;   // full contact stops at f = 0.5 + 0.5·κ, short of the bone (spec §2.5.3)
};

// One operator tabulated on nodes (i, j, k) ↔ (f1, f2, d) = (i, j, k) / (n − 1): per node
// (g, ∂g/∂f1, ∂g/∂f2, 0), read by trilinear interpolation.
class OperatorGrid {
 public:
  // Solves every d slice (in parallel on `pool`). `progress` gets the fraction done.
  static absl::StatusOr<OperatorGrid> Build(OperatorShape shape, const OperatorGridOptions& options,
                                            ThreadPool* pool = nullptr, const ProgressFn& progress = {});

  // g(f1, f2, d) and its two partial derivatives. Inputs are clamped to [0, 1]; a NaN reads as 0.
  float Sample(float f1, float f2, float d, float* g1, float* g2) const;
  // The solved value at node (i, j) of slice k.
  float Node(int i, int j, int k) const { return cells_[Index(i, j, k)][0]; }

  OperatorShape shape() const { return shape_; }
  int resolution() const { return n_; }
  int slices() const { return nd_; }
  // Every node's (g, ∂g/∂f1, ∂g/∂f2, 0), i fastest, then j, then k (device copies).
  const std::vector<Eigen::Vector4f>& cells() const { return cells_; }
  const OperatorGridOptions& options() const { return options_; }
  size_t Bytes() const { return cells_.size() * sizeof(Eigen::Vector4f); }

  // Binary file with a header (magic, version, shape, sizes, options) and a checksum;
  // Load fails with DATA_LOSS on a truncated or corrupt file.
  absl::Status Save(const std::string& path) const;
  static absl::StatusOr<OperatorGrid> Load(const std::string& path);

 private:
  size_t Index(int i, int j, int k) const { return (size_t(k) * n_ + size_t(j)) * n_ + size_t(i); }
  OperatorShape shape_ = OperatorShape::kContact;
  OperatorGridOptions options_;
  int n_ = 0, nd_ = 0;
  std::vector<Eigen::Vector4f> cells_;
};

// The profile of g_db at bulge amount d: the clamped cubic B-spline (knots {0,0,0,0,½,1,1,1,1})
// through the thesis' control points lerped from the aligned ones by d, at parameter t ∈ [0, 1].
// Returns (f1, f2) on the purple branch (the yellow branch is its mirror).
Eigen::Vector2d BulgeProfile(double d, double t);

// Controllers d(α) of §2.5.3 for the angle α ∈ [0, π] between the two gradients.
double ContactController(double alpha);  // 0 up to π/2, then smoothstep to 1 at π
double BulgeController(double alpha);    // smoothstep from 0 at α = 0 to 1 at π/2

// Both grid operators, shared read-only.
struct CompositionOperators {
  OperatorGrid contact;  // its d = 0 slice is the clean union
  OperatorGrid bulge;
  size_t Bytes() const { return contact.Bytes() + bulge.Bytes(); }
};

// Where SharedOperators keeps its files ("" = memory only). Set once at start-up.
void SetOperatorCacheDirectory(std::string directory);
std::string OperatorCacheDirectory();

// The process-wide operators for `options`: loaded from the cache directory when a valid file is
// there, else built (seconds; progress reported) and written there (failures to write are not
// errors). Thread-safe; built once per process.
absl::StatusOr<std::shared_ptr<const CompositionOperators>> SharedOperators(
    const OperatorGridOptions& options = {}, ThreadPool* pool = nullptr, const ProgressFn& progress = {});

}  // namespace sinew
