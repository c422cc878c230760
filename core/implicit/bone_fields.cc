#include "core/implicit/bone_fields.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/geometry/mesh_quality.h"
#include "core/geometry/weld.h"

namespace sinew {
namespace {

Eigen::Vector3d Point(const std::vector<float>& xyz, size_t i) {
  return Eigen::Vector3d(xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]);
}

// Unit outward normals of the welded mesh, per vertex: the mean of the rig's normals over each
// point's copies, else the area-weighted normal of the triangles around the point. A mesh inside
// out (its volume negative: exported with a negative scale, as assimp-testmodels'
// animation_with_skeleton.fbx, normals pointing in as well; its fields were inside out), or a
// closed piece of it wound the other way on its own (PieceFacing: a part exported mirrored; until
// 2026-12-07 its fields were inside out, a review's two tubes lost 296 of 708 points to "inside
// the rest skin" and the skin was 0.47 off at 120°), is turned around, and a rig's normal that
// points against its point's outward area-weighted one is turned with it. A copy on a hard edge or a flat-shaded face carries one face's normal; an HRBF sample
// needs the surface's (until 2026-12-05 each copy gave its own: on a flat-shaded limb of 8
// segments the fields were 0.03 off the smooth mesh's on its own skin, and Testwuson.X's chest
// seam gave copies normals 180° apart). Zero where the copies (or the triangles) cancel: under a
// tenth of their count (or area) left, as on a sheet's two sides; no sample there.
// `rep`: WeldSeams' points.
std::vector<Eigen::Vector3d> WeldedNormals(const Rig& rig, std::span<const uint32_t> rep) {
  const size_t nv = rig.vertex_count();
  const std::vector<int8_t> facing = PieceFacing(rig.positions, rig.triangles, rep);
  std::vector<Eigen::Vector3d> area(nv, Eigen::Vector3d::Zero()), given(nv, Eigen::Vector3d::Zero());
  std::vector<double> area_total(nv, 0), given_total(nv, 0);
  for (size_t t = 0; t < rig.triangle_count(); ++t) {
    const uint32_t* f = &rig.triangles[3 * t];
    const Eigen::Vector3d a = Point(rig.positions, f[0]), b = Point(rig.positions, f[1]), c = Point(rig.positions, f[2]);
    const Eigen::Vector3d w = (b - a).cross(c - a);  // twice the area, along the normal
    for (int k = 0; k < 3; ++k) {
      area[rep[f[k]]] += w;
      area_total[rep[f[k]]] += w.norm();
    }
  }
  const bool supplied = rig.normals.size() == rig.positions.size();
  if (supplied) {
    for (size_t i = 0; i < nv; ++i) {
      const Eigen::Vector3d u = Point(rig.normals, i);
      if (u.norm() > 0) {
        given[rep[i]] += u.normalized();
        given_total[rep[i]] += 1;
      }
    }
  }
  std::vector<Eigen::Vector3d> n(nv, Eigen::Vector3d::Zero());
  for (size_t i = 0; i < nv; ++i) {
    if (rep[i] != i) continue;
    const Eigen::Vector3d outward = double(facing[i]) * area[i];
    const Eigen::Vector3d& sum = supplied ? given[i] : outward;
    const double length = sum.norm(), total = supplied ? given_total[i] : area_total[i];
    if (!(length > 0 && length >= 0.1 * total)) continue;
    n[i] = sum / length;
    if (supplied && n[i].dot(outward) < 0) n[i] = -n[i];
  }
  for (size_t i = 0; i < nv; ++i) n[i] = n[rep[i]];
  return n;
}

// What fitting a piece on a segment gave: a field (when it took min_samples surface samples or
// more), and how many surface samples it could take.
struct PieceFit {
  std::optional<BoneField> field;
  size_t offered = 0;
};

// A point of the piece's surface and its unit outward normal: an HRBF sample.
struct SurfacePoint {
  Eigen::Vector3d x, n;
};

// A piece for sampling its surface: its joint, every vertex's joint (Segmentation) and the
// triangles with a corner in the piece.
struct PieceSurface {
  int joint = 0;
  std::span<const int32_t> segmentation;
  std::span<const uint32_t> triangles;  // indices into rig.triangles / 3
  bool Owns(uint32_t v) const { return segmentation[v] == joint; }
};

// `count` points drawn uniformly by area over the surface a piece owns: its triangles, each point
// kept where its nearest corner (largest barycentric coordinate) is one of the piece's vertices,
// so that pieces share a triangle that straddles them. Normals are the corners' welded normals
// interpolated; none where they cancel. Deterministic in `seed`.
std::vector<SurfacePoint> SurfaceSamples(const Rig& rig, std::span<const Eigen::Vector3d> normals,
                                         const PieceSurface& piece, size_t count, uint32_t seed) {
  std::span<const uint32_t> tris = piece.triangles;
  std::vector<double> cumulative;
  cumulative.reserve(tris.size());
  double total = 0;
  for (uint32_t t : tris) {
    const uint32_t* c = &rig.triangles[3 * size_t(t)];
    const Eigen::Vector3d a = Point(rig.positions, c[0]);
    total += (Point(rig.positions, c[1]) - a).cross(Point(rig.positions, c[2]) - a).norm();
    cumulative.push_back(total);
  }
  std::vector<SurfacePoint> points;
  if (!(total > 0)) return points;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  points.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    const double pick = unit(rng) * total;
    const size_t i = std::min(size_t(std::upper_bound(cumulative.begin(), cumulative.end(), pick) - cumulative.begin()),
                              tris.size() - 1);
    double u = unit(rng), v = unit(rng);
    if (u + v > 1) {
      u = 1 - u;
      v = 1 - v;
    }
    const double w[3] = {1 - u - v, u, v};
    const uint32_t* c = &rig.triangles[3 * size_t(tris[i])];
    const int nearest = int(std::max_element(w, w + 3) - w);
    if (!piece.Owns(c[nearest])) continue;
    SurfacePoint p{Eigen::Vector3d::Zero(), Eigen::Vector3d::Zero()};
    for (int j = 0; j < 3; ++j) {
      p.x += w[j] * Point(rig.positions, c[j]);
      p.n += w[j] * normals[c[j]];
    }
    if (!(p.n.norm() > 1e-6)) continue;
    p.n.normalize();
    points.push_back(p);
  }
  return points;
}

