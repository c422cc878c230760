#include "core/implicit/hrbf.h"

#include <cmath>

#include <Eigen/LU>

#include "absl/strings/str_cat.h"

namespace sinew {
namespace {

// Contributions of one centre at offset u = x − v: φ = r³, ∇φ = 3 r u,
// H = ∇∇φ = 3 (u uᵀ)/r + 3 r I (0 at r = 0).
struct Kernel {
  double phi;
  Eigen::Vector3d grad;
  Eigen::Matrix3d hess;
};

[[gnu::always_inline]] inline Kernel At(const Eigen::Vector3d& u) {
  const double r = u.norm();
  Kernel k{r * r * r, 3 * r * u, Eigen::Matrix3d::Zero()};
  if (r > 1e-300) k.hess = 3 * (u * u.transpose()) / r + 3 * r * Eigen::Matrix3d::Identity();
  return k;
}

}  // namespace

absl::StatusOr<Hrbf> Hrbf::Fit(const Eigen::Matrix3Xd& centers, const Eigen::Matrix3Xd& normals) {
  const Eigen::Index m = centers.cols();
  if (m == 0 || normals.cols() != m) {
    return absl::InvalidArgumentError(absl::StrCat("hrbf: ", m, " centres and ", normals.cols(), " normals"));
  }
  if (!centers.allFinite() || !normals.allFinite()) {
    return absl::InvalidArgumentError("hrbf: centres and normals must be finite");
  }
  // Rows for centre j: value (1 row) and gradient (3 rows); columns for centre k: λ_k, β_k.
  Eigen::MatrixXd a(4 * m, 4 * m);
  Eigen::VectorXd b = Eigen::VectorXd::Zero(4 * m);
  for (Eigen::Index j = 0; j < m; ++j) {
    for (Eigen::Index k = 0; k < m; ++k) {
      const Kernel kk = At(centers.col(j) - centers.col(k));
      a(4 * j, 4 * k) = kk.phi;
      a.block<1, 3>(4 * j, 4 * k + 1) = kk.grad.transpose();
      a.block<3, 1>(4 * j + 1, 4 * k) = kk.grad;
      a.block<3, 3>(4 * j + 1, 4 * k + 1) = kk.hess;
    }
    b.segment<3>(4 * j + 1) = normals.col(j).normalized();
  }
  const Eigen::PartialPivLU<Eigen::MatrixXd> lu(a);
  const Eigen::VectorXd x = lu.solve(b);
  if (!x.allFinite()) {
    return absl::FailedPreconditionError("hrbf: singular system (coincident centres?)");
  }
  Hrbf h;
  h.centers_ = centers;
  h.lambda_.resize(m);
  h.beta_.resize(3, m);
  for (Eigen::Index k = 0; k < m; ++k) {
    h.lambda_(k) = x(4 * k);
    h.beta_.col(k) = x.segment<3>(4 * k + 1);
  }
  for (Eigen::Index j = 0; j < m; ++j) {
    Eigen::Vector3d g;
    const double v = h.ValueAndGradient(centers.col(j), &g);
    h.value_residual_ = std::max(h.value_residual_, std::abs(v));
    h.gradient_residual_ = std::max(h.gradient_residual_, (g - normals.col(j).normalized()).norm());
  }
  if (!(h.value_residual_ < 1e-6 && h.gradient_residual_ < 1e-6)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "hrbf: ill-conditioned system (residuals ", h.value_residual_, ", ", h.gradient_residual_,
        "); are some centres (nearly) coincident?"));
  }
  return h;
}

double Hrbf::Value(const Eigen::Vector3d& x) const {
  double d = 0;
  for (Eigen::Index k = 0; k < centers_.cols(); ++k) {
    const Eigen::Vector3d u = x - centers_.col(k);
    const double r = u.norm();
    d += lambda_(k) * r * r * r + 3 * r * beta_.col(k).dot(u);
  }
  return d;
}

double Hrbf::ValueAndGradient(const Eigen::Vector3d& x, Eigen::Vector3d* gradient) const {
  double d = 0;
  Eigen::Vector3d g = Eigen::Vector3d::Zero();
  for (Eigen::Index k = 0; k < centers_.cols(); ++k) {
    const Kernel kk = At(x - centers_.col(k));
    d += lambda_(k) * kk.phi + kk.grad.dot(beta_.col(k));
    g += lambda_(k) * kk.grad + kk.hess * beta_.col(k);
  }
  *gradient = g;
  return d;
}

double CompactSupport(double d, double r) {
  if (d <= -r) return 1;
  if (d >= r) return 0;
  const double u = d / r, u2 = u * u;
  return -3.0 / 16 * u2 * u2 * u + 5.0 / 8 * u2 * u - 15.0 / 16 * u + 0.5;
}

double CompactSupportDerivative(double d, double r) {
  if (d <= -r || d >= r) return 0;
  const double u = d / r, u2 = u * u;
  return (-15.0 / 16 * u2 * u2 + 15.0 / 8 * u2 - 15.0 / 16) / r;
}

}  // namespace sinew
