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
  int i0[3];
  float t[3];
  if (!Locate(x, i0, t)) return 0;
  Eigen::Vector4f acc = Eigen::Vector4f::Zero();
  for (int dz = 0; dz < 2; ++dz) {
    for (int dy = 0; dy < 2; ++dy) {
      for (int dx = 0; dx < 2; ++dx) {
        const float w = (dx ? t[0] : 1 - t[0]) * (dy ? t[1] : 1 - t[1]) * (dz ? t[2] : 1 - t[2]);
        acc += w * cells_[Index(i0[0] + dx, i0[1] + dy, i0[2] + dz)];
      }
    }
  }
  if (gradient) *gradient = acc.head<3>();
  return acc[3];
}

}  // namespace sinew