// Whether a piece's skin goes round its bone (a limb, a torso) rather than covering it from one
// side (a patch of face or shoulder: BCN_Epileptic's cheeks, brows and clavicles). Measured on
// the triangles with two corners or more in the piece: the length of the sum of their area
// vectors' parts across the bone, over the sum of those parts' lengths, below ½ (a tube reads 0,
// a patch facing one way 1; BCN_Epileptic's limbs and trunk read 0.02–0.41, its cheeks 0.98 and
// clavicles 0.91, Testwuson.X's torso 0.10–0.35 and its shoulders 0.91).
bool WrapsItsBone(const Rig& rig, const PieceSurface& piece, const Eigen::Vector3d& axis) {
  const Eigen::Vector3d a = axis.normalized();
  Eigen::Vector3d sum = Eigen::Vector3d::Zero();
  double total = 0;
  for (uint32_t t : piece.triangles) {
    const uint32_t* c = &rig.triangles[3 * size_t(t)];
    if (int(piece.Owns(c[0])) + int(piece.Owns(c[1])) + int(piece.Owns(c[2])) < 2) continue;
    const Eigen::Vector3d p = Point(rig.positions, c[0]);
    const Eigen::Vector3d w = (Point(rig.positions, c[1]) - p).cross(Point(rig.positions, c[2]) - p);
    const Eigen::Vector3d across = w - w.dot(a) * a;
    sum += across;
    total += across.norm();
  }
  return total > 0 && sum.norm() < 0.5 * total;
}

