#include "core/pbs/mesher.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <numeric>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/geometry/weld.h"
#include "core/geometry/winding_number.h"
#include "core/util/union_find.h"

#ifdef SINEW_HAVE_CGAL
#include <CGAL/Exact_predicates_inexact_constructions_kernel.h>
#include <CGAL/Labeled_mesh_domain_3.h>
#include <CGAL/Mesh_complex_3_in_triangulation_3.h>
#include <CGAL/Mesh_criteria_3.h>
#include <CGAL/Mesh_triangulation_3.h>
#include <CGAL/Random.h>
#include <CGAL/make_mesh_3.h>
#include <CGAL/exude_mesh_3.h>
#include <CGAL/refine_mesh_3.h>
#endif

namespace sinew {

#ifndef SINEW_HAVE_CGAL

bool MesherAvailable() { return false; }

absl::StatusOr<TetMesh> MeshVolume(std::span<const float>, std::span<const uint32_t>, const MesherOptions&,
                                   const std::function<bool()>&) {
  return absl::FailedPreconditionError(
      "the tetrahedral mesher (CGAL Mesh_3) is not in this build (configured with SINEW_WITH_CGAL=OFF); use "
      "tets: voxels, or upload a tet mesh with the rig");
}

#else

namespace {

using K = CGAL::Exact_predicates_inexact_constructions_kernel;
using Domain = CGAL::Labeled_mesh_domain_3<K>;
using Tr = CGAL::Mesh_triangulation_3<Domain, CGAL::Default, CGAL::Sequential_tag>::type;
using C3t3 = CGAL::Mesh_complex_3_in_triangulation_3<Tr>;
using Criteria = CGAL::Mesh_criteria_3<Tr>;
using Point = K::Point_3;

// Connected components of a triangle soup, vertices welded by equal position (imported meshes
// repeat a vertex per face corner; core/geometry/weld.h): one representative triangle list per
// component. (Near copies stay apart here: each component goes to CGAL on its own vertices.)
std::vector<std::vector<uint32_t>> Components(std::span<const float> positions, std::span<const uint32_t> triangles) {
  const size_t nt = triangles.size() / 3;
  const std::vector<uint32_t> id = WeldByPosition(positions, 0);
  UnionFind sets(id.size());
  for (size_t t = 0; t < nt; ++t) {
    for (int k = 1; k < 3; ++k) sets.Unite(id[triangles[3 * t]], id[triangles[3 * t + k]]);
  }
  std::unordered_map<uint32_t, size_t> index;
  std::vector<std::vector<uint32_t>> out;
  for (size_t t = 0; t < nt; ++t) {
    auto [it, added] = index.try_emplace(sets.Find(id[triangles[3 * t]]), out.size());
    if (added) out.emplace_back();
    out[it->second].push_back(uint32_t(t));
  }
  return out;
}

}  // namespace

bool MesherAvailable() { return true; }

absl::StatusOr<TetMesh> MeshVolume(std::span<const float> positions, std::span<const uint32_t> triangles,
                                   const MesherOptions& options, const std::function<bool()>& keep_going) {
  if (!(options.cell_size > 0) || !std::isfinite(options.cell_size)) {
    return absl::InvalidArgumentError(absl::StrCat("mesher: cell_size ", options.cell_size, " must be > 0"));
  }
  if (triangles.size() < 3) return absl::InvalidArgumentError("mesher: the mesh has no triangles");
  // CGAL is built without thread-local state here (CGAL_HAS_NO_THREADS, core/CMakeLists.txt):
  // its statics allow one mesher at a time per process.
  // A preparation waiting for another's mesher is cancellable meanwhile (until 2026-12-07 it
  // waited for the whole of the other run).
  static std::mutex one_at_a_time;
  std::unique_lock lock(one_at_a_time, std::defer_lock);
  while (!lock.try_lock()) {
    if (keep_going && !keep_going()) return absl::CancelledError("mesher: cancelled");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const WindingNumberTree winding(positions, triangles);
  std::atomic<bool> stop{false};
  size_t calls = 0;
  // Negative inside (Mesh_3's convention): |w| ≥ ½.
  auto inside = [&](const Point& p) -> double {
    if (keep_going && (++calls & 4095) == 0 && !keep_going()) stop = true;
    return 0.5 - std::abs(winding(Eigen::Vector3d(p.x(), p.y(), p.z())));
  };
  Eigen::Vector3d lo = Eigen::Vector3d::Constant(INFINITY), hi = -lo;
  for (size_t i = 0; i + 2 < positions.size(); i += 3) {
    const Eigen::Vector3d p(positions[i], positions[i + 1], positions[i + 2]);
    lo = lo.cwiseMin(p);
    hi = hi.cwiseMax(p);
  }
  const Eigen::Vector3d centre = (lo + hi) / 2;
  const double radius = (hi - lo).norm() / 2 + 2 * options.cell_size;
  const Point c(centre.x(), centre.y(), centre.z());
  // Seeded generators: the same input meshes the same way everywhere.
  CGAL::Random random(0);
  CGAL::get_default_random() = CGAL::Random(0);
  Domain domain = Domain::create_implicit_mesh_domain(
      std::function<double(const Point&)>(inside), K::Sphere_3(c, radius * radius),
      CGAL::parameters::relative_error_bound = 1e-6, CGAL::parameters::p_rng = &random);

  // Initial surface points: where segments across the surface near some of each component's
  // triangles cross it (Mesh_3's random shooting can miss a small part, which then is never meshed).
  C3t3 c3t3;
  const auto cwp = c3t3.triangulation().geom_traits().construct_weighted_point_3_object();
  const auto intersect = domain.construct_intersection_object();
  size_t seeds = 0;
  for (const std::vector<uint32_t>& part : Components(positions, triangles)) {
    const size_t stride = std::max<size_t>(1, part.size() / 16);
    for (size_t k = 0; k < part.size(); k += stride) {
      const uint32_t* t = &triangles[3 * size_t(part[k])];
      Eigen::Vector3d v[3];
      for (int i = 0; i < 3; ++i) v[i] = Eigen::Vector3d(positions[3 * t[i]], positions[3 * t[i] + 1], positions[3 * t[i] + 2]);
      Eigen::Vector3d n = (v[1] - v[0]).cross(v[2] - v[0]);
      if (!(n.norm() > 0)) continue;
      n.normalize();
      const Eigen::Vector3d m = (v[0] + v[1] + v[2]) / 3;
      const Eigen::Vector3d a = m - 0.25 * options.cell_size * n, b = m + 0.25 * options.cell_size * n;
      const Point pa(a.x(), a.y(), a.z()), pb(b.x(), b.y(), b.z());
      if ((inside(pa) < 0) == (inside(pb) < 0)) continue;  // not across the surface here
      const auto hit = intersect(K::Segment_3(pa, pb));
      if (std::get<2>(hit) == 0) continue;  // no intersection found
      const auto vh = c3t3.triangulation().insert(cwp(std::get<0>(hit)));
      if (vh == Tr::Vertex_handle()) continue;
      c3t3.set_dimension(vh, 2);
      c3t3.set_index(vh, std::get<1>(hit));
      ++seeds;
    }
  }
  if (seeds == 0) {
    // Seeds are looked for within cell/4 of the surface on both sides: a cell size far past the
    // mesh's parts finds none either (until 2026-12-07 that too was blamed on the mesh alone).
    return absl::FailedPreconditionError(absl::StrCat(
        "mesher: no surface point found within cell_size/4 of the mesh's faces: the mesh encloses no volume (no winding "
        "number of ½ or more near its surface), or cell_size ", options.cell_size,
        " is too coarse for its parts (the mesh's bounding box is ", (hi - lo).maxCoeff(), " long)"));
  }
  const double distance = options.facet_distance > 0 ? options.facet_distance : options.cell_size / 8;
  const Criteria criteria(CGAL::parameters::facet_angle = options.facet_angle,
                          CGAL::parameters::facet_size = options.cell_size,
                          CGAL::parameters::facet_distance = distance,
                          CGAL::parameters::cell_radius_edge_ratio = options.radius_edge,
                          CGAL::parameters::cell_size = options.cell_size);
  CGAL::Mesh_error_code error = CGAL::CGAL_MESH_3_NO_ERROR;
  // Refinement, then exudation, as refine_mesh_3 would run it (the same defaults) but apart:
  // inside refine_mesh_3 the exuder, which never reads the stop flag, ran after a refinement
  // stopped or cut at max_vertices, over all its cells, before the cancellation or the refusal
  // was answered (until 2026-12-07). Exudation without a time limit: CGAL's default limit (the
  // refinement's own time) makes the result depend on the machine's load.
  CGAL::refine_mesh_3(c3t3, domain, criteria, CGAL::parameters::no_odt(),
                      CGAL::parameters::no_perturb(), CGAL::parameters::no_exude(),
                      CGAL::parameters::mesh_3_options(CGAL::parameters::maximal_number_of_vertices = options.max_vertices,
                                                       CGAL::parameters::pointer_to_error_code = &error,
                                                       CGAL::parameters::pointer_to_stop_atomic_boolean = &stop));
  if (stop) return absl::CancelledError("mesher: cancelled");
  if (error == CGAL::CGAL_MESH_3_MAXIMAL_NUMBER_OF_VERTICES_REACHED ||
      c3t3.triangulation().number_of_vertices() > options.max_vertices) {
    return absl::ResourceExhaustedError(absl::StrCat("mesher: more than ", options.max_vertices,
                                                     " vertices at cell_size ", options.cell_size,
                                                     "; choose a larger cell size"));
  }
  if (keep_going && !keep_going()) return absl::CancelledError("mesher: cancelled");
  CGAL::exude_mesh_3(c3t3, CGAL::parameters::time_limit = 0);

  // The cells in the complex, their vertices numbered in order of position (a canonical order,
  // whatever CGAL's containers do), tets sorted.
  const auto point_of = c3t3.triangulation().geom_traits().construct_point_3_object();
  std::unordered_map<const void*, uint32_t> number;
  std::vector<Tr::Vertex_handle> used;
  for (auto cell = c3t3.cells_in_complex_begin(); cell != c3t3.cells_in_complex_end(); ++cell) {
    for (int i = 0; i < 4; ++i) {
      if (number.try_emplace(&*cell->vertex(i), 0).second) used.push_back(cell->vertex(i));
    }
  }
  if (used.empty()) return absl::FailedPreconditionError("mesher: Mesh_3 made no tetrahedra inside the mesh");
  auto position = [&](Tr::Vertex_handle v) {
    const Point& p = point_of(v->point());
    return Eigen::Vector3d(p.x(), p.y(), p.z());
  };
  std::vector<uint32_t> order(used.size());
  std::iota(order.begin(), order.end(), 0u);
  std::vector<Eigen::Vector3d> where(used.size());
  for (size_t i = 0; i < used.size(); ++i) where[i] = position(used[i]);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return std::lexicographical_compare(where[a].data(), where[a].data() + 3, where[b].data(), where[b].data() + 3);
  });
  TetMesh mesh;
  mesh.source = "mesher";
  mesh.rest.resize(used.size());
  for (size_t k = 0; k < order.size(); ++k) {
    number[&*used[order[k]]] = uint32_t(k);
    mesh.rest[k] = where[order[k]];
  }
  std::vector<std::array<uint32_t, 4>> tets;
  for (auto cell = c3t3.cells_in_complex_begin(); cell != c3t3.cells_in_complex_end(); ++cell) {
    std::array<uint32_t, 4> t;
    for (int i = 0; i < 4; ++i) t[i] = number[&*cell->vertex(i)];
    std::sort(t.begin(), t.end());  // canonical; AddTets orients it
    tets.push_back(t);
  }
  std::sort(tets.begin(), tets.end());
  AddTets(mesh, tets, options.cell_size);
  mesh.reoriented = 0;  // half of them by the canonical order above, not by Mesh_3
  return mesh;
}

#endif

}  // namespace sinew
