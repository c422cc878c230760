// A per-bone field baked on an N³ lattice (seed 000 §2.4): f = t_r(d) and ∇f at the lattice
// points of an axis-aligned box in rest model space (the piece's samples enlarged by the support
// radius), read back by trilinear interpolation; 0 outside the box. At run time a field moves
// rigidly with its bone: sample at T⁻¹x and rotate the gradient by T's rotation.
#pragma once

#include <algorithm>
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
  // Asks the CPU to bring the cells Sample(x) will read (the line holding each of their four
  // rows' first cell; no effect on any result): a caller about to sample several grids issues
  // these first, so that their misses overlap.
  void Prefetch(const Eigen::Vector3f& x) const {
    if (!((x.array() >= lo_.array()).all() && (x.array() <= hi_.array()).all())) return;
    const Eigen::Vector3f u = (x - lo_).cwiseProduct(inv_step_);
    const int n = n_;
    const size_t i = size_t(std::min(static_cast<int>(u[0]), n - 2)), j = size_t(std::min(static_cast<int>(u[1]), n - 2)),
                 k = size_t(std::min(static_cast<int>(u[2]), n - 2));
    for (size_t dz = 0; dz < 2; ++dz) {
      for (size_t dy = 0; dy < 2; ++dy) __builtin_prefetch(&cells_[((k + dz) * n + j + dy) * n + i]);
    }
  }

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