// Steps 1–2 for one piece on the segment [b0, b1]: the candidates between the culling planes,
// the Poisson disk, the closure points, the HRBF and its support radius. The candidates are the
// piece's vertices. Where those give fewer than min_samples samples (a low-poly mesh: a short
// torso bone of Testwuson.X owns 108 vertices on 18 points, 4–14 of them between its planes), the
// piece's skin goes round its bone (WrapsItsBone) and options.surface_samples > 0, they are points
// drawn over the piece's triangles instead, as the thesis samples "the sub-mesh surface" (§2.2):
// a vertex is such a point, and a dense mesh offers enough of them.
// With `joint` (a free start, FitBoneFields: b0 lies behind the bone's joint), the samples are
// those the fit at the joint takes, the same points, and a disk as dense over the piece's
// vertices behind the joint's culling plane down to the band at b0 (at most target_samples of
// them), so the HRBF changes where the piece was left out and as little as added samples allow
// elsewhere; its grid (FieldGrid) spans the longer bone, as coarse along it as its length.
absl::StatusOr<PieceFit> FitPiece(const Rig& rig, std::span<const Eigen::Vector3d> normals,
                                  std::span<const uint32_t> piece, const PieceSurface& surface,
                                  const Eigen::Vector3d& b0, const Eigen::Vector3d& b1,
                                  const BoneFieldOptions& options, double min_gap,
                                  const Eigen::Vector3d* joint = nullptr) {
  const int bone = surface.joint;
  PieceFit fit;
  BoneField field;
  field.joint = bone;
  field.b0 = b0;
  field.b1 = b1;
  const Eigen::Vector3d ab = field.b1 - field.b0;
  // The culling planes (Eq. 4.2) of the bone from its joint; a free start's band at b0 as wide.
  const Eigen::Vector3d start = joint ? *joint : b0, along = b1 - start;
  const double len2 = std::max(along.squaredNorm(), 1e-300);
  auto between_planes = [&](const Eigen::Vector3d& x) {
    const double t = (x - start).dot(along) / len2;
    return t > options.cull && t < 1 - options.cull;
  };
  auto behind_joint = [&](const Eigen::Vector3d& x) {  // a free start's: between b0's band and the joint's
    const double t = (x - start).dot(along) / len2;
    return joint && t <= options.cull && (x - b0).dot(along) / len2 > options.cull;
  };
  const size_t enough = size_t(std::max(options.min_samples, 4));
  // Poisson disk by dart throwing over the candidates in a seeded order: the minimum distance
  // shrinks until about the target count is reached, or to min_gap (then every point is taken).
  double rmin_taken = min_gap;  // the disk's last distance
  auto disk = [&](std::vector<SurfacePoint>& order) {
    std::shuffle(order.begin(), order.end(), std::mt19937(options.seed + static_cast<uint32_t>(bone)));
    Eigen::Vector3d lo = order[0].x, hi = lo;
    for (const SurfacePoint& p : order) {
      lo = lo.cwiseMin(p.x);
      hi = hi.cwiseMax(p.x);
    }
    std::vector<const SurfacePoint*> chosen;
    const double first = std::max((hi - lo).norm() / 2, min_gap);
    for (double rmin = first; rmin > 1e-12; rmin = std::max(rmin * 0.8, min_gap)) {
      rmin_taken = rmin;
      chosen.clear();
      for (const SurfacePoint& p : order) {
        bool far_enough = true;
        for (const SurfacePoint* c : chosen) {
          if ((c->x - p.x).norm() < rmin) {
            far_enough = false;
            break;
          }
        }
        if (far_enough) chosen.push_back(&p);
        if (static_cast<int>(chosen.size()) > options.target_samples) break;
      }
      if (static_cast<int>(chosen.size()) >= options.target_samples || chosen.size() == order.size()) break;
      if (rmin <= min_gap) break;
    }
    return chosen;
  };
  std::vector<SurfacePoint> candidates;
  for (uint32_t v : piece) {
    const Eigen::Vector3d x = Point(rig.positions, v);
    if (between_planes(x) && normals[v].norm() > 0) candidates.push_back({x, normals[v]});
  }
  std::vector<const SurfacePoint*> chosen;
  if (candidates.size() >= enough) chosen = disk(candidates);
  std::vector<SurfacePoint> behind;
  if (joint && !chosen.empty()) {
    for (uint32_t v : piece) {
      const Eigen::Vector3d x = Point(rig.positions, v);
      if (behind_joint(x) && normals[v].norm() > 0) behind.push_back({x, normals[v]});
    }
    std::shuffle(behind.begin(), behind.end(), std::mt19937(options.seed + static_cast<uint32_t>(bone)));
    // As far apart as the disk's samples, wider where that takes more than target_samples (a
    // disk that ran to min_gap takes every point: a dense piece reaching far back would make
    // thousands of samples and a dense system of four times as many unknowns).
    const size_t at_joint = chosen.size();
    for (double rmin = std::max(rmin_taken, 1e-12);; rmin *= 1.25) {  // (a mesh of one point: min_gap 0)
      chosen.resize(at_joint);
      for (const SurfacePoint& p : behind) {
        auto far_enough = [&](const SurfacePoint* c) { return (c->x - p.x).norm() >= rmin; };
        if (std::all_of(chosen.begin(), chosen.end(), far_enough)) chosen.push_back(&p);
      }
      if (chosen.size() - at_joint <= size_t(std::max(options.target_samples, 0))) break;
    }
  }
  // Too few distinct points among the vertices (few of them, or copies of a few: Testwuson.X has
  // 5 vertices a point): points of the piece's triangles instead.
  std::vector<SurfacePoint> drawn;
  if (chosen.size() < size_t(options.min_samples) && options.surface_samples > 0 && WrapsItsBone(rig, surface, ab)) {
    drawn = SurfaceSamples(rig, normals, surface, options.surface_samples, options.seed + static_cast<uint32_t>(bone));
    std::erase_if(drawn, [&](const SurfacePoint& p) { return !between_planes(p.x); });
    if (drawn.size() >= enough) {
      std::vector<const SurfacePoint*> from_surface = disk(drawn);
      if (from_surface.size() > chosen.size()) {
        chosen = std::move(from_surface);
        field.drawn = true;
      }
    }
  }
  fit.offered = chosen.empty() ? std::max(candidates.size(), drawn.size()) : chosen.size();
  if (chosen.size() < size_t(options.min_samples)) return fit;  // no field: not worth a fit
  // Closure points on the axis, at each end's distance to the nearest mesh vertex (§2.2).
  const Eigen::Vector3d a = ab.normalized();
  double s0 = 1e300, s1 = 1e300;
  for (uint32_t v : piece) {
    s0 = std::min(s0, (Point(rig.positions, v) - field.b0).norm());
    s1 = std::min(s1, (Point(rig.positions, v) - field.b1).norm());
  }
  Eigen::Matrix3Xd centers(3, chosen.size() + 2), nrm(3, chosen.size() + 2);
  for (size_t k = 0; k < chosen.size(); ++k) {
    centers.col(k) = chosen[k]->x;
    nrm.col(k) = chosen[k]->n;
  }
  centers.col(chosen.size()) = field.b0 - s0 * a;
  nrm.col(chosen.size()) = -a;
  centers.col(chosen.size() + 1) = field.b1 + s1 * a;
  nrm.col(chosen.size() + 1) = a;
  auto hrbf = Hrbf::Fit(centers, nrm);
  if (!hrbf.ok()) {
    return absl::Status(hrbf.status().code(), absl::StrCat("bone ", bone, " (", rig.skeleton.names[size_t(bone)],
                                                           "): ", hrbf.status().message()));
  }
  field.hrbf = std::move(*hrbf);
  field.samples = chosen.size();
  for (const SurfacePoint* c : chosen) {
    field.radius = std::max(field.radius, (c->x - ClosestOnSegment(c->x, field.b0, field.b1)).norm());
  }
  fit.field = std::move(field);
  return fit;
}

}  // namespace

