#include "core/geometry/nearest_point.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace sinew {

NearestPointTree::NearestPointTree(std::span<const float> positions) : positions_(positions) {
  order_.resize(positions.size() / 3);
  std::iota(order_.begin(), order_.end(), 0u);
  // Leaves hold 4 to 8 points (a median split of 9 or more), so fewer than n / 2 nodes: no
  // reallocation (until 2026-12-07 n / 4 were reserved).
  nodes_.reserve(order_.size() / 2 + 1);
  if (!order_.empty()) Build(0, uint32_t(order_.size()));
}

int32_t NearestPointTree::Build(uint32_t begin, uint32_t end) {
  const int32_t id = int32_t(nodes_.size());
  Eigen::Vector3d lo = Point(order_[begin]), hi = lo;
  for (uint32_t k = begin + 1; k < end; ++k) {
    lo = lo.cwiseMin(Point(order_[k]));
    hi = hi.cwiseMax(Point(order_[k]));
  }
  nodes_.push_back(Node{lo, hi, begin, end, -1, -1});
  int axis = 0;
  (hi - lo).maxCoeff(&axis);
  // A leaf: few points, or all of them at one place.
  if (end - begin <= 8 || !(hi[axis] > lo[axis])) return id;
  const uint32_t mid = begin + (end - begin) / 2;
  std::nth_element(order_.begin() + begin, order_.begin() + mid, order_.begin() + end,
                   [&](uint32_t a, uint32_t b) { return positions_[3 * a + axis] < positions_[3 * b + axis]; });
  const int32_t left = Build(begin, mid);
  const int32_t right = Build(mid, end);
  nodes_[id].left = left;
  nodes_[id].right = right;
  return id;
}

double NearestPointTree::BoxDistance(int32_t node, const Eigen::Vector3d& q) const {
  const Node& n = nodes_[node];
  return (n.lo - q).cwiseMax(q - n.hi).cwiseMax(0.0).squaredNorm();
}

void NearestPointTree::Search(int32_t node, const Eigen::Vector3d& q, double& best, uint32_t& at) const {
  const Node& n = nodes_[node];
  if (n.left < 0) {
    for (uint32_t k = n.begin; k < n.end; ++k) {
      const uint32_t i = order_[k];
      const double d = (Point(i) - q).squaredNorm();
      if (d < best || (d == best && i < at)) {
        best = d;
        at = i;
      }
    }
    return;
  }
  // The nearer box first; a box exactly `best` away may still hold a tie with a smaller index.
  const double dl = BoxDistance(n.left, q), dr = BoxDistance(n.right, q);
  const int32_t first = dl <= dr ? n.left : n.right, second = dl <= dr ? n.right : n.left;
  if (std::min(dl, dr) <= best) Search(first, q, best, at);
  if (std::max(dl, dr) <= best) Search(second, q, best, at);
}

// `best` holds the nearest found so far, sorted by (distance, index), at most k of them; a box
// exactly as far as the k-th may still hold a tie with a smaller index.
void NearestPointTree::SearchK(int32_t node, const Eigen::Vector3d& q, size_t k,
                               std::vector<std::pair<double, uint32_t>>& best) const {
  const Node& n = nodes_[node];
  if (n.left < 0) {
    for (uint32_t j = n.begin; j < n.end; ++j) {
      const std::pair<double, uint32_t> c{(Point(order_[j]) - q).squaredNorm(), order_[j]};
      if (best.size() == k && !(c < best.back())) continue;
      if (best.size() == k) best.pop_back();
      best.insert(std::upper_bound(best.begin(), best.end(), c), c);
    }
    return;
  }
  const double dl = BoxDistance(n.left, q), dr = BoxDistance(n.right, q);
  const int32_t first = dl <= dr ? n.left : n.right, second = dl <= dr ? n.right : n.left;
  auto worth = [&](double d) { return best.size() < k || d <= best.back().first; };
  if (worth(std::min(dl, dr))) SearchK(first, q, k, best);
  if (worth(std::max(dl, dr))) SearchK(second, q, k, best);
}

void NearestPointTree::Nearest(const Eigen::Vector3d& q, size_t k, std::vector<uint32_t>& out,
                               std::vector<double>* distances2) const {
  std::vector<std::pair<double, uint32_t>> best;
  best.reserve(k + 1);
  if (k > 0 && !nodes_.empty()) SearchK(0, q, k, best);
  out.clear();
  if (distances2 != nullptr) distances2->clear();
  for (const auto& [d, i] : best) {
    out.push_back(i);
    if (distances2 != nullptr) distances2->push_back(d);
  }
}

uint32_t NearestPointTree::Nearest(const Eigen::Vector3d& q) const {
  double best = std::numeric_limits<double>::infinity();
  uint32_t at = 0;
  if (!nodes_.empty()) Search(0, q, best, at);
  return at;
}

}  // namespace sinew
