// A deformed mesh's geometric quality, measured on the skin itself (not on any method's own
// quantities), for every method: where the skin passes through itself, how much volume it gains
// or loses, how far its edges stretch.
//
// Vertices at one rest position (an imported mesh's per-corner or UV-seam copies, and an open
// seam's copies within core/geometry/weld.h's tolerance: WeldSeams) are welded for everything
// below: one normal, one one-ring, and a copy never counts as other skin. A mesh inside out (its rest volume negative: exported with
// a negative scale) is measured turned around, and so is a closed piece wound the other way on its
// own outside the rest (PieceFacing: a part exported mirrored).
//
// Inside the skin: a vertex whose surroundings lie inside the deformed mesh. The mesh's
// generalized winding number (winding_number.h) is evaluated just outside the vertex, at
// v + ε n (n the area-weighted normal of its triangles, ε = 1e-3 of its mean edge): 0 there on a
// skin that does not pass through itself, 1 where the vertex has gone through another part of the
// skin (a fold, a crumple, one piece of a bent limb pushed into the other), −1 where the skin
// around it has been turned inside out through another part, ½ at the border of a hole. So
// `inside` counts vertices whose value there exceeds ½ in magnitude. Its depth is the distance along
// the normal line (both ways) to the nearest crossing of the skin, its own triangles not
// counted — how far the skin it went through is — but no more than the distance to the nearest
// skin beyond its one-ring (where the skin is crumpled the normal can run along the other part;
// the bound can understate a deep penetration by a whole region, never overstate one). Two pieces pressed onto one contact surface have
// vertices of each a hair inside the other's triangles (the chords between vertices on a curved
// surface); those are `touching`, no deeper than `depth_tolerance`.
//
// Volume by the divergence theorem (each triangle's signed tetrahedron with the mesh's vertex
// centroid; exact for closed meshes, origin-dependent for open ones). Edge stretch: deformed over
// rest length, min and max over the triangles' edges (each edge counted from both sides; not those
// between welded copies); [1, 1] when no edge has a rest length, NaN when a deformed vertex is not
// finite.
//
// Cost: a winding query per vertex (Barill et al.'s tree; near the surface its leaves are summed
// exactly) and two ray casts and a nearest-triangle query per inside vertex: about 5 µs per
// vertex on one core, hundreds of DQS frames. Allocates its trees per call.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/parallel/thread_pool.h"

namespace sinew {

struct MeshQualityOptions {
  // Depth at or below which an inside vertex is only touching, as a fraction of the rest mesh's
  // mean edge length.
  double touching_edge_fraction = 0.1;
};

struct MeshQuality {
  uint32_t inside_vertices = 0;    // deeper than depth_tolerance
  uint32_t touching_vertices = 0;  // inside, no deeper than depth_tolerance
  double max_depth = 0;            // of the inside and touching vertices (0: none)
  // A mesh can be inside itself at rest already (a character of overlapping meshes, clothes over
  // a body): those vertices, measured once on the rest mesh (deeper than depth_tolerance), and
  // the inside vertices that were neither inside nor touching at rest — what the pose did.
  uint32_t rest_inside_vertices = 0;
  uint32_t new_inside_vertices = 0;
  double new_max_depth = 0;        // of the new inside vertices (0: none)
  // The new inside vertex at new_max_depth (the first of equals; −1: none), so that a caller can
  // say where a pose folded the skin (its joint, its region).
  int64_t new_deepest_vertex = -1;
  // Vertices inside or touching at rest that the pose brought out of the skin (neither inside nor
  // touching now, and farther than depth_tolerance from the skin beyond their one-ring: the
  // touching band is as wide outside): an inner layer showing through the one over it, a body
  // through its clothes.
  uint32_t exposed_vertices = 0;
  double depth_tolerance = 0;      // in the mesh's units
  double volume = 0, rest_volume = 0;
  double volume_ratio = 1;         // volume / rest_volume (1 when the rest volume is within rounding of 0)
  double edge_stretch_min = 1, edge_stretch_max = 1;
  // Per vertex (when asked for): depth inside the skin (> 0 for every inside or touching vertex),
  // 0 outside it; and 1 for each vertex counted in exposed_vertices, else 0.
  std::vector<float> depth;
  std::vector<uint8_t> exposed;
};

// What a mesh's measure needs from its rest pose — welded vertices, their one-rings, rest edge
// lengths and volume, which vertices are inside the rest mesh itself — made once per rig (that
// last part costs one frame's measure, on `pool`); Measure then does only a frame's work. `rest`:
// x,y,z per vertex; `triangles`: 3 indices each, counter-clockwise seen from outside, which must
// outlive it. Vertices used by no triangle are ignored.
class MeshQualityMeasure {
 public:
  MeshQualityMeasure(std::span<const float> rest, std::span<const uint32_t> triangles,
                     const MeshQualityOptions& options = {}, ThreadPool* pool = nullptr);
  // `deformed`: x,y,z per vertex, as many as `rest` (the caller's to ensure). `per_vertex` fills
  // MeshQuality::depth.
  MeshQuality Measure(std::span<const float> deformed, ThreadPool* pool, bool per_vertex = false) const;
  // Per vertex: 1 where the rest mesh is inside itself (inside or touching), else 0.
  std::span<const uint8_t> inside_at_rest() const { return inside_at_rest_; }
  size_t Bytes() const;