Eigen::Vector3d ClosestOnSegment(const Eigen::Vector3d& x, const Eigen::Vector3d& a, const Eigen::Vector3d& b) {
  const Eigen::Vector3d ab = b - a;
  const double t = std::clamp((x - a).dot(ab) / std::max(ab.squaredNorm(), 1e-300), 0.0, 1.0);
  return a + t * ab;
}

std::vector<Eigen::Vector3d> JointBindPositions(const Rig& rig) {
  std::vector<Eigen::Vector3d> pos(rig.joint_count());
  for (size_t j = 0; j < pos.size(); ++j) pos[j] = Inverse(rig.skeleton.inverse_bind[j]).col(3);
  return pos;
}

Eigen::Vector3d LeafBoneEnd(const Rig& rig, std::span<const Eigen::Vector3d> pos, size_t j,
                            std::span<const uint32_t> piece) {
  const int p = rig.skeleton.parents[j];
  Eigen::Vector3d axis = p >= 0 ? Eigen::Vector3d(pos[j] - pos[size_t(p)]) : Eigen::Vector3d(Eigen::Vector3d::UnitX());
  if (axis.norm() < 1e-12) axis = Eigen::Vector3d::UnitX();
  axis.normalize();
  double far = 0;
  for (uint32_t v : piece) far = std::max(far, (Point(rig.positions, v) - pos[j]).dot(axis));
  return pos[j] + std::max(far, 1e-6) * axis;
}

