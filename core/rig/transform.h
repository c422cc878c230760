// Small transform types shared by every deformer.
#pragma once

#include <Eigen/Core>
#include <Eigen/Geometry>

namespace sinew {

// 3x4 affine matrix [A | t] acting on column vectors: x -> A x + t. Double precision is used
// for everything computed per joint (forward kinematics, skinning transforms); per-vertex work
// uses the float copy.
using Affine34d = Eigen::Matrix<double, 3, 4>;
// Row-major float copy, 12 contiguous floats, as streamed to the per-vertex loops.
using Affine34f = Eigen::Matrix<float, 3, 4, Eigen::RowMajor>;

inline Affine34d IdentityAffine() {
  Affine34d m = Affine34d::Zero();
  m.leftCols<3>().setIdentity();
  return m;
}

// a ∘ b (apply b first).
inline Affine34d Compose(const Affine34d& a, const Affine34d& b) {
  Affine34d r;
  r.leftCols<3>() = a.leftCols<3>() * b.leftCols<3>();
  r.col(3) = a.leftCols<3>() * b.col(3) + a.col(3);
  return r;
}

// Inverse of an invertible affine map.
inline Affine34d Inverse(const Affine34d& m) {
  Affine34d r;
  const Eigen::Matrix3d inv = m.leftCols<3>().inverse();
  r.leftCols<3>() = inv;
  r.col(3) = -inv * m.col(3);
  return r;
}

// A similarity transform x -> scale * R(rotation) x + translation. `rotation` is unit.
struct Similarity {
  Eigen::Quaterniond rotation = Eigen::Quaterniond::Identity();
  Eigen::Vector3d translation = Eigen::Vector3d::Zero();
  double scale = 1.0;

  Affine34d Matrix() const {
    Affine34d m;
    m.leftCols<3>() = scale * rotation.toRotationMatrix();
    m.col(3) = translation;
    return m;
  }
  // (*this) ∘ child: the child's frame expressed in this frame's parent space.
  Similarity operator*(const Similarity& child) const {
    Similarity r;
    r.rotation = (rotation * child.rotation).normalized();
    r.translation = scale * (rotation * child.translation) + translation;
    r.scale = scale * child.scale;
    return r;
  }
};

// The similarity nearest to an affine map: its rotation by polar decomposition (reflections
// removed), scale cbrt|det A|, same translation. `exact` (optional) tells whether the map was a
// similarity already (within 1e-4).
Similarity NearestSimilarity(const Affine34d& m, bool* exact = nullptr);

}  // namespace sinew
