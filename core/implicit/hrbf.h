// Hermite radial basis function (HRBF) implicit surfaces with the kernel φ(r) = r³ (seed 000,
// §2.2; Macêdo et al.): a field d(x) = Σ_k λ_k φ(‖x − v_k‖) + β_k · ∇φ(x − v_k) that is 0 at
// every centre v_k with gradient equal to the centre's unit outward normal n_k. Negative inside,
// positive outside. First piece of implicit skinning (issue 6): one such field per bone.
#pragma once

#include <vector>

#include <Eigen/Core>

#include "absl/status/statusor.h"

namespace sinew {

class Hrbf {
 public:
  // Fits the field to centres (3 x m) and unit normals (3 x m): solves the dense 4m x 4m
  // Hermite system (value 0 and gradient n_k at every centre) by LU with partial pivoting, in
  // double precision. INVALID_ARGUMENT for mismatched or non-finite input, FAILED_PRECONDITION
  // when the system is singular (e.g. coincident centres).
  static absl::StatusOr<Hrbf> Fit(const Eigen::Matrix3Xd& centers, const Eigen::Matrix3Xd& normals);

  // Field value at x.
  double Value(const Eigen::Vector3d& x) const;
  // Value and gradient at x.
  double ValueAndGradient(const Eigen::Vector3d& x, Eigen::Vector3d* gradient) const;

  const Eigen::Matrix3Xd& centers() const { return centers_; }
  // Largest |value| and |gradient − n| over the centres after the fit (quality of the solve).
  double max_value_residual() const { return value_residual_; }
  double max_gradient_residual() const { return gradient_residual_; }

 private:
  Eigen::Matrix3Xd centers_;
  Eigen::VectorXd lambda_;  // m
  Eigen::Matrix3Xd beta_;   // 3 x m
  double value_residual_ = 0, gradient_residual_ = 0;
};

// The compact-support reparametrisation t_r of seed 000 §2.3: maps a global field d (0 on the
// surface, negative inside) to f ∈ [0, 1], 1 for d ≤ −r, 0.5 at d = 0, 0 for d ≥ r; a quintic
// with C² joins (t' = t'' = 0 at ±r). Decreasing.
double CompactSupport(double d, double r);
// dt_r/dd (the thesis prints the case conditions the wrong way round; this is the derivative of
// the quintic inside the band and 0 outside).
double CompactSupportDerivative(double d, double r);

}  // namespace sinew