std::vector<uint8_t> PassThroughJoints(const Rig& rig, std::span<const int32_t> segmentation) {
  const size_t joints = rig.joint_count();
  std::vector<size_t> owned(joints, 0), children(joints, 0);
  for (int32_t j : segmentation) ++owned[size_t(j)];
  for (size_t j = 0; j < joints; ++j) {
    if (rig.skeleton.parents[j] >= 0) ++children[size_t(rig.skeleton.parents[j])];
  }
  std::vector<uint8_t> through(joints);
  for (size_t j = 0; j < joints; ++j) through[j] = owned[j] < kMinPieceVertices && children[j] == 1;
  return through;
}

bool HasSegmentationAttribute(const Rig& rig) {
  return std::any_of(rig.attributes.begin(), rig.attributes.end(),
                     [](const AttributeMap& m) { return m.name == "segmentation"; });
}

absl::StatusOr<std::vector<int32_t>> Segmentation(const Rig& rig) {
  const size_t n = rig.vertex_count();
  std::vector<int32_t> joint(n);
  for (size_t a = 0; a < rig.attributes.size(); ++a) {
    const AttributeMap& m = rig.attributes[a];
    if (m.name != "segmentation") continue;
    const std::string field = absl::StrCat("rig.attributes[", a, "]");
    if (auto st = CheckKnownAttribute(m, n, rig.joint_count(), field); !st.ok()) return st;
    for (size_t v = 0; v < n; ++v) joint[v] = int32_t(m.values[v]);
    return joint;
  }
  if (rig.weights.offsets.empty()) {
    return absl::FailedPreconditionError("implicit fields need skinning weights or a segmentation attribute");
  }
  // The influence with the largest weight is stored first.
  for (size_t v = 0; v < n; ++v) joint[v] = rig.weights.joints[rig.weights.offsets[v]];
  return joint;
}

