#include "core/cage/mec.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Eigenvalues>

namespace sinew {

namespace {

// Armijo sufficient-decrease constant of the line search.
constexpr double kArmijo = 1e-4;
// Longest Newton step, in the scaled coordinates (|p_k − x| ≤ 1): a step that long already
// changes weight ratios by up to e^200; longer ones would only be halved by the line search.
constexpr double kMaxStep = 100;
// Hessian eigenvalues are raised to at least this fraction of the largest one.
constexpr double kEigenFloor = 1e-12;

// ln Z and the weights at λ (the scaled problem: v_k = (p_k − x) / s).
struct Evaluation {
  double log_z = 0;
  Eigen::VectorXd weights;  // b_k
  Eigen::Vector3d mean;     // Σ b_k v_k = −∇ ln Z
};

void Evaluate(const Eigen::Matrix3Xd& v, const Eigen::VectorXd& log_mass, const Eigen::Vector3d& lambda,
              Evaluation& e) {
  // a_k = ln m_k − λ·v_k; log-sum-exp so that no λ overflows.
  e.weights.noalias() = log_mass - v.transpose() * lambda;
  const double top = e.weights.maxCoeff();
  e.weights = (e.weights.array() - top).exp();
  const double sum = e.weights.sum();  // ≥ 1: the largest term is exp(0)
  e.weights /= sum;
  e.log_z = top + std::log(sum);
  e.mean.noalias() = v * e.weights;
}

}  // namespace

MecResult MaximumEntropyCoordinates(const Eigen::Matrix3Xd& points, const Eigen::VectorXd& prior,
                                    const Eigen::Vector3d& x, const MecOptions& options) {
  MecResult result;
  const Eigen::Index k = points.cols();
  if (k == 0 || prior.size() != k) {
    result.linear_precision_error = std::numeric_limits<double>::infinity();
    return result;
  }

  // Masses: positive, at least mass_floor times the largest one (non-finite ones get the floor).
  double max_mass = 0;
  for (Eigen::Index i = 0; i < k; ++i) {
    if (std::isfinite(prior[i])) max_mass = std::max(max_mass, prior[i]);
  }
  Eigen::VectorXd log_mass(k);
  if (!(max_mass > 0)) {
    log_mass.setZero();  // no usable prior: uniform masses
  } else {
    // A floor that is not a positive number (NaN: std::max would keep it) is the smallest one.
    const double floor_fraction = options.mass_floor > 0 && std::isfinite(options.mass_floor)
                                      ? options.mass_floor : std::numeric_limits<double>::min();
    const double floor = floor_fraction * max_mass;
    for (Eigen::Index i = 0; i < k; ++i) {
      const double m = prior[i];
      log_mass[i] = std::log(std::isfinite(m) && m > floor ? m : floor);
    }
  }

  // Coordinates relative to x, scaled by the spread s.
  Eigen::Matrix3Xd v = points.colwise() - x;
  // Non-finite input anywhere (maxCoeff passes a NaN over unless it comes first: until 2026-12-07
  // a NaN in a later point made NaN weights) gives the normalised masses.
  const double spread = v.allFinite() ? v.colwise().norm().maxCoeff() : std::numeric_limits<double>::infinity();
  if (!(spread > 0) || !std::isfinite(spread)) {
    // Every point at x (any weights reproduce it), or non-finite input: the normalised masses.
    result.weights = (log_mass.array() - log_mass.maxCoeff()).exp();
    result.weights /= result.weights.sum();
    result.converged = spread == 0;
    result.linear_precision_error =
        spread == 0 ? 0.0 : std::numeric_limits<double>::infinity();
    return result;
  }
  v /= spread;

  const double tolerance = std::max(options.gradient_tolerance, 0.0);
  Eigen::Vector3d lambda = Eigen::Vector3d::Zero();
  Evaluation cur, trial;
  Evaluate(v, log_mass, lambda, cur);
  Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d> eigen;
  int iterations = 0;
  for (; iterations < options.max_iterations; ++iterations) {
    const double gradient_norm = cur.mean.norm();
    if (gradient_norm <= tolerance) break;
    // Hessian of ln Z: the covariance of the v_k under the weights b_k.
    const Eigen::Matrix3Xd centred = v.colwise() - cur.mean;
    const Eigen::Matrix3d hessian = centred * cur.weights.asDiagonal() * centred.transpose();
    eigen.computeDirect(hessian);
    Eigen::Vector3d values = eigen.eigenvalues();
    const double top = values.maxCoeff();
    // Regularised: never below a small fraction of the largest eigenvalue (flat point sets, x
    // on or outside the hull), plain gradient descent when the Hessian vanishes altogether.
    if (top > 0) {
      values = values.cwiseMax(kEigenFloor * top);
    } else {
      values.setOnes();
    }
    // Newton step Δλ = −H⁻¹∇ln Z = H⁻¹·mean.
    const Eigen::Matrix3d& q = eigen.eigenvectors();
    Eigen::Vector3d step = q * (q.transpose() * cur.mean).cwiseQuotient(values);
    if (step.norm() > kMaxStep) step *= kMaxStep / step.norm();
    const double slope = -cur.mean.dot(step);  // directional derivative of ln Z, < 0

    // Backtracking line search on ln Z. Near the minimum ln Z changes by less than its rounding
    // (~|∇|²): a step that does not increase it beyond rounding and reduces the gradient is taken.
    double t = 1;
    bool accepted = false;
    const double rounding = 16 * std::numeric_limits<double>::epsilon() * std::max(1.0, std::abs(cur.log_z));
    for (int ls = 0; ls <= options.max_line_search_steps; ++ls, t *= 0.5) {
      Evaluate(v, log_mass, lambda + t * step, trial);
      if (!std::isfinite(trial.log_z)) continue;
      if (trial.log_z <= cur.log_z + kArmijo * t * slope ||
          (trial.log_z <= cur.log_z + rounding && trial.mean.norm() < gradient_norm)) {
        accepted = true;
        break;
      }
    }
    if (!accepted) break;  // no progress possible in floating point
    lambda += t * step;
    std::swap(cur, trial);
  }

  result.iterations = iterations;
  result.converged = cur.mean.norm() <= tolerance;
  result.weights = std::move(cur.weights);
  result.linear_precision_error = spread * cur.mean.norm();  // |Σ_k w_k (p_k − x)|
  return result;
}

}  // namespace sinew
