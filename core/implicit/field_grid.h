// A per-bone field baked on an N³ lattice (seed 000 §2.4): f = t_r(d) and ∇f at the lattice
// points of an axis-aligned box in rest model space (the piece's samples enlarged by the support
// radius), read back by trilinear interpolation; 0 outside the box. At run time a field moves
// rigidly with its bone: sample at T⁻¹x and rotate the gradient by T's rotation.
#pragma once

#include <vector>

#include <Eigen/Core>

#include "core/implicit/bone_fields.h"
#include "core/parallel/thread_pool.h"

namespace sinew {

class FieldGrid {
 public:
  // 32³ by default, as in the thesis.
  static FieldGrid Bake(const BoneField& field, int resolution = 32, ThreadPool* pool = nullptr);

  // Trilinear value at x (rest space), and its gradient (trilinear blend of the baked
  // gradients) when `gradient` is not null. Outside the box: 0 and a zero gradient.
  float Sample(const Eigen::Vector3f& x, Eigen::Vector3f* gradient = nullptr) const;

  const Eigen::Vector3f& lo() const { return lo_; }
  const Eigen::Vector3f& hi() const { return hi_; }
  int resolution() const { return n_; }
  const Eigen::Vector3f& inv_step() const { return inv_step_; }
  // The lattice's values, n³ of (∂x f, ∂y f, ∂z f, f), x fastest (device copies).
  const std::vector<Eigen::Vector4f>& cells() const { return cells_; }
  size_t Bytes() const { return cells_.size() * sizeof(Eigen::Vector4f); }

 private:
  Eigen::Vector3f lo_, hi_, step_, inv_step_;
  int n_ = 0;
  std::vector<Eigen::Vector4f> cells_;  // (∂x f, ∂y f, ∂z f, f), x fastest
};

}  // namespace sinew
