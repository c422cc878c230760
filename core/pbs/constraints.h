// The constraints of position-based skinning (seed 002 §2.4–2.7, spec notes §2.4–2.9) and their
// projections, for unit masses as the paper's equations assume: s = C / Σ|∇_i C|², Δp_i = −k s ∇_i C.
//
// The volume constraint uses the corrected gradients (spec §2.6 errata: the paper's printed
// Eqs. 10–17 attach each cross product to the wrong particle and flip the sign, which pushes the
// volume away from its rest value):
//   C = (1/6) (p2 − p1)×(p3 − p1)·(p4 − p1) − V0,
//   ∇2 = (1/6) p31 × p41,  ∇3 = (1/6) p41 × p21,  ∇4 = (1/6) p21 × p31,  ∇1 = −(∇2 + ∇3 + ∇4).
//
// Colouring (§2.9): constraints of one colour share no particle, so a colour projects in parallel
// with the same result as in any order; colours run one after another. Greedy in largest-first
// order of a dual-degree proxy, ties by index: deterministic.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include <Eigen/Core>

namespace sinew {

struct StretchConstraint {
  uint32_t a, b;
  float rest;  // rest length
};
struct VolumeConstraint {
  std::array<uint32_t, 4> p;
  float rest;  // signed rest volume (> 0)
};

// The stretch constraints of a tet mesh: one per unique edge, sorted by (a, b), a < b.
std::vector<StretchConstraint> TetEdges(std::span<const std::array<uint32_t, 4>> tets,
                                        std::span<const Eigen::Vector3d> rest);

// C and its four gradients (corrected) at positions p.
float VolumeGradients(const Eigen::Vector3f p[4], float rest, Eigen::Vector3f grad[4]);

// One projection with stiffness k of positions x (3 floats per particle). Stretch skips a
// constraint whose particles coincide (1e-9 of `rest`); volume one whose gradients vanish.
void ProjectStretch(const StretchConstraint& c, float k, float* x);
void ProjectVolume(const VolumeConstraint& c, float k, float* x);
// XPBD (Macklin, Müller & Chentanez 2016) for unit masses: with α̃ = compliance / dt² and λ the
// constraint's multiplier over this time step (0 at its start), Δλ = (−C − α̃ λ) / (Σ|∇C|² + α̃),
// Δp_i = Δλ ∇_i C, λ += Δλ. α̃ = 0 is PBD with k = 1; the skips are PBD's.
void ProjectStretchXpbd(const StretchConstraint& c, float alpha_tilde, float& lambda, float* x);
void ProjectVolumeXpbd(const VolumeConstraint& c, float alpha_tilde, float& lambda, float* x);

// Constraints (given by their particles) sorted by colour: `order[offsets[c] .. offsets[c+1]-1]`
// are the constraints of colour c.
struct Colouring {
  std::vector<uint32_t> order;
  std::vector<uint32_t> offsets;  // colours + 1
  size_t colours() const { return offsets.empty() ? 0 : offsets.size() - 1; }
};
template <size_t K>
Colouring ColourConstraints(std::span<const std::array<uint32_t, K>> particles, size_t particle_count);

}  // namespace sinew
