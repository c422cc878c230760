// Generalized winding numbers of triangle meshes (Jacobson et al. 2013): the solid angle the
// triangles subtend at a point over 4π — ±1 inside a closed oriented mesh, 0 outside, and a
// smooth in-between near holes, so that "inside" stays meaningful for the open, multi-part and
// overlapping meshes real characters are made of (|w| ≥ ½).
//
// WindingNumber sums every triangle's exact solid angle (Van Oosterom & Strackee): O(triangles)
// per point. WindingNumberTree is the fast approximation of Barill et al. 2018 ("Fast winding
// numbers for soups and clouds"): a bounding-volume hierarchy over the triangles whose nodes keep
// their area-weighted centroid p̃, vector area N = Σ ½ (b − a) × (c − a), first moment
// M = Σ_t A_t (c_t − p̃)ᵀ (A_t a triangle's vector area, c_t its centroid) and radius; a node
// farther than `beta` radii from the point contributes the first two terms of the expansion of
// the kernel about p̃ (x = p̃ − q, r = |x|):  (N·x / r³ + tr M / r³ − 3 xᵀ M x / r⁵) / 4π;
// nearer nodes are opened, leaves summed exactly. O(log triangles) per point far from the
// surface, the exact sum's value near it; a far node's error about (radius / r)² of its share.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <Eigen/Core>

namespace sinew {

// The exact generalized winding number at p; positions 3 floats per vertex, triangles 3 indices
// each, counter-clockwise seen from outside (then +1 inside).
double WindingNumber(std::span<const float> positions, std::span<const uint32_t> triangles, const Eigen::Vector3d& p);

// The signed solid angle of triangle (a, b, c) seen from the origin (Van Oosterom & Strackee
// 1983); a closed mesh's sum over 4π is its winding number there.
double SolidAngle(const Eigen::Vector3d& a, const Eigen::Vector3d& b, const Eigen::Vector3d& c);

class WindingNumberTree {
 public:
  // Builds the hierarchy (O(F log F)); keeps its own copy of the triangles' corners.
  WindingNumberTree(std::span<const float> positions, std::span<const uint32_t> triangles, double beta = 3.0);

  double operator()(const Eigen::Vector3d& q) const;
  size_t node_count() const { return nodes_.size(); }

 private:
  struct Node {
    Eigen::Vector3d centre = Eigen::Vector3d::Zero();  // area-weighted centroid
    Eigen::Vector3d area = Eigen::Vector3d::Zero();    // vector area (sum over its triangles)
    Eigen::Matrix3d moment = Eigen::Matrix3d::Zero();  // Σ A_t (c_t − centre)ᵀ
    double radius = 0;                                 // of the ball around centre holding its corners
    uint32_t first = 0, count = 0;                     // leaves: its triangles in tris_
    int32_t left = -1, right = -1;                     // children; -1 for a leaf
  };
  int32_t Build(uint32_t first, uint32_t count, std::vector<Eigen::Vector3d>& centroids);

  std::vector<Eigen::Matrix3d> tris_;  // corners as columns, reordered by the hierarchy
  std::vector<Node> nodes_;
  double beta_;
};

}  // namespace sinew