absl::StatusOr<std::vector<BoneField>> FitBoneFields(const Rig& rig, const BoneFieldOptions& options,
                                                     BoneFieldReport* report) {
  BoneFieldReport unused;
  if (report == nullptr) report = &unused;
  *report = {};
  const size_t n = rig.vertex_count(), joints = rig.joint_count();
  auto segmentation = Segmentation(rig);
  if (!segmentation.ok()) return segmentation.status();
  std::vector<std::vector<uint32_t>> pieces(joints);
  for (size_t v = 0; v < n; ++v) pieces[(*segmentation)[v]].push_back(static_cast<uint32_t>(v));
  // Until 2026-12-02 up to 65 535 fields were fitted and baked: 34 GB of grids.
  const size_t owning = size_t(
      std::count_if(pieces.begin(), pieces.end(), [](const auto& p) { return p.size() >= kMinPieceVertices; }));
  if (owning > options.max_fields) {
    return absl::ResourceExhaustedError(absl::StrCat("implicit skinning: ", owning,
                                                     " bones own 8 vertices or more; at most ", options.max_fields,
                                                     " bone fields (512 KB each) are taken"));
  }
  // Samples closer than min_gap are one point of the surface (core/geometry/weld.h): an exporter's
  // mirror seam leaves copies a few ulps apart, with normals up to 180° apart (Testwuson.X's
  // chest), and two of them in one fit make its system singular. Until 2026-12-05 the disk
  // shrank until such copies were taken, and the whole rig was refused.
  const double min_gap = RestWeldTolerance(rig.positions, rig.triangles);
  const std::vector<Eigen::Vector3d> normals = WeldedNormals(rig, WeldSeams(rig.positions, rig.triangles, min_gap));
  // Bone ends: the joint's bind position and its segment's end (below; a leaf extends along its
  // parent's direction to its piece's farthest projection).
  const std::vector<Eigen::Vector3d> pos = JointBindPositions(rig);
  std::vector<int> child(joints, -1), children(joints, 0);  // the first child, how many
  for (size_t j = 0; j < joints; ++j) {
    const int p = rig.skeleton.parents[j];
    if (p < 0) continue;
    if (child[p] < 0) child[p] = static_cast<int>(j);
    ++children[size_t(p)];
  }
  const std::vector<uint8_t> through = PassThroughJoints(rig, *segmentation);
  // A bone's segment runs to the first joint below it that owns a piece (or branches, or ends the
  // chain): joints between that own no vertex (helper bones, bones the weights skip:
  // assimp-testmodels' animation_with_skeleton.fbx) leave their length to its piece. Until
  // 2026-12-05 the segment ended at the first child, and the part of the piece beyond it, outside
  // the field (f = 0 there), kept the initial skinning beside vertices that were tracked.
  auto segment_end = [&](size_t j) {
    int c = child[j];
    while (c >= 0 && through[size_t(c)]) c = child[size_t(c)];
    return c;
  };

  // Each piece's triangles (a corner in it), for points drawn over a low-poly piece: one pass.
  std::vector<std::vector<uint32_t>> piece_triangles;
  if (options.surface_samples > 0) {
    piece_triangles.resize(joints);
    for (size_t t = 0; t < rig.triangle_count(); ++t) {
      const uint32_t* c = &rig.triangles[3 * t];
      for (int k = 0; k < 3; ++k) {
        const int32_t j = (*segmentation)[c[k]];
        if ((k < 1 || j != (*segmentation)[c[0]]) && (k < 2 || j != (*segmentation)[c[1]])) {
          piece_triangles[size_t(j)].push_back(uint32_t(t));
        }
      }
    }
  }
  // The joint across bone j's start: its parent, through joints its segment runs through.
  auto across_start = [&](size_t j) {
    int p = rig.skeleton.parents[j];
    while (p >= 0 && through[size_t(p)]) p = rig.skeleton.parents[size_t(p)];
    return p;
  };
  std::vector<std::optional<BoneField>> fitted(joints);
  // Fits piece j on [b0, b1]; b0 behind its joint for a free start (below).
  auto fit_joint = [&](size_t j, const Eigen::Vector3d& b0, const Eigen::Vector3d& b1) -> absl::Status {
    const bool free_start = b0 != pos[j];
    const PieceSurface surface{int(j), *segmentation, piece_triangles.empty() ? std::span<const uint32_t>() : piece_triangles[j]};
    auto fit = FitPiece(rig, normals, pieces[j], surface, b0, b1, options, min_gap, free_start ? &pos[j] : nullptr);
    if (!fit.ok()) return fit.status();
    if (!free_start && fit->offered > report->most_samples) {
      report->most_samples = fit->offered;
      report->most_samples_joint = int(j);
    }
    if (fit->field) fit->field->free_start = (pos[j] - b0).norm();
    fitted[j] = std::move(fit->field);
    return absl::OkStatus();
  };
  for (size_t j = 0; j < joints; ++j) {
    if (pieces[j].size() < kMinPieceVertices) continue;
    ++report->owning;
    const int end = segment_end(j);
    const Eigen::Vector3d b1 = end >= 0 ? pos[size_t(end)] : LeafBoneEnd(rig, pos, j, pieces[j]);
    if (auto st = fit_joint(j, pos[j], b1); !st.ok()) return st;
  }
  // A bone's start is free where the piece across it owns a skin but got no field and meets no
  // other there (its joint has this one child): nothing slides against this piece's end, and
  // the culling (Eq. 4.2) and the closure cap at the joint would leave the skin between them in
  // no field. Testwuson.X's thighs start at hips of 83–89 vertices without a field; a paw bent
  // to 150° met the thigh's field 0.061 R inside the hip's skin. Such a bone starts, as a leaf
  // ends (LeafBoneEnd), as far back as its piece reaches, and is fitted again with the samples
  // the fit at its joint took and those behind the joint (FitPiece). Drawing all of them anew
  // instead changed the whole field: the SuperCages Arm's elbow at 150° read 0.023 R instead of
  // 0.055 (a reselection, not the skin behind the joint), BCN_Epileptic's jaw (B_Neck, without
  // triangle fields) moved by 4.8e-3 of the diagonal under 1e-6 rad turns (4e-4 this way).
  if (options.extend_free_starts) {
    for (size_t j = 0; j < joints; ++j) {
      // A field drawn over a low-poly piece's triangles stays as it is: the vertices behind the
      // joint can lift its vertices over min_samples and make it a field of vertices, whose
      // skin is tracked (BCN_Epileptic's B_Root_Neck_H, refitted anew: its head then moved
      // 6.8e-3 of the diagonal under a 1e-6 rad turn).
      if (!fitted[j] || fitted[j]->drawn) continue;
      const int p = across_start(j);
      if (p < 0 || children[size_t(p)] != 1 || pieces[size_t(p)].size() < kMinPieceVertices || fitted[size_t(p)]) {
        continue;
      }
      // How far the piece reaches back behind its joint, along its bone. Within the culling band
      // the closure cap closes the piece, as it does where two fields meet; beyond it no cap reaches.
      const Eigen::Vector3d b1 = fitted[j]->b1, axis = (b1 - pos[j]).normalized();
      double back = 0;
      for (uint32_t v : pieces[j]) back = std::max(back, -(Point(rig.positions, v) - pos[j]).dot(axis));
      if (back <= options.cull * (b1 - pos[j]).norm()) continue;
      // The field at the joint stays where the refit fails (its samples are the first fit's, so
      // it has a field, unless the added ones make the system singular).
      std::optional<BoneField> at_joint = std::exchange(fitted[j], std::nullopt);
      if (!fit_joint(j, pos[j] - back * axis, b1).ok() || !fitted[j]) fitted[j] = std::move(at_joint);
    }
  }
  std::vector<BoneField> fields;
  for (auto& f : fitted) {
    if (f) fields.push_back(std::move(*f));
  }
  return fields;
}

}  // namespace sinew
