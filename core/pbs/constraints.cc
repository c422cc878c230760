#include "core/pbs/constraints.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <Eigen/Geometry>

namespace sinew {

std::vector<StretchConstraint> TetEdges(std::span<const std::array<uint32_t, 4>> tets,
                                        std::span<const Eigen::Vector3d> rest) {
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  edges.reserve(6 * tets.size());
  for (const auto& t : tets) {
    for (int i = 0; i < 4; ++i) {
      for (int j = i + 1; j < 4; ++j) edges.emplace_back(std::min(t[i], t[j]), std::max(t[i], t[j]));
    }
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  std::vector<StretchConstraint> out;
  out.reserve(edges.size());
  for (auto [a, b] : edges) out.push_back({a, b, float((rest[a] - rest[b]).norm())});
  return out;
}

float VolumeGradients(const Eigen::Vector3f p[4], float rest, Eigen::Vector3f grad[4]) {
  const Eigen::Vector3f p21 = p[1] - p[0], p31 = p[2] - p[0], p41 = p[3] - p[0];
  grad[1] = p31.cross(p41) / 6;
  grad[2] = p41.cross(p21) / 6;
  grad[3] = p21.cross(p31) / 6;
  grad[0] = -(grad[1] + grad[2] + grad[3]);
  return p21.cross(p31).dot(p41) / 6 - rest;
}

void ProjectStretch(const StretchConstraint& c, float k, float* x) {
  Eigen::Map<Eigen::Vector3f> a(x + 3 * size_t(c.a)), b(x + 3 * size_t(c.b));
  const Eigen::Vector3f d = a - b;
  const float length = d.norm();
  if (length < 1e-9f * c.rest) return;  // a collapsed edge has no direction
  const Eigen::Vector3f step = (0.5f * k * (length - c.rest) / length) * d;  // ½ k C n
  a -= step;
  b += step;
}

void ProjectVolume(const VolumeConstraint& c, float k, float* x) {
  Eigen::Vector3f p[4], g[4];
  for (int i = 0; i < 4; ++i) p[i] = Eigen::Map<const Eigen::Vector3f>(x + 3 * size_t(c.p[i]));
  const float value = VolumeGradients(p, c.rest, g);
  const float norm = g[0].squaredNorm() + g[1].squaredNorm() + g[2].squaredNorm() + g[3].squaredNorm();
  if (!(norm > 0)) return;
  const float s = k * value / norm;
  for (int i = 0; i < 4; ++i) Eigen::Map<Eigen::Vector3f>(x + 3 * size_t(c.p[i])) -= s * g[i];
}

void ProjectStretchXpbd(const StretchConstraint& c, float alpha_tilde, float& lambda, float* x) {
  Eigen::Map<Eigen::Vector3f> a(x + 3 * size_t(c.a)), b(x + 3 * size_t(c.b));
  const Eigen::Vector3f d = a - b;
  const float length = d.norm();
  if (length < 1e-9f * c.rest) return;
  const float dlambda = (-(length - c.rest) - alpha_tilde * lambda) / (2 + alpha_tilde);  // |∇_a|² + |∇_b|² = 2
  lambda += dlambda;
  const Eigen::Vector3f step = (dlambda / length) * d;  // Δλ n
  a += step;
  b -= step;
}

void ProjectVolumeXpbd(const VolumeConstraint& c, float alpha_tilde, float& lambda, float* x) {
  Eigen::Vector3f p[4], g[4];
  for (int i = 0; i < 4; ++i) p[i] = Eigen::Map<const Eigen::Vector3f>(x + 3 * size_t(c.p[i]));
  const float value = VolumeGradients(p, c.rest, g);
  const float norm = g[0].squaredNorm() + g[1].squaredNorm() + g[2].squaredNorm() + g[3].squaredNorm();
  if (!(norm > 0)) return;
  const float dlambda = (-value - alpha_tilde * lambda) / (norm + alpha_tilde);
  lambda += dlambda;
  for (int i = 0; i < 4; ++i) Eigen::Map<Eigen::Vector3f>(x + 3 * size_t(c.p[i])) += dlambda * g[i];
}

template <size_t K>
Colouring ColourConstraints(std::span<const std::array<uint32_t, K>> particles, size_t particle_count) {
  const size_t m = particles.size();
  // Particle → constraint incidence (CSR).
  std::vector<uint32_t> start(particle_count + 1, 0);
  for (const auto& c : particles) {
    for (uint32_t p : c) ++start[p + 1];
  }
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<uint32_t> incident(start.back()), fill(start.begin(), start.end() - 1);
  for (uint32_t i = 0; i < m; ++i) {
    for (uint32_t p : particles[i]) incident[fill[p]++] = i;
  }
  // Largest-first by the sum of the particles' incidence counts, ties by index.
  std::vector<uint32_t> degree(m, 0), order(m);
  for (uint32_t i = 0; i < m; ++i) {
    for (uint32_t p : particles[i]) degree[i] += start[p + 1] - start[p];
  }
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return degree[a] > degree[b]; });
  std::vector<int32_t> colour(m, -1);
  std::vector<uint32_t> seen;  // per colour: the last constraint that marked it taken
  int32_t colours = 0;
  for (uint32_t i : order) {
    for (uint32_t p : particles[i]) {
      for (uint32_t e = start[p]; e < start[p + 1]; ++e) {
        const int32_t c = colour[incident[e]];
        if (c >= 0) seen[size_t(c)] = i + 1;
      }
    }
    int32_t c = 0;
    while (c < colours && seen[size_t(c)] == i + 1) ++c;
    if (c == colours) {
      ++colours;
      seen.push_back(0);
    }
    colour[i] = c;
  }
  Colouring out;
  out.offsets.assign(size_t(colours) + 1, 0);
  for (int32_t c : colour) ++out.offsets[size_t(c) + 1];
  std::partial_sum(out.offsets.begin(), out.offsets.end(), out.offsets.begin());
  out.order.resize(m);
  std::vector<uint32_t> at(out.offsets.begin(), out.offsets.end() - 1);
  for (uint32_t i = 0; i < m; ++i) out.order[at[size_t(colour[i])]++] = i;  // by index within a colour
  return out;
}

template Colouring ColourConstraints<2>(std::span<const std::array<uint32_t, 2>>, size_t);
template Colouring ColourConstraints<4>(std::span<const std::array<uint32_t, 4>>, size_t);

}  // namespace sinew
