// The nearest of a fixed set of points to a query point: a k-d tree (median splits on the
// widest axis, leaves of at most 8 points, each node's bounding box) over the points' indices;
// the points themselves are read from the caller's span, which must outlive the tree. Exact:
// the squared distances are computed in double, and of points at the same distance the smallest
// index wins, so the answer is that of a brute-force scan. O(n log n) to build (20 to 36 bytes
// a point: its index, and a 64-byte node per 2 to 4 points), about O(log n) a query; a query far from the points visits the leaves whose boxes
// reach into the ball through its nearest point, so never more than the n points.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <Eigen/Core>

namespace sinew {

class NearestPointTree {
 public:
  // `positions`: 3 floats per point, at least one point.
  explicit NearestPointTree(std::span<const float> positions);
  uint32_t Nearest(const Eigen::Vector3d& q) const;
  // The min(k, n) nearest, nearest first, ties by index: a brute-force sort's first k. Writes
  // `out` (its capacity reused) and each one's squared distance to `distances2` when not null.
  void Nearest(const Eigen::Vector3d& q, size_t k, std::vector<uint32_t>& out,
               std::vector<double>* distances2 = nullptr) const;

 private:
  struct Node {
    Eigen::Vector3d lo, hi;  // the bounding box of its points
    uint32_t begin = 0, end = 0;
    int32_t left = -1, right = -1;  // -1: a leaf, holding order_[begin, end)
  };
  int32_t Build(uint32_t begin, uint32_t end);
  void Search(int32_t node, const Eigen::Vector3d& q, double& best, uint32_t& at) const;
  void SearchK(int32_t node, const Eigen::Vector3d& q, size_t k, std::vector<std::pair<double, uint32_t>>& best) const;
  double BoxDistance(int32_t node, const Eigen::Vector3d& q) const;  // squared; 0 inside
  Eigen::Vector3d Point(uint32_t i) const {
    return Eigen::Vector3d(positions_[3 * i], positions_[3 * i + 1], positions_[3 * i + 2]);
  }

  std::span<const float> positions_;
  std::vector<uint32_t> order_;
  std::vector<Node> nodes_;
};

}  // namespace sinew
