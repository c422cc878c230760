// Maximum entropy coordinates (Hormann, Sukumar 2008): the valid barycentric coordinates of a
// point x with respect to points p_k that are closest, in relative entropy, to given prior masses
// m_k. They maximise −Σ b_k ln(b_k / m_k) subject to Σ b_k = 1 and Σ b_k (p_k − x) = 0, so
//   b_k = m_k exp(−λ·(p_k − x)) / Z(λ),   Z(λ) = Σ_k m_k exp(−λ·(p_k − x)),
// with λ ∈ R³ the minimiser of the convex function ln Z (seed-004 §4.4). SuperCages uses them to
// turn localised joint masses into coordinates of the joints w.r.t. the cage (SKELUP, §5.2).
//
// Solver: damped Newton on ln Z with a backtracking (Armijo) line search, in coordinates relative
// to x scaled by the point spread s = max_k |p_k − x|, evaluated with log-sum-exp (no overflow
// for any λ), with the Hessian regularised where it is (nearly) singular. The weights are
// positive and sum to 1 for any input; linear precision is exact (to the gradient tolerance) only
// when x lies strictly inside the convex hull of the points: otherwise ln Z has no minimiser, the
// solver stops without converging and linear_precision_error tells how far off it is.
#pragma once

#include <Eigen/Core>

namespace sinew {

struct MecOptions {
  int max_iterations = 100;  // Newton iterations
  // Stop when |Σ b_k (p_k − x)| ≤ gradient_tolerance · s (s = max_k |p_k − x|): the gradient of
  // ln Z in the scaled coordinates.
  double gradient_tolerance = 1e-12;
  // Prior masses below mass_floor · (largest mass) (zero, negative or NaN included) are raised
  // to it: MEC needs positive masses. All masses non-positive: uniform masses.
  double mass_floor = 1e-10;
  int max_line_search_steps = 50;  // halvings of a Newton step before giving up
};

struct MecResult {
  Eigen::VectorXd weights;             // k coordinates, ≥ 0, summing to 1
  // |Σ_k w_k (p_k − x)| (= |Σ_k w_k p_k − x| without the rounding of large coordinates), in
  // the points' units.
  double linear_precision_error = 0;
  int iterations = 0;                  // Newton steps taken
  bool converged = false;              // gradient tolerance reached
};

// Maximum entropy coordinates of x with respect to points (3 x k) and prior masses (k, any sign:
// clamped to a positive floor, see MecOptions). With no points, or prior.size() != k: empty
// weights, converged = false and an infinite error.
MecResult MaximumEntropyCoordinates(const Eigen::Matrix3Xd& points, const Eigen::VectorXd& prior,
                                    const Eigen::Vector3d& x, const MecOptions& options = {});

}  // namespace sinew
