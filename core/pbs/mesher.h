// A surface-respecting tetrahedral mesh of a character's volume for position-based skinning (the
// paper's [BO05] step, spec §2.1), by CGAL's Mesh_3 (Delaunay refinement; Debian libcgal-dev).
//
// The domain is "inside the render mesh" in the sense of the generalized winding number
// (|w| ≥ ½, core/geometry/winding_number.h, the fast tree), so that real characters — open where
// they were cut, with holes, made of several overlapping parts — have an inside without repair.
// Mesh_3 finds the surface by bisection on that function and refines until every surface facet
// and every cell meets the criteria below; the slivers are exuded. Vertices end on the surface
// within `facet_distance`, so the render mesh lies in (or within that distance of) the tets.
//
// Deterministic: sequential, with CGAL's random generators seeded by a constant (the same
// rig and options give the same tets on every server, which session migration relies on).
// One mesher runs at a time per process (CGAL is built here without thread-local state, which
// would shrink every thread's stack): concurrent calls wait for each other.
// Licensing: CGAL's Mesh_3 is GPL-3; the build includes it only with SINEW_WITH_CGAL (on by
// default), and MesherAvailable() says whether it did.
#pragma once

#include <functional>
#include <span>

#include "absl/status/statusor.h"
#include "core/pbs/tet_mesh.h"

namespace sinew {

struct MesherOptions {
  double cell_size = 0;        // upper bound on a tet's circumradius and a surface facet's, > 0
  double facet_distance = 0;   // facets' centres from the surface at most this; 0: cell_size / 8
  double facet_angle = 25;     // degrees, lower bound on the surface facets' angles
  double radius_edge = 3;      // upper bound on a cell's circumradius / shortest edge
  size_t max_vertices = 2'000'000;  // RESOURCE_EXHAUSTED beyond (checked after meshing, and on the way)
};

bool MesherAvailable();

// The tets of the volume inside the mesh (positions 3 floats per vertex, triangles 3 indices),
// oriented positive, with degenerate ones (volume ≤ 1e-12 cell_size³) rejected and counted.
// `keep_going` is asked now and then; false stops with CANCELLED. INVALID_ARGUMENT for
// cell_size ≤ 0 or no triangles, FAILED_PRECONDITION when the mesh encloses nothing (every
// winding number below ½) or when Sinew was built without CGAL, RESOURCE_EXHAUSTED over
// max_vertices.
absl::StatusOr<TetMesh> MeshVolume(std::span<const float> positions, std::span<const uint32_t> triangles,
                                   const MesherOptions& options, const std::function<bool()>& keep_going = {});

}  // namespace sinew
