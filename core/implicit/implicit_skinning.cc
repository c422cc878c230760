// The per-rig preparation of implicit skinning (seed 000 §2.1–2.6); the deformers are in
// tracking.cc.
#include "core/implicit/implicit_skinning.h"
#include "core/geometry/mesh_quality.h"
#include "core/geometry/nearest_point.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/deformer/skeletal.h"
#include "core/geometry/weld.h"
#include "core/implicit/device_layout.h"
#include "core/implicit/field_eval.h"
#include "core/util/union_find.h"

namespace sinew {

absl::StatusOr<std::vector<JointOperator>> JointOperators(const Rig& rig, const ImplicitConfig& config) {
  std::vector<JointOperator> ops(rig.joint_count(), config.default_operator);
  std::vector<char> seen(rig.joint_count(), 0);
  for (size_t k = 0; k < config.joint_operators.size(); ++k) {
    const auto& [joint, op] = config.joint_operators[k];
    if (joint >= rig.joint_count()) {
      return absl::InvalidArgumentError(absl::StrCat("deformer.implicit.joints[", k, "].joint: ", joint, " but the rig has ",
                                                     rig.joint_count(), " joints"));
    }
    if (seen[joint]) {
      return absl::InvalidArgumentError(absl::StrCat("deformer.implicit.joints[", k, "].joint: joint ", joint, " listed twice"));
    }
    seen[joint] = 1;
    ops[joint] = op;
  }
  return ops;
}

absl::Status CheckImplicitConfig(const Rig& rig, const DeformerConfig& config) {
  const char* name = config.method == "elastic-implicit" ? "elastic-implicit" : "implicit";
  if (auto st = SkeletalDeformer::CheckRig(rig, name); !st.ok()) return st;
  if (rig.triangle_count() == 0) {
    return absl::FailedPreconditionError(absl::StrCat("method ", name, " needs a triangle mesh; the rig has no triangles"));
  }
  // Before the preparation, as dqs refuses it (until 2026-12-07 only the deformer did: the fields
  // were fitted, kept on the rig, and no session could use them).
  if (!rig.skeleton.inverse_bind_is_similarity) {
    return absl::FailedPreconditionError(absl::StrCat(
        "method ", name, " starts from dual quaternion skinning, which needs inverse bind matrices that are "
        "similarities; this rig's ", NotSimilarity(rig.skeleton), " (use lbs)"));
  }
  return JointOperators(rig, ParamsOf<ImplicitConfig>(config)).status();
}

std::string ImplicitKey(const DeformerConfig& config) {
  const ImplicitConfig& c = ParamsOf<ImplicitConfig>(config);
  std::string key = absl::StrCat("ops=", JointOperatorName(c.default_operator));
  auto list = c.joint_operators;
  std::sort(list.begin(), list.end());
  for (const auto& [j, op] : list) {
    if (op != c.default_operator) absl::StrAppend(&key, ",", j, ":", JointOperatorName(op));
  }
  // Bone heat weights are computed only for the sessions that ask for them.
  if (c.rotation_weights == RotationWeights::kHarmonic) absl::StrAppend(&key, ",rotations=harmonic");
  if (c.min_field_radius != ImplicitConfig{}.min_field_radius) absl::StrAppend(&key, ",min_field_radius=", KeyNumber(c.min_field_radius));
  if (!c.sample_triangles) absl::StrAppend(&key, ",no_sample_triangles");
  if (c.sample_triangles && c.track_sampled_pieces) absl::StrAppend(&key, ",track_sampled_pieces");
  return key;
}

namespace {
// Choice words of a joint's operator; the index is the JointOperator ("default": the session's).
constexpr std::string_view kJointOperatorWords[] = {"default", "union", "clean-union", "contact", "bulge"};
constexpr std::string_view kRotationWeightWords[] = {"skinning", "harmonic"};
constexpr ParamSpec kJointChoiceSpecs[] = {
    {"joint", ParamSpec::Type::kInteger, "", "the child joint of the two bones that meet there"},
    {"op", ParamSpec::Type::kChoice, "default", "its operator", kJointOperatorWords},
};
constexpr ParamSpec kImplicitSpecs[] = {
    {"default_operator", ParamSpec::Type::kChoice, "contact",
     "how the fields of two bones meet at a joint: union (max), clean-union, contact, bulge", kJointOperatorWords},
    {"joints", ParamSpec::Type::kList, "", "per-joint exceptions, each joint at most once", {}, kJointChoiceSpecs},
    {"sigma", ParamSpec::Type::kNumber, "0.35", "Newton step damping, (0, 1]"},
    {"max_iterations", ParamSpec::Type::kInteger, "40", "projection steps per frame (elastic: per sub-step), [1, 1000]"},
    {"contact_angle_degrees", ParamSpec::Type::kNumber, "55", "gradient jump that stops a vertex, (0, 180]"},
    {"smoothing_iterations", ParamSpec::Type::kInteger, "3", "implicit: smoothing steps at contacts, [0, 100]"},
    {"relaxation_iterations", ParamSpec::Type::kInteger, "40", "elastic: CG iterations per Gauss-Newton round, [0, 10000]"},
    {"relaxation_rounds", ParamSpec::Type::kInteger, "256",
     "elastic: Gauss-Newton rounds of the relaxation energy per sub-step, at most (fewer once converged), [1, 1000]"},
    {"min_substep_radians", ParamSpec::Type::kNumber, "0.1", "elastic: sub-step floor (steps <= bend / 3), > 0"},
    {"max_substep_radians", ParamSpec::Type::kNumber, "0.175",
     "elastic: sub-step ceiling (a joint turns at most this much per sub-step), > 0"},
    {"max_substeps", ParamSpec::Type::kInteger, "32", "elastic: [1, 1024]"},
    {"rotation_weights", ParamSpec::Type::kChoice, "skinning",
     "elastic: what blends each vertex's target rotation: skinning (the rig's weights) or harmonic (bone heat "
     "weights on the rest mesh, the thesis' choice)",
     kRotationWeightWords},
    {"min_field_radius", ParamSpec::Type::kNumber, "0.3",
     "pieces whose field's support radius is below this fraction of the rig's mean keep the initial skinning "
     "(untracked); 0 tracks every piece, [0, 1]"},
    {"sample_triangles", ParamSpec::Type::kFlag, "true",
     "preparation: a bone whose piece has fewer than 16 distinct vertices between its culling planes (a low-poly "
     "mesh) and goes round its bone gets a field fitted on points drawn over its triangles, which other pieces' "
     "skin stops at; off, such a piece has no field"},
    {"track_sampled_pieces", ParamSpec::Type::kFlag, "false",
     "preparation: the skin of the pieces sample_triangles gave fields is tracked too; off, it keeps the initial "
     "skinning (tracked anyway when every field is drawn; nothing without sample_triangles)"},
    {"contact_gate_open", ParamSpec::Type::kNumber, "0",
     "elastic: the cosine between two fields' gradients below which a node's own-side term against the other "
     "piece starts to act (0: face-to-face contacts only; 0.5 also side-on ones), (-0.2, 1]"},
    {"average_stalled_relaxations", ParamSpec::Type::kFlag, "false",
     "elastic: a relaxation that reaches relaxation_rounds ends at the mean of its last two iterates"},
    {"relaxation_tolerance", ParamSpec::Type::kNumber, "0.001",
     "elastic: a relaxation round that moves no node farther than this fraction of the mean edge is the last "
     "(smaller: nearer each minimum, slower; 0 runs every relaxation to relaxation_rounds), [0, 0.1]"},
};

absl::Status ReadOperator(ParamReader& r, std::string_view name, JointOperator fallback, JointOperator& out) {
  int k = 0;  // "default"
  r.Choice(name, kJointOperatorWords, k);
  out = k == 0 ? fallback : static_cast<JointOperator>(k);
  return r.status();
}
}  // namespace

std::span<const ParamSpec> ImplicitParamSpecs() { return kImplicitSpecs; }

absl::StatusOr<std::shared_ptr<const MethodParams>> ParseImplicitParams(const ParamSet& set, std::string_view field) {
  auto p = std::make_shared<ImplicitConfig>();
  ParamReader r(set, field);
  if (auto st = ReadOperator(r, "default_operator", JointOperator::kContact, p->default_operator); !st.ok()) return st;
  std::unordered_map<uint32_t, size_t> listed;  // joint -> its first entry
  r.List("joints", [&](const ParamSet& item, const std::string& f) -> absl::Status {
    ParamReader ir(item, f);
    if (item.Find("joint") == nullptr) return absl::InvalidArgumentError(f + ".joint: required");
    uint32_t joint = 0;
    ir.Count("joint", joint, 0, 65535);
    if (!ir.status().ok()) return ir.status();
    // Refused here, not only against the rig: a list naming a joint twice has no meaning.
    if (const auto [it, added] = listed.emplace(joint, listed.size()); !added) {
      return absl::InvalidArgumentError(absl::StrCat(f, ".joint: joint ", joint, " is listed twice (also at entry ",
                                                     it->second, ")"));
    }
    JointOperator op;
    if (auto st = ReadOperator(ir, "op", p->default_operator, op); !st.ok()) return st;
    p->joint_operators.emplace_back(joint, op);
    return absl::OkStatus();
  });
  r.Number("sigma", p->sigma, 0, 1, /*open_lo=*/true)
      .Count("max_iterations", p->max_iterations, 1, 1000)
      .Number("contact_angle_degrees", p->contact_angle_degrees, 0, 180, /*open_lo=*/true)
      .Count("smoothing_iterations", p->smoothing_iterations, 0, 100)
      .Count("relaxation_iterations", p->relaxation_iterations, 0, 10000)
      .Count("relaxation_rounds", p->relaxation_rounds, 1, 1000)
      .Number("min_substep_radians", p->min_substep_radians, 0, 1e9, /*open_lo=*/true)
      .Number("max_substep_radians", p->max_substep_radians, 0, 1e9, /*open_lo=*/true)
      .Count("max_substeps", p->max_substeps, 1, 1024)
      .Number("min_field_radius", p->min_field_radius, 0, 1)
      .Flag("sample_triangles", p->sample_triangles)
      .Flag("track_sampled_pieces", p->track_sampled_pieces)
      .Number("contact_gate_open", p->contact_gate_open, -0.2, 1, /*open_lo=*/true)
      .Flag("average_stalled_relaxations", p->average_stalled_relaxations)
      .Number("relaxation_tolerance", p->relaxation_tolerance, 0, 0.1);
  int rotation = 0;
  r.Choice("rotation_weights", kRotationWeightWords, rotation);
  p->rotation_weights = static_cast<RotationWeights>(rotation);
  if (!r.status().ok()) return r.status();
  // The floor above the ceiling would win (a joint turning up to the floor per sub-step, past
  // what max_substep_radians promises): refused, naming both (until 2026-12-07 taken silently).
  if (p->min_substep_radians > p->max_substep_radians) {
    const std::string f(field);
    return absl::InvalidArgumentError(absl::StrCat(f, ".min_substep_radians: ", p->min_substep_radians,
                                                   " is above ", f, ".max_substep_radians ", p->max_substep_radians,
                                                   " (the floor of the sub-step rule must not pass its ceiling)"));
  }
  return std::shared_ptr<const MethodParams>(std::move(p));
}

std::vector<int32_t> BuildCompositionTree(const Skeleton& skeleton, const std::vector<int32_t>& leaf_joint,
                                          const std::vector<JointOperator>& ops, CompositionTree* tree) {
  const size_t joints = skeleton.parents.size();
  std::vector<int32_t> field_of_joint(joints, -1);
  for (size_t i = 0; i < leaf_joint.size(); ++i) field_of_joint[leaf_joint[i]] = int32_t(i);
  std::vector<std::vector<int32_t>> children(joints);
  std::vector<int32_t> roots;
  for (int32_t j : skeleton.order) {
    (skeleton.parents[j] < 0 ? roots : children[skeleton.parents[j]]).push_back(j);
  }
  tree->nodes.clear();
  std::vector<int32_t> subtree(joints, -1);
  auto join = [&](int32_t a, int32_t b, JointOperator op) {
    if (a < 0) return b;
    if (b < 0) return a;
    CompositionTree::Node n;
    n.left = a;
    n.right = b;
    n.op = op;
    tree->nodes.push_back(n);
    return int32_t(tree->nodes.size() - 1);
  };
  // Children before parents: the reverse of the parent-first order.
  for (auto it = skeleton.order.rbegin(); it != skeleton.order.rend(); ++it) {
    const int32_t j = *it;
    int32_t cur = -1;
    if (field_of_joint[j] >= 0) {
      CompositionTree::Node leaf;
      leaf.leaf = field_of_joint[j];
      tree->nodes.push_back(leaf);
      cur = int32_t(tree->nodes.size() - 1);
    }
    // Bulge joints at the bottom of the tree (§2.5.5), then the others, each in joint order.
    for (int pass = 0; pass < 2; ++pass) {
      for (int32_t c : children[j]) {
        if ((ops[c] == JointOperator::kBulge) == (pass == 0)) cur = join(cur, subtree[c], ops[c]);
      }
    }
    subtree[j] = cur;
  }
  int32_t root = -1;
  for (int32_t r : roots) root = join(root, subtree[r], JointOperator::kUnion);
  tree->root = root;
  // Depth-first leaf numbering and ranges.
  std::vector<int32_t> order;
  std::vector<std::pair<int32_t, bool>> stack;
  if (root >= 0) stack.push_back({root, false});
  while (!stack.empty()) {
    auto [n, done] = stack.back();
    stack.pop_back();
    CompositionTree::Node& node = tree->nodes[n];
    if (node.leaf >= 0) {
      node.lo = uint16_t(order.size());
      order.push_back(node.leaf);
      node.hi = uint16_t(order.size());
      node.leaf = node.lo;  // leaves now index the reordered fields
      continue;
    }
    if (done) {
      node.lo = tree->nodes[node.left].lo;
      node.hi = tree->nodes[node.right].hi;
      continue;
    }
    stack.push_back({n, true});
    stack.push_back({node.right, false});
    stack.push_back({node.left, false});
  }
  return order;
}

using namespace implicit_internal;

std::string ImplicitModel::Summary() const {
  const size_t drawn = size_t(std::count_if(fields.begin(), fields.end(), [](const BoneField& f) { return f.drawn; }));
  const size_t tracked = size_t(std::count(in_field.begin(), in_field.end(), uint8_t{1}));
  std::string s = absl::StrCat(fields.size(), " bone fields");
  if (drawn > 0) {
    absl::StrAppend(&s, " (", drawn, " fitted on points of their triangles",
                    track_sampled_pieces || drawn == fields.size() ? "" : ", their skin untracked", ")");
  }
  const size_t free_starts =
      size_t(std::count_if(fields.begin(), fields.end(), [](const BoneField& f) { return f.free_start > 0; }));
  if (free_starts > 0) {
    absl::StrAppend(&s, ", ", free_starts, " of them starting behind their joint (no field across it)");
  }
  if (thin_fields > 0) absl::StrAppend(&s, ", ", thin_fields, " of them too thin to track (min_field_radius)");
  if (pieces_without_field > 0) {
    absl::StrAppend(&s, "; ", pieces_without_field, " pieces of 8 vertices or more without one (too few points between "
                    "their joints",
                    sample_triangles ? ", skin on one side of the bone, or too thin"
                                     : "; sample_triangles fits low-poly ones",
                    ")");
  }
  absl::StrAppend(&s, "; ", tracked, " of ", node_count(), " mesh points tracked");
  if (hidden_nodes > 0) absl::StrAppend(&s, " (", hidden_nodes, " more inside the rest skin move with the skin around them)");
  return s;
}

size_t ImplicitModel::Bytes() const {
  size_t b = sizeof(*this) + own_leaf.size() * 4 + (rest_pair_leaf.size() + rest_pair_excess.size()) * 4 +
             depth_scale.size() * 4 + parent_field.size() * 4;
  for (const FieldGrid& g : grids) b += g.Bytes();
  b += tree.nodes.size() * sizeof(CompositionTree::Node);
  b += 4 * (node_of_vertex.size() + vertex_of_node.size() + rest.size() + iso.size() + bone.size() + step_cap.size() +
            ring_offsets.size() + ring.size() + mvc.size() + cot.size() + cot_sum.size() + component_offsets.size() +
            component_nodes.size() + component_of_node.size() + follow_offsets.size() + follow_source.size() +
            follow_weight.size() + follow_sources.size());
  b += in_field.size() + ring_closed.size();
  b += 4 * (heat.offsets.size() + heat.weights.size()) + 2 * heat.joints.size();
  for (const BoneField& f : fields) b += f.hrbf.centers().size() * 8 * 2;
  return b;  // the shared operators are counted once per process, not per rig
}

float EvaluateRestField(const ImplicitModel& m, const Eigen::Vector3f& x, Eigen::Vector3f* gradient) {
  std::vector<LeafFrame> leaves;
  std::vector<Affine34d> identity(m.fields.empty() ? 0 : 1 + std::max_element(m.fields.begin(), m.fields.end(),
                                                                             [](const BoneField& a, const BoneField& b) {
                                                                               return a.joint < b.joint;
                                                                             })->joint,
                                  IdentityAffine());
  MakeLeafFrames(m, identity, leaves);
  uint16_t cand[kMaxCandidates];
  const int count = Candidates(m, leaves, x, cand);
  const FieldValue v = Evaluator(m, leaves.data()).Eval(x, cand, count);
  if (gradient) *gradient = v.g;
  return v.f;
}

absl::StatusOr<std::shared_ptr<const Prepared>> PrepareImplicit(const Rig& rig, const DeformerConfig& config,
                                                                ThreadPool* pool, const ProgressFn& progress) {
  const char* name = config.method == "elastic-implicit" ? "elastic-implicit" : "implicit";
  if (auto st = CheckImplicitConfig(rig, config); !st.ok()) return st;
  auto ops = JointOperators(rig, ParamsOf<ImplicitConfig>(config));
  if (!ops.ok()) return ops.status();
  auto report = [&](double p) { return !progress || progress(p); };
  auto model = std::make_shared<ImplicitModel>();
  BoneFieldReport fit;
  BoneFieldOptions field_options;
  const bool sample_triangles = ParamsOf<ImplicitConfig>(config).sample_triangles;
  if (sample_triangles) field_options.surface_samples = 4000;
  auto fields = FitBoneFields(rig, field_options, &fit);
  if (!fields.ok()) return fields.status();
  if (fields->empty() && fit.owning == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "method ", name, ": no bone owns enough vertices (8, by largest weight) for an implicit field"));
  }
  if (fields->empty()) {
    // Until 2026-12-05 this said no bone owned 8 vertices, where bones did but the mesh was too
    // coarse (assimp-testmodels' huesitos.fbx: 120 triangles).
    const std::string most =
        fit.most_samples_joint < 0
            ? std::string(", none of them a point away from its joints")
            : absl::StrCat("; the most points, ", fit.most_samples, ", on joint ", fit.most_samples_joint, " '",
                           rig.skeleton.names[size_t(fit.most_samples_joint)], "'");
    return absl::FailedPreconditionError(absl::StrCat(
        "method ", name, ": no bone's piece offers ", BoneFieldOptions{}.min_samples,
        " surface points away from its joints for an implicit field (", fit.owning, " bones own 8 vertices or more",
        most, "): the mesh is too coarse for implicit skinning; subdivide it",
        sample_triangles ? "" : ", set sample_triangles (fields fitted on points of its triangles)", ", or use dqs"));
  }
  // The rig's scale (the typical gradient, step caps, what is too thin to track): the mean
  // support radius of the fields fitted on the mesh's vertices. Fields fitted on points drawn over
  // a low-poly piece's triangles (BoneField::drawn, ImplicitConfig::sample_triangles) leave it as
  // it was without them (on Testwuson.X they are its torso, 2–4 times its legs' radius, and
  // counted they would make its lower legs too thin to track), and one too thin to track is not
  // kept: it would track nothing and only reshape its neighbours' composition (BCN_Epileptic's
  // mouth corners, beside its jaw).
  const bool any_from_vertices =
      std::any_of(fields->begin(), fields->end(), [](const BoneField& f) { return !f.drawn; });
  // Counted in the scale: the fields fitted on vertices, or every field where none is.
  auto in_scale = [&](const BoneField& f) { return !f.drawn || !any_from_vertices; };
  auto scale_of = [&](std::span<const BoneField> list) {
    const size_t counted = size_t(std::count_if(list.begin(), list.end(), in_scale));
    double mean = 0;
    for (const BoneField& f : list) {
      if (in_scale(f)) mean += f.radius / double(counted);
    }
    return mean;
  };
  const double scale_of_all_drawn = any_from_vertices ? 0.0 : scale_of(*fields);
  {
    const double too_thin = ParamsOf<ImplicitConfig>(config).min_field_radius * scale_of(*fields);
    std::erase_if(*fields, [&](const BoneField& f) { return f.drawn && f.radius < too_thin; });
  }
  if (fields->empty()) {  // every field drawn and thin against their own mean (min_field_radius near 1)
    return absl::FailedPreconditionError(absl::StrCat("method ", name, ": no bone field is wide enough to track (",
                                                      "min_field_radius ",
                                                      ParamsOf<ImplicitConfig>(config).min_field_radius,
                                                      " of the mean support radius)"));
  }
  model->pieces_without_field = fit.owning - fields->size();
  if (fields->size() > 65535) return absl::FailedPreconditionError("implicit skinning: more than 65535 bone fields");
  // Asked between the stages (and between the field grids): a cancellation waits for one stage.
  const auto cancelled = [&] { return absl::CancelledError(absl::StrCat("method ", name, ": preparation cancelled")); };
  if (!report(0.3)) return cancelled();
  std::vector<FieldGrid> grids(fields->size());
  for (size_t i = 0; i < fields->size(); ++i) {
    grids[i] = FieldGrid::Bake((*fields)[i], 32, pool);
    if (!report(0.3 + 0.5 * double(i + 1) / fields->size())) return cancelled();
  }
  auto shared = SharedOperators({}, pool, [&](double p) { return report(0.8 + 0.1 * p); });
  if (!shared.ok()) return shared.status();
  if (!report(0.9)) return cancelled();
  model->operators = *shared;

  std::vector<int32_t> leaf_joint;
  for (const BoneField& f : *fields) leaf_joint.push_back(f.joint);
  const std::vector<int32_t> order = BuildCompositionTree(rig.skeleton, leaf_joint, *ops, &model->tree);
  for (int32_t i : order) {
    model->fields.push_back(std::move((*fields)[i]));
    model->grids.push_back(std::move(grids[i]));
  }
  for (const FieldGrid& g : model->grids) {
    model->sphere_centers.push_back((g.lo() + g.hi()) / 2);
    model->sphere_radii.push_back((g.hi() - g.lo()).norm() / 2);
  }
  // Summed in composition order, as until 2026-12-05 (a rig without drawn fields prepares bit for
  // bit as before); a rig whose fields are all drawn keeps the scale its thin ones were judged by.
  const double mean_radius = any_from_vertices ? scale_of(model->fields) : scale_of_all_drawn;

  // Nodes: the mesh's vertices at equal rest positions welded (UV and hard-edge seams); their
  // one-rings and components below are the mesh's topology.
  const size_t nv = rig.vertex_count();
  model->node_of_vertex.resize(nv);
  {
    const std::vector<uint32_t> rep = WeldByPosition(rig.positions, 0);
    for (size_t v = 0; v < nv; ++v) {
      if (rep[v] == v) {
        model->node_of_vertex[v] = uint32_t(model->vertex_of_node.size());
        model->vertex_of_node.push_back(uint32_t(v));
      } else {
        model->node_of_vertex[v] = model->node_of_vertex[rep[v]];
      }
    }
  }
  const size_t nn = model->vertex_of_node.size();
  auto segmentation = Segmentation(rig);
  if (!segmentation.ok()) return segmentation.status();
  model->rest.resize(3 * nn);
  model->bone.resize(nn);
  for (size_t i = 0; i < nn; ++i) {
    const uint32_t v = model->vertex_of_node[i];
    std::copy_n(&rig.positions[3 * v], 3, &model->rest[3 * i]);
    model->bone[i] = (*segmentation)[v];
  }
  // Rest iso values with the composed field. A node is tracked when its own bone has a field
  // that is not too thin (ImplicitConfig::min_field_radius) and that field is what the
  // composition shows there (|iso − f_own| < kOwnFieldMatch): a piece
  // buried in another (an eye in the head) or a bone without a field keeps the initial skinning,
  // since marching it to the composed surface would undo its own bone's motion [S]. A crease
  // vertex whose weights split between two bones can belong, by its largest weight, to the bone
  // whose field the composition does not show there (the other bone's surface is the nearer):
  // untracked, it would keep the initial skinning and fold into the crease (the SuperCages Arm's
  // elbow). Unless the rig gives its segmentation, such a vertex belongs to its next-largest
  // influence if the composition shows that bone's field there (the other side of its crease,
  // however small its weight: the Arm's wrist-side forearm skin, 0.09 on lowerarm02.R, whose
  // field is the one the composition shows; with a floor of 0.25 on that weight instead, until
  // 2026-11-28, it stayed on DQS and crossed the elbow's contact by 0.30 R at 150°).
  model->iso.resize(nn);
  model->in_field.resize(nn);
  model->own_leaf.resize(nn);
  std::vector<Eigen::Vector3f> rest_gradient(nn);
  std::vector<int32_t> field_of_joint(rig.joint_count(), -1);
  for (size_t i = 0; i < model->fields.size(); ++i) field_of_joint[model->fields[i].joint] = int32_t(i);
  constexpr float kOwnFieldMatch = 0.05f;
  const bool given_segmentation = HasSegmentationAttribute(rig);
  model->min_field_radius = ParamsOf<ImplicitConfig>(config).min_field_radius;
  model->sample_triangles = sample_triangles;
  std::vector<uint8_t> thin(model->fields.size());
  for (size_t l = 0; l < model->fields.size(); ++l) thin[l] = model->fields[l].radius < model->min_field_radius * mean_radius;
  model->thin_fields = size_t(std::count(thin.begin(), thin.end(), uint8_t{1}));
  model->track_sampled_pieces = sample_triangles && ParamsOf<ImplicitConfig>(config).track_sampled_pieces;
  // A drawn field (a low-poly piece's) is a contact surface for the others unless its skin is
  // asked to be tracked (tracked, BCN_Epileptic's neck root moves its head under 1e-6 rad turns),
  // or every field is drawn (a mesh too coarse for any other: untracked, the method would be DQS).
  const bool track_drawn = model->track_sampled_pieces || !any_from_vertices;
  auto trackable = [&](int32_t leaf) {
    return leaf >= 0 && !thin[leaf] && (!model->fields[size_t(leaf)].drawn || track_drawn);
  };
  ParallelFor(pool, nn, 256, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const Eigen::Vector3f p = P3(model->rest, i);
      model->iso[i] = EvaluateRestField(*model, p, &rest_gradient[i]);
      const int32_t own = field_of_joint[model->bone[i]];
      model->own_leaf[i] = own;
      model->in_field[i] = 0;
      if (!(model->iso[i] > 0 && model->iso[i] < 1) || rest_gradient[i].squaredNorm() == 0) continue;
      auto mismatch = [&](int32_t leaf) { return std::abs(model->iso[i] - model->grids[leaf].Sample(p)); };
      if (own >= 0 && mismatch(own) < kOwnFieldMatch) {
        if (!trackable(own)) continue;
        model->in_field[i] = 1;
        continue;
      }
      if (given_segmentation) continue;
      const uint32_t v = model->vertex_of_node[i];
      int32_t next = -1;  // the next-largest influence (the first of equals)
      float next_weight = 0;
      for (uint32_t w = rig.weights.offsets[v]; w < rig.weights.offsets[v + 1]; ++w) {
        const int32_t j = int32_t(rig.weights.joints[w]);
        if (j != model->bone[i] && rig.weights.weights[w] > next_weight) {
          next = j;
          next_weight = rig.weights.weights[w];
        }
      }
      if (next < 0) continue;
      if (const int32_t leaf = field_of_joint[next]; trackable(leaf) && mismatch(leaf) < kOwnFieldMatch) {
        model->bone[i] = next;
        model->own_leaf[i] = leaf;
        model->in_field[i] = 1;
      }
    }
  });
  // The own side of a contact is measured in depth, not field value (issue 15): where a forearm
  // (support radius 6.0) meets an upper arm (9.4), equal fields lie 1.56 times deeper in the upper
  // arm than in the forearm, and the forearm's skin was held there, 0.27 R past where the two
  // rigid pieces are equally deep.
  model->depth_scale.resize(model->fields.size());
  for (size_t l = 0; l < model->fields.size(); ++l) model->depth_scale[l] = float(model->fields[l].radius / mean_radius);
  model->rest_pair_leaf.assign(nn * implicit_device::kRestPairs, -1);
  model->rest_pair_excess.assign(nn * implicit_device::kRestPairs, 0.f);
  ParallelFor(pool, nn, 256, [&](size_t b, size_t e) {
    constexpr int kPairs = implicit_device::kRestPairs;
    for (size_t i = b; i < e; ++i) {
      const int32_t own = model->own_leaf[i];
      if (own < 0) continue;
      const Eigen::Vector3f p = P3(model->rest, i);
      const float f_own = model->grids[own].Sample(p);
      int32_t* leaf = &model->rest_pair_leaf[i * kPairs];
      float* excess = &model->rest_pair_excess[i * kPairs];
      for (size_t l = 0; l < model->fields.size(); ++l) {
        if (int32_t(l) == own) continue;
        const float f = model->grids[l].Sample(p);
        if (!(f > 0)) continue;
        const float x = -implicit_device::OwnSideDepth(model->depth_scale[own], f_own, model->depth_scale[l], f);
        // Keep the kPairs largest (the smallest slot gives way; empty slots read 0).
        int smallest = 0;
        for (int k = 1; k < kPairs; ++k) {
          if (excess[k] < excess[smallest]) smallest = k;
        }
        if (x > excess[smallest]) {
          excess[smallest] = x;
          leaf[smallest] = int32_t(l);
        }
      }
    }
  });
  // The piece across a field's joint: its parent's field, reached through the joints a bone's
  // segment runs through (PassThroughJoints). Until 2026-12-05 the parent had to have a field
  // itself, and a piece below weightless joints (assimp-testmodels' animation_with_skeleton.fbx)
  // had no neighbour to hold its own side against.
  {
    const std::vector<uint8_t> through = PassThroughJoints(rig, *segmentation);
    model->parent_field.assign(model->fields.size(), -1);
    for (size_t l = 0; l < model->fields.size(); ++l) {
      int32_t parent = rig.skeleton.parents[model->fields[l].joint];
      while (parent >= 0 && field_of_joint[parent] < 0 && through[size_t(parent)]) parent = rig.skeleton.parents[parent];
      if (parent >= 0) model->parent_field[l] = field_of_joint[parent];
    }
  }
  if (!report(0.95)) return cancelled();
  model->typical_gradient2 = float(std::pow(15.0 / (16.0 * mean_radius), 2));
  model->gradient_floor2 = float(std::pow(1e-3 * 15.0 / (16.0 * mean_radius), 2));
  model->step_cap.assign(nn, float(0.1 * mean_radius));
  {
    std::vector<float> cap_of_joint(rig.joint_count(), float(0.1 * mean_radius));
    for (const BoneField& f : model->fields) cap_of_joint[f.joint] = float(0.1 * f.radius);
    for (size_t i = 0; i < nn; ++i) model->step_cap[i] = cap_of_joint[model->bone[i]];
  }

  // One-rings on the welded mesh: wedges (next, prev) around each node, chained into a fan.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> wedges(nn);
  for (size_t t = 0; t < rig.triangle_count(); ++t) {
    uint32_t c[3];
    for (int k = 0; k < 3; ++k) c[k] = model->node_of_vertex[rig.triangles[3 * t + k]];
    if (c[0] == c[1] || c[1] == c[2] || c[0] == c[2]) continue;
    for (int k = 0; k < 3; ++k) wedges[c[k]].push_back({c[(k + 1) % 3], c[(k + 2) % 3]});
  }
  model->ring_offsets.assign(1, 0);
  model->ring_closed.assign(nn, 0);
  double edge_sum = 0;
  size_t edge_count = 0;
  for (size_t i = 0; i < nn; ++i) {
    auto& w = wedges[i];
    std::vector<uint32_t> fan;
    bool closed = false;
    if (!w.empty()) {
      // Follow next -> prev links: wedge (a, b) is followed by the wedge starting at b, the
      // unused one of smallest index where several do (non-manifold). Found by a binary search
      // over the wedges sorted by (start, index), each run of equal starts used in index order
      // from a cursor: O(valence log valence) a node, where a scan of every wedge per step (until
      // 2026-12-03) was quadratic, and a fan of millions of triangles around one vertex took hours.
      std::vector<uint32_t> by_start(w.size());
      std::iota(by_start.begin(), by_start.end(), 0u);
      std::sort(by_start.begin(), by_start.end(),
                [&](uint32_t a, uint32_t b) { return w[a].first != w[b].first ? w[a].first < w[b].first : a < b; });
      std::vector<uint32_t> cursor(w.size());  // at a run's first position: its next unused one
      std::iota(cursor.begin(), cursor.end(), 0u);
      auto run_of = [&](uint32_t start) {
        return size_t(std::lower_bound(by_start.begin(), by_start.end(), start,
                                       [&](uint32_t k, uint32_t v) { return w[k].first < v; }) -
                      by_start.begin());
      };
      fan.push_back(w[0].first);
      ++cursor[run_of(w[0].first)];  // wedge 0, the smallest index of its run, is used
      uint32_t cur = w[0].second;
      for (size_t step = 1; step < w.size(); ++step) {
        const size_t run = run_of(cur);
        if (run == w.size() || w[by_start[run]].first != cur) break;
        const uint32_t at = cursor[run];
        if (at == w.size() || w[by_start[at]].first != cur) break;  // every wedge starting at cur used
        ++cursor[run];
        fan.push_back(cur);
        cur = w[by_start[at]].second;
      }
      closed = fan.size() == w.size() && cur == fan[0] && fan.size() >= 3;
      if (!closed) {
        // Boundary or non-manifold: every neighbour, unordered.
        fan.clear();
        for (const auto& [a, b] : w) {
          fan.push_back(a);
          fan.push_back(b);
        }
        std::sort(fan.begin(), fan.end());
        fan.erase(std::unique(fan.begin(), fan.end()), fan.end());
      }
    }
    model->ring_closed[i] = closed;
    for (uint32_t j : fan) {
      model->ring.push_back(j);
      edge_sum += (P3(model->rest, i) - P3(model->rest, j)).norm();
      ++edge_count;
    }
    model->ring_offsets.push_back(uint32_t(model->ring.size()));
  }
  model->mean_edge = edge_count ? edge_sum / edge_count : 1.0;
  // Connected components (over the rings, which are symmetric), numbered in the order of their
  // first node, and each one's nodes in ascending order (CSR).
  {
    UnionFind sets(nn);
    for (uint32_t i = 0; i < nn; ++i) {
      for (uint32_t r = model->ring_offsets[i]; r < model->ring_offsets[i + 1]; ++r) sets.Unite(i, model->ring[r]);
    }
    model->component_of_node = sets.Labels();
    const uint32_t count = nn ? *std::max_element(model->component_of_node.begin(), model->component_of_node.end()) + 1 : 0;
    model->component_offsets.assign(count + 1, 0);
    for (uint32_t c : model->component_of_node) ++model->component_offsets[c + 1];
    std::partial_sum(model->component_offsets.begin(), model->component_offsets.end(), model->component_offsets.begin());
    std::vector<uint32_t> at(model->component_offsets.begin(), model->component_offsets.end() - 1);
    model->component_nodes.resize(nn);
    for (uint32_t i = 0; i < nn; ++i) model->component_nodes[at[model->component_of_node[i]]++] = i;
  }

  // Tangent-plane mean value coordinates (Eq. 4.6) for closed fans; cotangent weights (EIS).
  model->mvc.assign(model->ring.size(), 0.f);
  model->cot.assign(model->ring.size(), 0.f);
  ParallelFor(pool, nn, 256, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const uint32_t r0 = model->ring_offsets[i], r1 = model->ring_offsets[i + 1];
      const size_t k = r1 - r0;
      if (k == 0) continue;
      const Eigen::Vector3d v = P3(model->rest, i).cast<double>();
      if (model->ring_closed[i]) {
        Eigen::Vector3d n = -rest_gradient[i].cast<double>();
        if (n.squaredNorm() == 0) {
          for (size_t a = 0; a < k; ++a) {
            n += (P3(model->rest, model->ring[r0 + a]).cast<double>() - v)
                     .cross(P3(model->rest, model->ring[r0 + (a + 1) % k]).cast<double>() - v);
          }
        }
        n.normalize();
        std::vector<Eigen::Vector3d> q(k);
        for (size_t a = 0; a < k; ++a) {
          const Eigen::Vector3d p = P3(model->rest, model->ring[r0 + a]).cast<double>() - v;
          q[a] = p - p.dot(n) * n;
        }
        std::vector<double> tan_half(k), w(k);
        bool ok = true;
        for (size_t a = 0; a < k; ++a) {
          const Eigen::Vector3d& p = q[a];
          const Eigen::Vector3d& s = q[(a + 1) % k];
          const double den = p.norm() * s.norm() + p.dot(s);
          if (p.norm() < 1e-12 || den <= 1e-300) ok = false;
          tan_half[a] = ok ? p.cross(s).dot(n) / den : 0;
        }
        double sum = 0;
        for (size_t a = 0; ok && a < k; ++a) {
          w[a] = (tan_half[(a + k - 1) % k] + tan_half[a]) / q[a].norm();
          sum += w[a];
        }
        if (ok && sum > 0) {
          for (size_t a = 0; a < k; ++a) model->mvc[r0 + a] = float(w[a] / sum);
        } else {
          model->ring_closed[i] = 0;
        }
      }
    }
  });
  // Cotangent weights per edge (sum of the cotangents of the angles opposite to it), clamped.
  {
    std::unordered_map<uint64_t, double> cot;
    auto key = [](uint32_t a, uint32_t b) { return (uint64_t(std::min(a, b)) << 32) | std::max(a, b); };
    for (size_t t = 0; t < rig.triangle_count(); ++t) {
      uint32_t c[3];
      for (int k = 0; k < 3; ++k) c[k] = model->node_of_vertex[rig.triangles[3 * t + k]];
      if (c[0] == c[1] || c[1] == c[2] || c[0] == c[2]) continue;
      for (int k = 0; k < 3; ++k) {
        const Eigen::Vector3d o = P3(model->rest, c[k]).cast<double>();
        const Eigen::Vector3d a = P3(model->rest, c[(k + 1) % 3]).cast<double>() - o;
        const Eigen::Vector3d b = P3(model->rest, c[(k + 2) % 3]).cast<double>() - o;
        const double s = a.cross(b).norm();
        cot[key(c[(k + 1) % 3], c[(k + 2) % 3])] += 0.5 * (s > 1e-300 ? a.dot(b) / s : 0.0);
      }
    }
    model->cot_sum.assign(nn, 0.f);
    for (size_t i = 0; i < nn; ++i) {
      for (uint32_t r = model->ring_offsets[i]; r < model->ring_offsets[i + 1]; ++r) {
        model->cot[r] = float(std::max(cot[key(uint32_t(i), model->ring[r])], 0.05));
        model->cot_sum[i] += model->cot[r];
      }
    }
  }
  // Bone heat weights for the elastic method's rotations (spec §2.8.2), when asked for (the
  // preparation key says so): a sparse factorisation the other sessions need not pay for.
  if (ParamsOf<ImplicitConfig>(config).rotation_weights == RotationWeights::kHarmonic) {
    // With progress and cancel (until 2026-12-07 neither from 95 % on: 5 s of 7 on a 150k-vertex
    // rig, and a CancelPreparation there answered OK and was lost).
    auto heat = BoneHeatWeights(rig, model->rest, model->node_of_vertex, model->ring_offsets, model->ring, model->cot,
                                model->mean_edge, [&](double p) { return report(0.95 + 0.04 * p); });
    if (heat.status().code() == absl::StatusCode::kCancelled) return cancelled();
    if (!heat.ok()) return heat.status();
    model->heat = std::move(*heat);
  }
  // A vertex of an open seam within core/geometry/weld.h's tolerance of an earlier point (an
  // exporter's mirror seam, copies a few ulps apart: Testwuson.X's chest; WeldSeams) takes that
  // point's result, so that such a seam never tears; its own node still relaxes with its side's
  // component (joining the sides' components instead made BCN_Epileptic's elastic frames 1.6 ×
  // slower, each component relaxing until its slowest part has converged, though none of its
  // seams tore). Until 2026-12-05 each side kept its own result: Testwuson's implicit skin tore
  // open by 3 % of its diagonal there.
  if (!report(0.99)) return cancelled();
  // Skin that lies inside the rest skin (a mesh overlapping another: BCN_Epileptic's legs reach
  // into its body, its mouth's inside) is not tracked: nobody sees it, and tracked it was what
  // folded BCN's throat into its head as the head bends down (its lower rim, open there, curling
  // in around its free edge; 4.7e-3 – 5.2e-3 of the diagonal deeper than DQS at 9–12 samples of
  // its clip) and much of what moved the clip under 1e-6 rad turns (issue 15, 2026-12-06). The
  // winding number of the rest mesh (core/geometry/mesh_quality.h): a node any of whose vertices
  // lies inside or on it is not tracked. The skin around it carries it: each of its
  // kHiddenSources nearest nodes outside the rest skin moves it as a rigid body (its position
  // and the rotation of its dual quaternion blend), weighted by inverse squared distance at rest
  // (FollowPosition). Kept on its initial skinning, skin pressed in by a contact passed it
  // (BCN_Epileptic's chest under its chin, 1.4e-3 – 2.1e-3 of the diagonal deeper inside than
  // DQS's deepest at 7, 10, 11 and 12 samples of its clip, 2026-12-06), and more of it came out
  // of the skin than under DQS (13–21 vertices at the worst frame of each sampling); carried, at
  // every frame of samplings 6–12 less of it comes out than under DQS (about half).
  {
    const MeshQualityMeasure rest_measure(rig.positions, rig.triangles, {}, pool);
    const std::span<const uint8_t> inside = rest_measure.inside_at_rest();
    std::vector<uint8_t> hidden(nn, 0);
    for (size_t v = 0; v < nv && v < inside.size(); ++v) hidden[model->node_of_vertex[v]] |= inside[v];
    std::vector<float> visible;
    std::vector<uint32_t> visible_node;
    for (size_t i = 0; i < nn; ++i) {
      if (hidden[i] && model->in_field[i]) {
        model->in_field[i] = 0;
        ++model->hidden_nodes;
      }
      if (!hidden[i]) {
        visible.insert(visible.end(), {model->rest[3 * i], model->rest[3 * i + 1], model->rest[3 * i + 2]});
        visible_node.push_back(uint32_t(i));
      }
    }
    model->follow_offsets.assign(nn + 1, 0);
    if (!visible_node.empty()) {
      const NearestPointTree tree(visible);
      // Squared distances below (1e-3 mean edges)² weigh as that: a hidden node on a visible one.
      const double floor2 = 1e-6 * model->mean_edge * model->mean_edge;
      std::vector<uint32_t> near;
      std::vector<double> d2;
      for (size_t i = 0; i < nn; ++i) {
        if (hidden[i]) {
          tree.Nearest(P3(model->rest, i).cast<double>(), kHiddenSources, near, &d2);
          double sum = 0;
          for (double d : d2) sum += 1 / std::max(d, floor2);
          for (size_t k = 0; k < near.size(); ++k) {
            model->follow_source.push_back(visible_node[near[k]]);
            model->follow_weight.push_back(float(1 / std::max(d2[k], floor2) / sum));
          }
        }
        model->follow_offsets[i + 1] = uint32_t(model->follow_source.size());
      }
      model->follow_sources = model->follow_source;
      std::sort(model->follow_sources.begin(), model->follow_sources.end());
      model->follow_sources.erase(std::unique(model->follow_sources.begin(), model->follow_sources.end()),
                                  model->follow_sources.end());
    }
  }
  const std::vector<uint32_t> point = WeldSeams(rig.positions, rig.triangles, RestWeldTolerance(rig.positions, rig.triangles));
  for (size_t v = 0; v < nv; ++v) model->node_of_vertex[v] = model->node_of_vertex[point[v]];
  if (!report(1.0)) return cancelled();  // a cancel at the very end is a cancel too
  return std::shared_ptr<const Prepared>(std::move(model));
}

}  // namespace sinew
