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
    int i0[3];
    float t[3];
    if (!Locate(x, i0, t)) return;
    for (int dz = 0; dz < 2; ++dz) {
      for (int dy = 0; dy < 2; ++dy) __builtin_prefetch(&cells_[Index(i0[0], i0[1] + dy, i0[2] + dz)]);
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
  // The cell holding x (its lowest corner i0) and x's place in it (t ∈ [0, 1]³); false outside
  // the box, a NaN coordinate included. Inside the box u ≥ 0, so truncation is floor; the last
  // cell takes u = n − 1. Sample and Prefetch share it.
  bool Locate(const Eigen::Vector3f& x, int i0[3], float t[3]) const {
    if (!((x.array() >= lo_.array()).all() && (x.array() <= hi_.array()).all())) return false;
    const Eigen::Vector3f u = (x - lo_).cwiseProduct(inv_step_);
    for (int a = 0; a < 3; ++a) {
      i0[a] = std::min(static_cast<int>(u[a]), n_ - 2);
      t[a] = std::min(u[a] - float(i0[a]), 1.0f);
    }
    return true;
  }
  size_t Index(int i, int j, int k) const { return (size_t(k) * size_t(n_) + size_t(j)) * size_t(n_) + size_t(i); }
  Eigen::Vector3f lo_, hi_, step_, inv_step_;
  int n_ = 0;
  std::vector<Eigen::Vector4f> cells_;  // (∂x f, ∂y f, ∂z f, f), x fastest
};

}  // namespace sinew
