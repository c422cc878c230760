#include "core/rig/transform.h"

#include <cmath>

#include <Eigen/SVD>

namespace sinew {

Similarity NearestSimilarity(const Affine34d& m, bool* exact) {
  const Eigen::Matrix3d a = m.leftCols<3>();
  const double det = a.determinant();
  Similarity s;
  s.scale = std::cbrt(std::abs(det));
  const Eigen::JacobiSVD<Eigen::Matrix3d> svd(a, Eigen::ComputeFullU | Eigen::ComputeFullV);
  Eigen::Matrix3d d = Eigen::Matrix3d::Identity();
  d(2, 2) = (svd.matrixU() * svd.matrixV().transpose()).determinant() < 0 ? -1 : 1;
  s.rotation = Eigen::Quaterniond(Eigen::Matrix3d(svd.matrixU() * d * svd.matrixV().transpose())).normalized();
  s.translation = m.col(3);
  if (exact) {
    *exact = det > 0 && (a.transpose() * a).isApprox(s.scale * s.scale * Eigen::Matrix3d::Identity(), 1e-4);
  }
  if (!(s.scale > 0) || !std::isfinite(s.scale)) s.scale = 1;
  return s;
}

}  // namespace sinew
