#include "core/implicit/field_grid.h"

#include <algorithm>
#include <cmath>

namespace sinew {

FieldGrid FieldGrid::Bake(const BoneField& field, int resolution, ThreadPool* pool) {
  FieldGrid g;
  g.n_ = std::max(resolution, 2);
  const Eigen::Matrix3Xd& c = field.hrbf.centers();
  const Eigen::Vector3d lo = c.rowwise().minCoeff().array() - field.radius;
  const Eigen::Vector3d hi = c.rowwise().maxCoeff().array() + field.radius;
  g.lo_ = lo.cast<float>();
  g.hi_ = hi.cast<float>();
  g.step_ = ((hi - lo) / (g.n_ - 1)).cast<float>();
  g.inv_step_ = g.step_.cwiseInverse();
  const size_t n = static_cast<size_t>(g.n_);
  g.cells_.resize(n * n * n);
  ParallelFor(pool, n, 1, [&](size_t b, size_t e) {
    for (size_t k = b; k < e; ++k) {
      for (size_t j = 0; j < n; ++j) {
        for (size_t i = 0; i < n; ++i) {
          const Eigen::Vector3d x = lo + Eigen::Vector3d(double(i), double(j), double(k)).cwiseProduct((hi - lo) / (g.n_ - 1));
          Eigen::Vector3d grad;
          const double d = field.hrbf.ValueAndGradient(x, &grad);
          const double f = CompactSupport(d, field.radius);
          const Eigen::Vector3d gf = CompactSupportDerivative(d, field.radius) * grad;
          g.cells_[(k * n + j) * n + i] = Eigen::Vector4f(float(gf.x()), float(gf.y()), float(gf.z()), float(f));
        }
      }
    }
  });
  return g;
}

float FieldGrid::Sample(const Eigen::Vector3f& x, Eigen::Vector3f* gradient) const {
  if (gradient) gradient->setZero();
  // Written so that a NaN coordinate also counts as outside.
  if (!((x.array() >= lo_.array()).all() && (x.array() <= hi_.array()).all())) return 0;
  // Inside the box u ≥ 0, so truncation is floor; the last cell takes u = n − 1.
  const Eigen::Vector3f u = (x - lo_).cwiseProduct(inv_step_);
  const int n = n_;
  int i0[3];
  float t[3];
  for (int a = 0; a < 3; ++a) {
    i0[a] = std::min(static_cast<int>(u[a]), n - 2);
    t[a] = std::min(u[a] - float(i0[a]), 1.0f);
  }
  Eigen::Vector4f acc = Eigen::Vector4f::Zero();
  for (int dz = 0; dz < 2; ++dz) {
    for (int dy = 0; dy < 2; ++dy) {
      for (int dx = 0; dx < 2; ++dx) {
        const float w = (dx ? t[0] : 1 - t[0]) * (dy ? t[1] : 1 - t[1]) * (dz ? t[2] : 1 - t[2]);
        acc += w * cells_[(size_t(i0[2] + dz) * n + size_t(i0[1] + dy)) * n + size_t(i0[0] + dx)];
      }
    }
  }
  if (gradient) *gradient = acc.head<3>();
  return acc[3];
}

}  // namespace sinew