 private:
  std::span<const uint32_t> triangles_;
  std::vector<uint32_t> weld_;                     // vertex -> its welded representative
  std::vector<int8_t> facing_;  // per vertex (PieceFacing): −1 where the rest mesh is inside out
  std::vector<uint32_t> ring_start_, ring_;        // welded one-rings (CSR)
  std::vector<double> rest_length_;                // per triangle edge (t, t+1, t+2)
  double depth_tolerance_ = 0, rest_volume_ = 0;
  bool rest_volume_none_ = true;  // |rest volume| <= 1e-6 of the sum of its tetras' |volumes|
  std::vector<uint8_t> inside_at_rest_;            // per vertex (empty while the constructor measures)
  uint32_t rest_inside_vertices_ = 0;
};

// MeshQualityMeasure(rest, triangles, options).Measure(deformed, pool, per_vertex): for one-off
// measures (tests, tools); a frame path keeps the measure per rig.
MeshQuality MeasureMeshQuality(std::span<const float> rest, std::span<const float> deformed,
                               std::span<const uint32_t> triangles, ThreadPool* pool,
                               const MeshQualityOptions& options = {}, bool per_vertex = false);

// The signed volume enclosed by a triangle mesh (divergence theorem about the vertex centroid).
double MeshVolume(std::span<const float> positions, std::span<const uint32_t> triangles);

// Which way each vertex's triangles face: +1 outwards, −1 where the mesh is inside out there;
// `rep` maps each vertex to its welded point (WeldSeams). A closed connected piece (every welded
// edge in an even number of triangles) that no other part of the mesh encloses faces the way its
// own volume says (−1 for a part exported with a negative scale, alone or with the rest); one that
// another part encloses keeps its winding relative to that part (a mouth bag wound inward in a
// head is as modelled, and turns with the head). An open piece counts as closed when it nearly
// encloses a volume (a tube without its caps: |V| about its vertex centroid at least 0.05 of a
// sphere's of its area); other open pieces (sheets), whose volume has no sign, take the whole
// mesh's. `flipped` (when given) counts the pieces that differ from the whole mesh's sign (which
// every piece took until 2026-12-07). Not decidable from the winding: a part mirrored alone with
// pieces inside it left unmirrored (a head exported mirrored, its eyes not) turns those pieces
// with it, wrongly.
std::vector<int8_t> PieceFacing(std::span<const float> positions, std::span<const uint32_t> triangles,
                                std::span<const uint32_t> rep, size_t* flipped = nullptr);

// A bounding-box hierarchy over the triangles of one posed mesh: the first crossing of a ray, the
// nearest triangle; both skip the triangles with a corner `skip_vertex` names.
class RayCaster {
 public:
  RayCaster(std::span<const float> positions, std::span<const uint32_t> triangles);
  // Smallest t > 0 of a hit of origin + t·direction, or +infinity.
  double First(const double origin[3], const double direction[3], const std::function<bool(uint32_t)>& skip_vertex) const;
  // Distance from `point` to the nearest triangle none of whose corners `skip_vertex` names.
  double Nearest(const double point[3], const std::function<bool(uint32_t)>& skip_vertex) const;

 private:
  struct Node {
    float lo[3], hi[3];
    uint32_t first, count;  // leaves: triangles order_[first, first + count)
    int32_t left = -1, right = -1;
  };
  int32_t Build(uint32_t first, uint32_t count, std::vector<float>& centroids);
  std::span<const float> p_;
  std::span<const uint32_t> t_;
  std::vector<uint32_t> order_;
  std::vector<Node> nodes_;
};

}  // namespace sinew
