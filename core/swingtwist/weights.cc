#include "core/swingtwist/weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/swingtwist/sparse.h"

namespace sinew {
namespace {

using V3 = Eigen::Vector3d;

// Biharmonic weights of the handles on the grid, clamped and normalised: [handle][vertex].
absl::StatusOr<std::vector<std::vector<double>>> BlendWeights(const VoxelGrid& grid,
                                                              const std::vector<int32_t>& handle_vertex) {
  const size_t n = grid.vertices.size(), g = handle_vertex.size();
  std::vector<int32_t> handle_of(n, -1);
  for (size_t k = 0; k < g; ++k) handle_of[handle_vertex[k]] = int32_t(k);
  // Components without a handle (mesh parts far from every joint) copy the nearest solved vertex.
  std::vector<uint8_t> anchored(grid.components, 0);
  for (int32_t v : handle_vertex) anchored[grid.component[v]] = 1;
  auto passenger = [&](size_t i) { return !anchored[grid.component[i]]; };
  std::vector<Eigen::Triplet<double>> lt;
  std::vector<double> mass(n, 0.0);
  for (const auto& c : grid.corners) {
    for (int32_t v : c) mass[v] += 1.0 / 8;
    for (const auto& e : kVoxelEdges) {
      const int32_t a = c[e[0]], b = c[e[1]];
      lt.emplace_back(a, a, 1);
      lt.emplace_back(b, b, 1);
      lt.emplace_back(a, b, -1);
      lt.emplace_back(b, a, -1);
    }
  }
  Eigen::SparseMatrix<double> l(n, n);
  l.setFromTriplets(lt.begin(), lt.end());
  Eigen::VectorXd inv_mass(n);
  for (size_t i = 0; i < n; ++i) inv_mass[i] = 1 / mass[i];
  const Eigen::SparseMatrix<double> q = (l * inv_mass.asDiagonal() * l).pruned();
  // Free rows/columns: every vertex but the handles.
  std::vector<int32_t> free_index(n, -1);
  int32_t nf = 0;
  for (size_t i = 0; i < n; ++i) {
    if (handle_of[i] < 0 && !passenger(i)) free_index[i] = nf++;
  }
  std::vector<Eigen::Triplet<double>> ff;
  Eigen::MatrixXd rhs = Eigen::MatrixXd::Zero(nf, Eigen::Index(g));
  for (int col = 0; col < q.outerSize(); ++col) {
    for (Eigen::SparseMatrix<double>::InnerIterator it(q, col); it; ++it) {
      const int32_t r = free_index[it.row()];
      if (r < 0) continue;
      if (free_index[col] >= 0) ff.emplace_back(r, free_index[col], it.value());
      else if (handle_of[col] >= 0) rhs(r, handle_of[col]) -= it.value();
    }
  }
  std::vector<std::vector<double>> d(g, std::vector<double>(n, 0.0));
  for (size_t k = 0; k < g; ++k) d[k][handle_vertex[k]] = 1;
  if (nf > 0) {
    Eigen::SparseMatrix<double> qff(nf, nf);
    qff.setFromTriplets(ff.begin(), ff.end());
    SpdSolver solver(qff);
    if (!solver.ok()) {
      return absl::FailedPreconditionError("elasticity weights: the blend weights' system did not factor");
    }
    const Eigen::MatrixXd solved = solver.solve(rhs);
    for (size_t i = 0; i < n; ++i) {
      if (free_index[i] < 0) continue;
      for (size_t k = 0; k < g; ++k) d[k][i] = solved(free_index[i], Eigen::Index(k));
    }
  }
  const std::vector<int32_t> source = NearestAnchoredVertex(grid, anchored);
  for (size_t i = 0; i < n; ++i) {
    if (source[i] < 0) continue;
    for (size_t k = 0; k < g; ++k) d[k][i] = d[k][source[i]];
  }
  for (size_t i = 0; i < n; ++i) {
    double sum = 0, best = -1;
    size_t arg = 0;
    for (size_t k = 0; k < g; ++k) {
      if (d[k][i] > best) {
        best = d[k][i];
        arg = k;
      }
      d[k][i] = std::clamp(d[k][i], 0.0, 1.0);
      sum += d[k][i];
    }
    for (size_t k = 0; k < g; ++k) d[k][i] = sum > 1e-12 ? d[k][i] / sum : double(k == arg);
  }
  return d;
}

}  // namespace

absl::StatusOr<SwingTwistWeights> ComputeElasticWeights(const Rig& rig, const CanonicalFrames& frames,
                                                        const ElasticWeightsOptions& options, ThreadPool* pool,
                                                        const ProgressFn& progress, ElasticWeightsStats* stats) {
  const size_t nj = rig.joint_count(), nv = rig.vertex_count();
  if (nj == 0) return absl::FailedPreconditionError("elasticity weights need a skeleton");
  if (rig.triangle_count() == 0) {
    return absl::FailedPreconditionError("elasticity weights need a triangle mesh to voxelize (this rig is a point set)");
  }
  ElasticWeightsStats local_stats;
  ElasticWeightsStats& st = stats ? *stats : local_stats;
  double h = options.voxel_size;
  if (h <= 0) h = (rig.bbox_max - rig.bbox_min).cast<double>().maxCoeff() / 64;
  st.voxel_size = h;
  auto voxels = Voxelize(rig.positions, rig.triangles, {h, options.max_cells});
  if (!voxels.ok()) return voxels.status();
  const VoxelGrid& grid = *voxels;
  st.voxels = grid.voxel_count();
  st.grid_vertices = grid.vertices.size();
  // The blend weights' solve keeps dense handles x grid-vertices matrices (three of doubles), and
  // each joint looks for its nearest grid vertex: bounded by joints x grid vertices (until
  // 2026-12-02 not at all: 65 535 joints on 287 000 grid vertices asked for 150 GB).
  if (const double entries = double(nj) * double(grid.vertices.size()); entries > kElasticWeightsMaxEntries) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "elasticity weights: ", nj, " joints x ", grid.vertices.size(), " grid vertices (voxel size ", h, ") is ",
        entries, ", more than the ", kElasticWeightsMaxEntries, " the weights' solve takes; choose a larger voxel size"));
  }
  // The solves' memory, before any of it is taken (until 2026-12-03 a fine voxel size with many
  // samples passed the check above and asked for tens of GB).
  const double samples = std::max(std::max(options.swing_samples, options.twist_samples), 1);
  const double concurrent = std::min<double>(double(nj), pool ? double(std::max<size_t>(pool->workers(), 1)) : 1.0);
  if (const double bytes = ElasticWeightsBytes(double(grid.voxel_count()), double(grid.vertices.size()), samples,
                                               concurrent);
      bytes > kElasticWeightsMaxBytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "elasticity weights: %d voxels and %d grid vertices (voxel size %g) with %g rotation samples, %g solves at "
        "once, need about %.1f GB, more than the %.0f GB the weights' solves take; choose a larger voxel size or "
        "fewer swing_samples/twist_samples",
        grid.voxel_count(), grid.vertices.size(), h, samples, concurrent, bytes / 1e9, kElasticWeightsMaxBytes / 1e9));
  }

  // Handles: each joint's nearest grid vertex; joints that share one share a handle.
  std::vector<int32_t> handle_vertex, handle_of_joint(nj, -1);
  for (size_t j = 0; j < nj; ++j) {
    int32_t best = 0;
    double best_d = 1e300;
    for (size_t v = 0; v < grid.vertices.size(); ++v) {
      const double d = (grid.vertices[v] - frames.rest[j]).squaredNorm();
      if (d < best_d) {
        best_d = d;
        best = int32_t(v);
      }
    }
    auto at = std::find(handle_vertex.begin(), handle_vertex.end(), best);
    if (at == handle_vertex.end()) {
      handle_of_joint[j] = int32_t(handle_vertex.size());
      handle_vertex.push_back(best);
    } else {
      handle_of_joint[j] = int32_t(at - handle_vertex.begin());
    }
  }
  st.handles = handle_vertex.size();
  const size_t g = handle_vertex.size();
  // The deformers: per handle, the joints of its group with no child in the group — the deepest
  // joint of a chain, each of several siblings (coincident metacarpals), the joint alone where
  // the handle is its own. Until 2026-12-04 a group kept one deformer, its first deepest joint,
  // and a sibling's bend or twist reached its bone only through d, like LBS, or not at all.
  // A deformer in a group blends from the first joint above it that is outside the group, so that
  // the turns of the group's joints above it are its own, not a rigid transform it starts from
  // (which reached the bone only through d, like LBS). The span stops earlier at a joint of the
  // group with a child outside it (that child's deformer starts from its transform too:
  // BCN_Epileptic's pelvis, which carries the root motion, has the legs besides the spine) and
  // at the root.
  std::vector<std::vector<int32_t>> children(nj);
  for (size_t j = 0; j < nj; ++j) {
    if (rig.skeleton.parents[j] >= 0) children[rig.skeleton.parents[j]].push_back(int32_t(j));
  }
  std::vector<int32_t> deformer_joint, deformer_handle;
  std::vector<int32_t> deformer_parent(rig.skeleton.parents.begin(), rig.skeleton.parents.end());
  {
    // Whether each joint has a child in its group, or outside it; and the top of each joint's
    // span (the highest joint reached going up through its group's joints without a child
    // outside it), parents first. Until 2026-12-07 each deformer scanned its ancestors' children
    // as it went up: O(n²) for n siblings sharing a handle, before any progress call.
    std::vector<uint8_t> in_group_child(nj, 0), outside_child(nj, 0);
    for (size_t j = 0; j < nj; ++j) {
      const int32_t p = rig.skeleton.parents[j];
      if (p < 0) continue;
      (handle_of_joint[j] == handle_of_joint[p] ? in_group_child : outside_child)[size_t(p)] = 1;
    }
    std::vector<int32_t> top(nj);
    for (int32_t j : rig.skeleton.order) {
      const int32_t p = rig.skeleton.parents[j];
      top[j] = p >= 0 && handle_of_joint[p] == handle_of_joint[j] && !outside_child[p] ? top[p] : j;
    }
    std::vector<std::vector<int32_t>> joints_of_handle(g);  // increasing joints, as before
    for (size_t j = 0; j < nj; ++j) joints_of_handle[handle_of_joint[j]].push_back(int32_t(j));
    for (size_t k = 0; k < g; ++k) {
      for (int32_t j : joints_of_handle[k]) {
        if (in_group_child[j]) continue;
        deformer_joint.push_back(j);
        deformer_handle.push_back(int32_t(k));
        const int32_t last = top[j], p = rig.skeleton.parents[last];
        deformer_parent[j] = p >= 0 ? p : (last != j ? last : -1);
      }
    }
  }
  const size_t nd = deformer_joint.size();
  // The bones the weights' boundary conditions walk: the skeleton's, and a virtual one beyond
  // each leaf joint that carries geometry (a wrist at the end of a chain, a head): from the leaf
  // along its axis, as far as the vertices it holds most reach. The paper pairs each joint
  // deformer with a parent and a child bone; without a child a leaf had no deformer and reached
  // its parent bone only through d, so that its twist collapsed the parent bone mid-way like LBS
  // (0.025 of 0.25 on the limb's forearm at 170°, until 2026-12-04).
  std::vector<Eigen::Vector3d> bone_ends = frames.rest;
  std::vector<int32_t> bone_parents = rig.skeleton.parents;
  {
    std::vector<double> reach(nj, 0.0);
    if (rig.weights.offsets.size() == nv + 1) {
      for (size_t v = 0; v < nv; ++v) {
        if (rig.weights.offsets[v] == rig.weights.offsets[v + 1]) continue;
        uint32_t top = rig.weights.offsets[v];  // the joint holding it most
        for (uint32_t e = top + 1; e < rig.weights.offsets[v + 1]; ++e) {
          if (rig.weights.weights[e] > rig.weights.weights[top]) top = e;
        }
        const size_t j = rig.weights.joints[top];
        if (frames.bone_length[j] > 0 || rig.skeleton.parents[j] < 0) continue;  // not a leaf
        const V3 p(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
        reach[j] = std::max(reach[j], (p - frames.rest[j]).dot(frames.frame[j].col(2)));
      }
    }
    // The bone starts at the deformer of j's group below j: j itself, or where j's children sit
    // on it (a wrist with a helper, socket or end joint at its centre) the deepest of them, one
    // bone each. Until 2026-12-07 it started at j, outside that deformer's subtree, so that its
    // boundary conditions held it fixed: no bone rotated, no weights were solved, and the
    // wrist's twist reached the forearm through d alone, like LBS.
    // Found from each deformer up through its group (each joint's walk is its deformers', not
    // every deformer's for every leaf), then in the order of (leaf, deformer).
    std::vector<std::pair<int32_t, int32_t>> starts;  // (leaf j, deformer k)
    for (size_t k = 0; k < nd; ++k) {
      for (int32_t up = deformer_joint[k]; up >= 0 && handle_of_joint[up] == deformer_handle[k];
           up = rig.skeleton.parents[up]) {
        if (reach[up] > h) starts.emplace_back(up, int32_t(k));  // else none, or within a voxel
      }
    }
    std::sort(starts.begin(), starts.end());
    for (auto [j, k] : starts) {
      bone_ends.push_back(frames.rest[j] + reach[j] * frames.frame[j].col(2));
      bone_parents.push_back(deformer_joint[k]);
      ++st.leaf_bones;
    }
  }
  // Each deformer's boundary conditions (BoneDirichlet) walk every bone's bounding box of cells: a
  // chain of bones zig-zagging across a fine grid made that hours, past every cancellation check
  // (until 2026-12-03). Counted before any of it.
  double bone_cells = 0;
  for (size_t c = 0; c < bone_parents.size(); ++c) {
    const int32_t p = bone_parents[c];
    if (p < 0) continue;
    const Eigen::Vector3d a = bone_ends[size_t(p)], b = bone_ends[c];
    const auto lo = grid.CellOf(a.cwiseMin(b)), hi = grid.CellOf(a.cwiseMax(b));
    bone_cells += double(hi[0] - lo[0] + 1) * double(hi[1] - lo[1] + 1) * double(hi[2] - lo[2] + 1);
  }
  if (bone_cells * double(nd) > kElasticWeightsMaxBoneCells) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "elasticity weights: the bones' boxes cover %.0f cells (voxel size %g), walked for each of %d deformers: %.3g, "
        "more than the %.0e the weights' boundary conditions take; choose a larger voxel size",
        bone_cells, h, int(nd), bone_cells * double(nd), kElasticWeightsMaxBoneCells));
  }
  std::atomic<size_t> done{0};
  std::atomic<bool> stop{false};  // the caller asked to stop: joints not started are skipped
  std::mutex progress_mu;
  // Reports the joints done and learns whether to go on: asked before and after the blend
  // weights, between joints and inside each solve, so that a cancellation waits for one
  // factorization at most.
  auto keep_going = [&] {
    if (stop) return false;
    if (!progress) return true;
    std::lock_guard lock(progress_mu);
    if (!progress(double(done.load()) / double(nd))) stop = true;
    return !stop;
  };
  const auto cancelled = [&] {
    return absl::CancelledError(absl::StrCat("the weights' preparation was cancelled after ", done.load(), " of ", nd, " joints"));
  };
  if (!keep_going()) return cancelled();
  auto blend = BlendWeights(grid, handle_vertex);
  if (!blend.ok()) return blend.status();
  st.blend_solver = "biharmonic (clamped, normalised)";
  if (!keep_going()) return cancelled();

  // EMW for every deformer's joint that has bones on both sides.
  std::vector<std::vector<double>> swing(nd), twist(nd);
  std::vector<absl::Status> failures(nd);
  std::vector<int> iterations(nd, 0);
  // A deformer no bone starts from (a bare leaf) has none rotating: nothing to solve, and its
  // boundary conditions, O(joints + cells) each, are not walked (n such siblings walked n times).
  std::vector<uint8_t> bone_from(nj, 0);
  for (int32_t p : bone_parents) {
    if (p >= 0) bone_from[size_t(p)] = 1;
  }
  ParallelFor(pool, nd, 1, [&](size_t b, size_t e) {
    for (size_t k = b; k < e; ++k) {
      if (stop) return;
      const size_t j = size_t(deformer_joint[k]);
      if (!bone_from[j]) {
        ++done;
        if (!keep_going()) return;
        continue;
      }
      const Dirichlet dirichlet = BoneDirichlet(grid, bone_ends, bone_parents, j);
      const bool rotating = std::find(dirichlet.begin(), dirichlet.end(), int8_t{1}) != dirichlet.end();
      const bool fixed = std::find(dirichlet.begin(), dirichlet.end(), int8_t{0}) != dirichlet.end();
      if (rotating && fixed) {
        std::vector<Eigen::Vector3d> local(grid.vertices.size());
        for (size_t v = 0; v < local.size(); ++v) local[v] = frames.inverse[j] * grid.vertices[v].homogeneous();
        auto s = SolveEmw(grid, local, dirichlet, SwingSamples(options.swing_samples), options.emw, keep_going);
        auto t = s.ok() ? SolveEmw(grid, local, dirichlet, TwistSamples(options.twist_samples), options.emw, keep_going) : s;
        if (stop) return;
        if (!s.ok() || !t.ok()) {
          failures[k] = s.ok() ? t.status() : s.status();
        } else {
          swing[k] = std::move(s->weights);
          twist[k] = std::move(t->weights);
          iterations[k] = std::max(s->iterations, t->iterations);
        }
      }
      ++done;
      if (!keep_going()) return;
    }
  });
  if (stop) return cancelled();
  for (size_t k = 0; k < nd; ++k) {
    if (!failures[k].ok()) {
      return absl::Status(failures[k].code(), absl::StrCat("joint ", deformer_joint[k], ": ", failures[k].message()));
    }
    st.solved_joints += !swing[k].empty();
    st.max_iterations = std::max(st.max_iterations, iterations[k]);
  }

  // Trilinear transfer to the vertices; the largest `influences` blend weights kept after each
  // handle's d is scaled by the rig's own skinning weight on the bones that meet at it (the bone
  // its joint starts and the one it ends: a vertex's joints j lend their weight to j's handle
  // and to j's children's). d is smooth over the voxel grid, which bridges parts that touch in
  // the rest pose (a hand against the hip), and must not make a hip follow a thumb; and the
  // biharmonic d of a handle rises again past the next joints towards an open end (a hand kept
  // the shoulder's untwisted deformer). The scale is continuous in the rig's weights: a vertex
  // does not jump between handle sets where one of its weights falls to 0. A handle with several
  // deformers (siblings) splits its d among those that carry geometry (some vertex is weighted to
  // the joint or its children; a bare leaf takes none) by the vertex's weight on each one's joint
  // and children, eased towards an even split where those weights are small (kSiblingEase), so
  // that the split too is continuous.
  const size_t keep = std::clamp<size_t>(options.influences, 1, nd);
  std::vector<int32_t> deformers_of_handle(g, 0), deformer_of_joint(nj, -1);
  for (size_t i = 0; i < nd; ++i) {
    ++deformers_of_handle[deformer_handle[i]];
    deformer_of_joint[deformer_joint[i]] = int32_t(i);
  }
  const bool has_weights = rig.weights.offsets.size() == nv + 1;
  // The deformers a weight on joint j tells a sibling's side by: j's own and its parent's (whose
  // children's bone j's is).
  auto sides_of = [&](int32_t j, auto&& f) {
    if (deformer_of_joint[j] >= 0) f(size_t(deformer_of_joint[j]));
    const int32_t up = rig.skeleton.parents[j];
    if (up >= 0 && deformer_of_joint[up] >= 0) f(size_t(deformer_of_joint[up]));
  };
  // Which deformers carry geometry, and how many of a handle's do.
  std::vector<uint8_t> carries(nd, has_weights ? 0 : 1);
  if (has_weights) {
    for (size_t e = 0; e < rig.weights.joints.size(); ++e) {
      if (rig.weights.weights[e] > 0) sides_of(int32_t(rig.weights.joints[e]), [&](size_t i) { carries[i] = 1; });
    }
  }
  std::vector<int32_t> carriers_of_handle(g, 0);
  for (size_t i = 0; i < nd; ++i) carriers_of_handle[deformer_handle[i]] += carries[i];
  constexpr double kSiblingEase = 0.05;
  std::vector<uint32_t> counted(g, 0);   // == e + 1 when handle k has this influence's weight
  std::vector<double> on_bones(g, 0.0);  // per handle: the vertex's weight on the bones meeting there
  std::vector<double> own(nd, 0.0);      // per deformer: the vertex's weight on its joint and children
  std::vector<double> own_total(g, 0.0); // per handle: the sum of its deformers' `own`
  std::vector<double> blend_at(g, 0.0);
  SwingTwistWeights out;
  out.offsets.reserve(nv + 1);
  out.offsets.push_back(0);
  std::vector<std::pair<double, size_t>> cand(nd);
  for (size_t v = 0; v < nv; ++v) {
    const V3 p(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
    const auto cell = grid.CellOf(p);
    const int32_t voxel = grid.VoxelAt(cell);
    if (voxel < 0) return absl::InternalError(absl::StrCat("elasticity weights: vertex ", v, " outside the voxels"));
    const V3 f = ((p - grid.origin) / grid.h - V3(cell[0], cell[1], cell[2])).cwiseMax(0.0).cwiseMin(1.0);
    double c[8];
    for (int q = 0; q < 8; ++q) {
      c[q] = (q & 1 ? f.x() : 1 - f.x()) * (q >> 1 & 1 ? f.y() : 1 - f.y()) * (q >> 2 & 1 ? f.z() : 1 - f.z());
    }
    const auto& corners = grid.corners[voxel];
    auto at = [&](const std::vector<double>& values) {
      double x = 0;
      for (int q = 0; q < 8; ++q) x += c[q] * values[corners[q]];
      return x;
    };
    for (size_t k = 0; k < g; ++k) blend_at[k] = at((*blend)[k]);
    if (has_weights) {
      std::fill(on_bones.begin(), on_bones.end(), 0.0);
      std::fill(own.begin(), own.end(), 0.0);
      std::fill(own_total.begin(), own_total.end(), 0.0);
      for (uint32_t e = rig.weights.offsets[v]; e < rig.weights.offsets[v + 1]; ++e) {
        const double w = rig.weights.weights[e];
        if (!(w > 0)) continue;
        const int32_t j = rig.weights.joints[e];
        on_bones[handle_of_joint[j]] += w;  // once per handle, however many of j's children share it
        counted[handle_of_joint[j]] = e + 1;
        for (int32_t ch : children[j]) {
          const int32_t k = handle_of_joint[ch];
          if (counted[k] == e + 1) continue;
          counted[k] = e + 1;
          on_bones[k] += w;
        }
        sides_of(j, [&](size_t i) { own[i] += w; });  // which sibling's side of a shared handle
      }
      for (size_t i = 0; i < nd; ++i) own_total[deformer_handle[i]] += own[i];
    }
    double allowed_total = 0;
    for (size_t i = 0; i < nd; ++i) {
      const size_t k = size_t(deformer_handle[i]);
      const double scale = has_weights ? std::min(on_bones[k], 1.0) : 1.0;
      double split = 1;
      if (deformers_of_handle[k] > 1) {
        if (carriers_of_handle[k] == 0) {
          split = 1.0 / deformers_of_handle[k];
        } else if (!carries[i]) {
          split = 0;
        } else {
          split = has_weights ? (own[i] + kSiblingEase / carriers_of_handle[k]) / (own_total[k] + kSiblingEase)
                              : 1.0 / carriers_of_handle[k];
        }
      }
      cand[i] = {scale * split > 0 ? scale * split * blend_at[k] : 0.0, i};
      allowed_total += cand[i].first;
    }
    if (allowed_total <= 0) {  // nothing related nearby: every handle, split evenly
      for (size_t i = 0; i < nd; ++i) {
        const size_t k = size_t(deformer_handle[i]);
        cand[i] = {blend_at[k] / deformers_of_handle[k], i};
      }
    }
    std::partial_sort(cand.begin(), cand.begin() + keep, cand.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    double sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += cand[i].first;
    for (size_t i = 0; i < keep; ++i) {
      if (cand[i].first <= 0 && i > 0) break;
      const size_t k = cand[i].second;
      out.joints.push_back(uint16_t(deformer_joint[k]));
      out.d.push_back(float(sum > 0 ? cand[i].first / sum : 1.0));
      out.s.push_back(swing[k].empty() ? 1.f : float(std::clamp(at(swing[k]), 0.0, 1.0)));
      out.t.push_back(twist[k].empty() ? 1.f : float(std::clamp(at(twist[k]), 0.0, 1.0)));
    }
    out.offsets.push_back(uint32_t(out.joints.size()));
  }
  out.parents = std::move(deformer_parent);
  return out;
}

}  // namespace sinew
