#include "core/geometry/winding_number.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include <Eigen/Geometry>

namespace sinew {

double SolidAngle(const Eigen::Vector3d& a, const Eigen::Vector3d& b, const Eigen::Vector3d& c) {
  const double la = a.norm(), lb = b.norm(), lc = c.norm();
  const double num = a.dot(b.cross(c));
  const double den = la * lb * lc + a.dot(b) * lc + b.dot(c) * la + c.dot(a) * lb;
  return 2 * std::atan2(num, den);
}

namespace {

constexpr uint32_t kLeafTriangles = 8;

}  // namespace

double WindingNumber(std::span<const float> positions, std::span<const uint32_t> triangles, const Eigen::Vector3d& p) {
  double omega = 0;
  for (size_t t = 0; t + 2 < triangles.size(); t += 3) {
    Eigen::Vector3d v[3];
    for (int k = 0; k < 3; ++k) {
      const size_t i = triangles[t + k];
      v[k] = Eigen::Vector3d(positions[3 * i], positions[3 * i + 1], positions[3 * i + 2]) - p;
    }
    omega += SolidAngle(v[0], v[1], v[2]);
  }
  return omega / (4 * std::numbers::pi);
}

WindingNumberTree::WindingNumberTree(std::span<const float> positions, std::span<const uint32_t> triangles,
                                     double beta)
    : beta_(beta) {
  const size_t n = triangles.size() / 3;
  tris_.resize(n);
  std::vector<Eigen::Vector3d> centroids(n);
  for (size_t t = 0; t < n; ++t) {
    for (int k = 0; k < 3; ++k) {
      const size_t i = triangles[3 * t + k];
      tris_[t].col(k) = Eigen::Vector3d(positions[3 * i], positions[3 * i + 1], positions[3 * i + 2]);
    }
    centroids[t] = tris_[t].rowwise().mean();
  }
  nodes_.reserve(n > 0 ? 2 * (n / kLeafTriangles + 1) : 0);
  if (n > 0) Build(0, uint32_t(n), centroids);
}

int32_t WindingNumberTree::Build(uint32_t first, uint32_t count, std::vector<Eigen::Vector3d>& centroids) {
  const int32_t index = int32_t(nodes_.size());
  nodes_.emplace_back();
  Node node;
  node.first = first;
  node.count = count;
  double total = 0;
  Eigen::Vector3d lo = Eigen::Vector3d::Constant(INFINITY), hi = -lo;
  for (uint32_t t = first; t < first + count; ++t) {
    const Eigen::Matrix3d& c = tris_[t];
    const Eigen::Vector3d a = (c.col(1) - c.col(0)).cross(c.col(2) - c.col(0)) / 2;
    const double area = a.norm();
    node.area += a;
    node.centre += area * centroids[t];
    total += area;
    lo = lo.cwiseMin(centroids[t]);
    hi = hi.cwiseMax(centroids[t]);
  }
  // Degenerate (zero-area) clusters: their plain centroid.
  if (total > 0) {
    node.centre /= total;
  } else {
    node.centre = (lo + hi) / 2;
  }
  for (uint32_t t = first; t < first + count; ++t) {
    const Eigen::Matrix3d& c = tris_[t];
    for (int k = 0; k < 3; ++k) node.radius = std::max(node.radius, (c.col(k) - node.centre).norm());
    const Eigen::Vector3d a = (c.col(1) - c.col(0)).cross(c.col(2) - c.col(0)) / 2;
    node.moment += a * (centroids[t] - node.centre).transpose();
  }
  if (count > kLeafTriangles) {
    // Median split of the centroids along the box's longest axis.
    int axis = 0;
    (hi - lo).maxCoeff(&axis);
    std::vector<uint32_t> order(count);
    std::iota(order.begin(), order.end(), first);
    const uint32_t half = count / 2;
    std::nth_element(order.begin(), order.begin() + half, order.end(), [&](uint32_t a, uint32_t b) {
      return centroids[a][axis] < centroids[b][axis] || (centroids[a][axis] == centroids[b][axis] && a < b);
    });
    std::vector<Eigen::Matrix3d> tris(count);
    std::vector<Eigen::Vector3d> cents(count);
    for (uint32_t k = 0; k < count; ++k) {
      tris[k] = tris_[order[k]];
      cents[k] = centroids[order[k]];
    }
    std::copy(tris.begin(), tris.end(), tris_.begin() + first);
    std::copy(cents.begin(), cents.end(), centroids.begin() + first);
    node.left = Build(first, half, centroids);
    node.right = Build(first + half, count - half, centroids);
  }
  nodes_[index] = node;
  return index;
}

double WindingNumberTree::operator()(const Eigen::Vector3d& q) const {
  if (nodes_.empty()) return 0;
  double omega = 0;
  int32_t stack[128];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const Node& node = nodes_[stack[--top]];
    const Eigen::Vector3d d = node.centre - q;
    const double dist = d.norm();
    if (dist > beta_ * node.radius && dist > 0) {
      const double r3 = dist * dist * dist, r5 = r3 * dist * dist;
      omega += node.area.dot(d) / r3 + node.moment.trace() / r3 - 3 * d.dot(node.moment * d) / r5;
    } else if (node.left < 0) {
      for (uint32_t t = node.first; t < node.first + node.count; ++t) {
        const Eigen::Matrix3d& c = tris_[t];
        omega += SolidAngle(c.col(0) - q, c.col(1) - q, c.col(2) - q);
      }
    } else {
      stack[top++] = node.left;
      stack[top++] = node.right;
    }
  }
  return omega / (4 * std::numbers::pi);
}

}  // namespace sinew
