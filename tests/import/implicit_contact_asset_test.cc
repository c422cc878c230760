// Implicit skinning's contact on a character nobody here made (issue 15): the SuperCages Arm
// (../shared/data/supercages-arm; 2,089 vertices, its elbow between upperarm02.R and
// lowerarm01.R) bent at the elbow beyond its clip, in the plane of its bones, to 90°, 120° and
// 150°; its fingers; BCN_Epileptic's knee and elbow. Crossing of the bend's bisector, contact
// crossing (past where the rigidly posed pieces are equally deep, which is off the bisector
// where one piece is thinner) and vertices inside the skin as on the cylinders
// (tests/core/contact_measure.h), over the limb's radius at the joint; DQS beside them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <string>

#include "clients/import/asset_import.h"
#include "clients/import/supercages.h"
#include "core/deformer/deformer.h"
#include "core/geometry/triangle.h"
#include "core/implicit/bone_fields.h"
#include "core/implicit/device_layout.h"
#include "core/implicit/field_eval.h"
#include "core/implicit/implicit_params.h"
#include "core/implicit/implicit_skinning.h"
#include "core/procedural/bend.h"
#include "tests/core/contact_measure.h"
#include "tests/core/test_util.h"
#include "tests/import/assimp_character.h"
#include "tests/import/supercages_arm.h"

namespace sinew {
namespace {

int32_t JointNamed(const Skeleton& sk, const std::string& name) {
  for (size_t j = 0; j < sk.size(); ++j) {
    if (sk.names[j] == name) return int32_t(j);
  }
  return -1;
}

DeformerConfig Config(const std::string& method) {
  DeformerConfig c;
  c.method = method;
  c.params = std::make_shared<ImplicitConfig>();
  return c;
}

// With SINEW_CONTACT_DIAG set, each measured row also names the vertex behind each of its maxima
// (contact crossing, crease contact crossing, deepest new fold in the crease): its distance from
// the joint in radii, its weights, whether the preparation tracks it, and the fields where it
// ended, evaluated as the deformers do (core/implicit/field_eval.h): the composed value against
// its iso value, its own field, the largest other, and per other field not 0 there the own-side
// depth h, the rest excess it is allowed (implicit_device::OwnSideDepth, RestExcess) and the two
// fields' gradients' cosine (the elastic method's contact gate is off from 0 and full from
// −kContactGateCos), starred where the field is an adjacent piece's; every field whose
// sphere holds it, marked where the candidate rule left it out; how far a tracked vertex has
// slid over its own piece (in its bone's rest frame) and the iso value of its bone's nearest
// other rest node there (a slid vertex keeps its own: docs/implicit-skinning-log.md, "A slid node's
// level"); and where it lies on the largest other piece at rest. The deepest crease fold also gets
// the skin over it (the nearest triangle beyond its welded one-ring, the bound MeshQuality's
// depth uses) with its corners explained, and each pose its bend frame (pivot, the two bones'
// directions, the radius) for slicing the skins SINEW_CONTACT_DUMP writes.
void ExplainVertex(const Rig& rig, const ImplicitModel& m, const std::vector<implicit_internal::LeafFrame>& leaves,
                   std::span<const float> out, const Eigen::Vector3d& pivot, double radius, const char* what,
                   int64_t vertex) {
  using implicit_internal::FieldValue;
  if (vertex < 0) return;
  const Skeleton& sk = rig.skeleton;
  const uint32_t v = uint32_t(vertex), n = m.node_of_vertex[v];
  const Eigen::Vector3f x(out[3 * v], out[3 * v + 1], out[3 * v + 2]);
  std::string weights;
  for (uint32_t e = rig.weights.offsets[v]; e < rig.weights.offsets[v + 1]; ++e) {
    char w[96];
    std::snprintf(w, sizeof w, " %s %.2f", sk.names[rig.weights.joints[e]].c_str(), rig.weights.weights[e]);
    weights += w;
  }
  uint16_t cand[implicit_internal::kMaxCandidates];
  const int count = implicit_internal::Candidates(m, leaves, x, cand);
  const FieldValue composed = implicit_internal::Evaluator(m, leaves.data()).Eval(x, cand, count);
  {
    int spheres = 0;
    std::string all;
    for (size_t l = 0; l < leaves.size(); ++l) {
      if ((x - leaves[l].center).squaredNorm() > leaves[l].radius2) continue;
      ++spheres;
      bool in = false;
      for (int q = 0; q < count; ++q) in |= cand[q] == l;
      char b[96];
      std::snprintf(b, sizeof b, " %s%s=%.3f", in ? "" : "!", sk.names[m.fields[l].joint].c_str(),
                    implicit_internal::LeafFieldValue(m, leaves[l], l, x).f);
      all += b;
    }
    std::printf("    in %d fields' spheres, %d candidates (the others marked !):%s\n", spheres, count, all.c_str());
  }
  const int32_t own = m.own_leaf[n];
  FieldValue mine, other;
  int32_t other_leaf = -1;
  for (size_t l = 0; l < leaves.size(); ++l) {  // every field, not only the candidates
    const FieldValue f = implicit_internal::LeafFieldValue(m, leaves[l], l, x);
    if (int32_t(l) == own) {
      mine = f;
    } else if (f.f > other.f) {
      other = f;
      other_leaf = int32_t(l);
    }
  }
  std::printf("    %s: v%u, %.2f radii from the joint, weights%s; %s, bone %s; composed field %.3f, iso %.3f, "
              "own field %.3f",
              what, v, (x.cast<double>() - pivot).norm() / radius, weights.c_str(),
              m.in_field[n] ? "tracked" : "untracked", sk.names[m.bone[n]].c_str(), composed.f, m.iso[n], mine.f);
  if (own >= 0 && other_leaf >= 0) {
    std::printf(", largest other %s %.3f; other fields (h, rest excess, gradients' cosine; * an adjacent piece):",
                sk.names[m.fields[other_leaf].joint].c_str(), other.f);
    for (size_t l = 0; l < leaves.size(); ++l) {
      const FieldValue o = implicit_internal::LeafFieldValue(m, leaves[l], l, x);
      if (int32_t(l) == own || !(o.f > 0)) continue;
      const float norms = mine.g.norm() * o.g.norm();
      const bool adjacent = implicit_device::AdjacentFields(m.parent_field.data(), int32_t(l), own);
      std::printf(" %s%s %.3f (%.4f, %.4f, %.2f)", adjacent ? "*" : "", sk.names[m.fields[l].joint].c_str(), o.f,
                  implicit_device::OwnSideDepth(m.depth_scale[own], mine.f, m.depth_scale[l], o.f),
                  implicit_device::RestExcess(&m.rest_pair_leaf[implicit_device::kRestPairs * n],
                                              &m.rest_pair_excess[implicit_device::kRestPairs * n], int32_t(l)),
                  norms > 0 ? mine.g.dot(o.g) / norms : 0.f);
    }
  }
  std::printf("\n");
  if (own >= 0 && m.in_field[n]) {  // how far it slid over its own piece, and the level of the skin there
    const Eigen::Vector3f r = leaves[size_t(own)].ToRest(x);
    float nearest = INFINITY;
    uint32_t k = n;
    for (uint32_t q = 0; q < m.node_count(); ++q) {
      if (q == n || m.bone[q] != m.bone[n] || !m.in_field[q]) continue;
      const float d = (implicit_internal::P3(m.rest, q) - r).norm();
      if (d < nearest) {
        nearest = d;
        k = q;
      }
    }
    const float slid = (r - implicit_internal::P3(m.rest, n)).norm();
    std::printf("    in its bone's rest frame %.2f radii from its rest point", slid / radius);
    if (k != n) {  // (a bone with one tracked node has no other)
      std::printf("; its bone's nearest other rest node there (%.2f radii away) has iso %.3f", nearest / radius,
                  m.iso[k]);
    }
    std::printf("\n");
  }
  if (other_leaf >= 0) {  // where it is on the largest other piece, at rest
    const Eigen::Vector3d r = leaves[size_t(other_leaf)].ToRest(x).cast<double>();
    const BoneField& f = m.fields[size_t(other_leaf)];
    const Eigen::Vector3d joint = JointBindPositions(rig)[size_t(f.joint)];  // b0 where it starts free
    const Eigen::Vector3d axis = (f.b1 - joint).normalized();
    const double along = (r - joint).dot(axis);
    double nearest = INFINITY;
    uint32_t u = 0;
    for (uint32_t k = 0; k < rig.vertex_count(); ++k) {
      const double d = (implicit_internal::P3(rig.positions, k).cast<double>() - r).norm();
      if (d < nearest) {
        nearest = d;
        u = k;
      }
    }
    const uint32_t un = m.node_of_vertex[u];
    std::printf("    at rest in %s's frame: %.3f of its bone along it from its joint, %.4f from its axis; the "
                "nearest rest vertex v%u (%.4f away) is %s's, %s, that field there %.3f\n",
                sk.names[f.joint].c_str(), along / (f.b1 - joint).norm(), ((r - joint) - along * axis).norm(), u,
                nearest, sk.names[m.bone[un]].c_str(), m.in_field[un] ? "tracked" : "untracked",
                m.grids[size_t(other_leaf)].Sample(implicit_internal::P3(rig.positions, u)));
  }
}

// With SINEW_CONTACT_DUMP=DIR, each measured row's skin is written to DIR as a Wavefront OBJ
// (its label, angle and method in the name) for a closer look.
void WriteObj(const std::string& path, const Rig& rig, std::span<const float> out) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    std::fprintf(f, "v %.6f %.6f %.6f\n", out[3 * v], out[3 * v + 1], out[3 * v + 2]);
  }
  for (size_t t = 0; t < rig.triangle_count(); ++t) {
    const uint32_t* c = &rig.triangles[3 * t];
    std::fprintf(f, "f %u %u %u\n", c[0] + 1, c[1] + 1, c[2] + 1);
  }
  std::fclose(f);
}

// The joint's blend width: over the radius, how far along the bones' rest bisector `axis` the
// child piece's weight takes to rise from 0.1 to 0.9 (mean weight of the two pieces' vertices
// within three radii of the pivot, in bins of a tenth of the radius). On the procedural limb
// (exp(-(d/σ)²) against the other bone's 1 reaches 0.1 and 0.9 at ±1.48 σ) it reads 0.74, 2.19
// and 4.24 R for σ 0.24, 0.72 and 1.44 R, against 2.96 σ's 0.71, 2.13 and 4.26 R (checked
// 2026-11-28). < 0 when the weight does not cross both levels there.
double BlendWidth(const Rig& rig, const Eigen::Vector3d& pivot, const Eigen::Vector3d& axis,
                  std::span<const double> upper, std::span<const double> child, double radius) {
  constexpr int kBins = 60;  // [-3, 3) radii
  std::vector<double> sum(kBins, 0), count(kBins, 0);
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    if (upper[v] + child[v] < 0.9) continue;  // skin of neither piece (a neighbouring finger)
    const Eigen::Vector3d x(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
    if ((x - pivot).norm() > 3 * radius) continue;
    const int bin = int(std::floor(((x - pivot).dot(axis) / radius + 3) * 10));
    if (bin < 0 || bin >= kBins) continue;
    sum[size_t(bin)] += child[v] / (upper[v] + child[v]);
    count[size_t(bin)] += 1;
  }
  auto crossing = [&](double level) {
    double prev_s = 0, prev_w = -1;
    for (int b = 0; b < kBins; ++b) {
      if (count[size_t(b)] == 0) continue;
      const double s = (b + 0.5) / 10 - 3, w = sum[size_t(b)] / count[size_t(b)];
      if (prev_w >= 0 && prev_w < level && w >= level) return prev_s + (s - prev_s) * (level - prev_w) / (w - prev_w);
      prev_s = s;
      prev_w = w;
    }
    return std::nan("");
  };
  const double width = crossing(0.9) - crossing(0.1);
  return std::isfinite(width) ? width : -1;
}

struct Row {
  testing::ContactSkin dqs, is, eis_steps, eis_jump;  // crossing and depth over the radius
};

// Bends `joint` (towards `end`) of `rig` to 90°, 120° and 150° in the plane of its bones (or
// about `bend_axis`: BendJointAbout) and measures DQS, implicit, and elastic skinning (with the
// session settings `elastic`, whose preparation settings implicit shares) driven
// from the rest pose in 10° steps and in one jump; prints the
// table. The radius: the median distance
// from the parent bone's axis of the skin weighted mostly to the parent and its parent, over the
// bone's last two thirds.
std::map<int, Row> BendAndMeasure(const std::shared_ptr<const Rig>& rig, const std::string& joint_name,
                                  const std::string& end_name, const std::string& label,
                                  const ImplicitConfig& elastic = {},
                                  const std::optional<Eigen::Vector3d>& bend_axis = std::nullopt) {
  std::map<int, Row> rows;
  const Skeleton& sk = rig->skeleton;
  const int32_t joint = JointNamed(sk, joint_name), end = JointNamed(sk, end_name);
  EXPECT_GE(joint, 0) << joint_name;
  EXPECT_GE(end, 0) << end_name;
  if (joint < 0 || end < 0) return rows;
  ThreadPool pool(2);
  // The preparation's settings come with `elastic` (sample_triangles, track_sampled_pieces);
  // implicit shares them.
  ImplicitConfig prepared_with;
  prepared_with.sample_triangles = elastic.sample_triangles;
  prepared_with.track_sampled_pieces = elastic.track_sampled_pieces;
  DeformerConfig preparation = Config("implicit");
  preparation.params = std::make_shared<ImplicitConfig>(prepared_with);
  auto prepared = PrepareImplicit(*rig, preparation, &pool, {});
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  if (!prepared.ok()) return rows;
  const ImplicitModel& model = dynamic_cast<const ImplicitModel&>(**prepared);
  const bool diag = std::getenv("SINEW_CONTACT_DIAG") != nullptr;
  auto below = [&](uint32_t j) {
    for (int32_t k = int32_t(j); k >= 0; k = sk.parents[k]) {
      if (k == joint) return true;
    }
    return false;
  };
  const int32_t parent = sk.parents[joint], grand = sk.parents[parent];
  const std::vector<double> child = testing::PieceWeight(*rig, below);
  // The parent piece: the parent bone and the one before it (a shoulder's or hip's two joints).
  const std::vector<double> upper =
      testing::PieceWeight(*rig, [&](uint32_t j) { return int32_t(j) == parent || int32_t(j) == grand; });
  auto rest = BendJoint(sk, uint32_t(joint), uint32_t(end), 0);
  EXPECT_TRUE(rest.ok()) << rest.status();
  if (!rest.ok()) return rows;
  const Eigen::Vector3d start = BindPose(sk).joint(size_t(parent)).translation;
  const double length = (rest->pivot - start).norm();
  std::vector<double> radii;
  for (size_t v = 0; v < rig->vertex_count(); ++v) {
    if (upper[v] < 0.5) continue;
    const Eigen::Vector3d x(rig->positions[3 * v], rig->positions[3 * v + 1], rig->positions[3 * v + 2]);
    const double along = (x - start).dot(rest->parent_dir);
    if (along < length / 3 || along > length) continue;
    radii.push_back((x - start - along * rest->parent_dir).norm());
  }
  EXPECT_GT(radii.size(), 10u) << label;
  if (radii.size() <= 10) return rows;
  std::nth_element(radii.begin(), radii.begin() + radii.size() / 2, radii.end());
  const double radius = radii[radii.size() / 2];
  // The rest mesh measured once for every pose below (MeasureContact).
  const MeshQualityMeasure quality(rig->positions, rig->triangles, {}, &pool);
  const MeshQuality at_rest = quality.Measure(rig->positions, &pool);
  const Eigen::Vector3d end_at_rest = BindPose(sk).joint(size_t(end)).translation;
  const Eigen::Vector3d axis = (rest->parent_dir + (end_at_rest - rest->pivot).normalized()).normalized();
  std::printf("%s: %zu vertices, at rest %.0f°, radius there %.3g, blend width %.2f R; %u vertices inside the skin "
              "at rest\n",
              label.c_str(), rig->vertex_count(), rest->rest_degrees, radius,
              BlendWidth(*rig, rest->pivot, axis, upper, child, radius), at_rest.inside_vertices);

  auto bend_to = [&](double deg) {
    return bend_axis ? BendJointAbout(sk, uint32_t(joint), uint32_t(end), deg, *bend_axis)
                     : BendJoint(sk, uint32_t(joint), uint32_t(end), deg);
  };

  // Each angle's runs on one thread (no pool): the angles run side by side below.
  auto run = [&](const Pose& pose, Deformer* d) {
    std::vector<float> out(rig->positions.size());
    FrameInput in;
    in.pose = &pose;
    EXPECT_TRUE(d->Deform(in, out, nullptr).ok());
    return out;
  };
  auto make = [&](const std::string& method) {
    if (method == "dqs") {
      DeformerConfig c;
      c.method = "dqs";
      return std::move(*CreateDeformer(rig, c, &pool));
    }
    DeformerConfig c = Config(method);
    c.params = std::make_shared<ImplicitConfig>(method == "elastic-implicit" ? elastic : prepared_with);
    return std::move(*CreateImplicitDeformer(rig, *prepared, c));
  };
  // The three angles side by side, each with its own deformers, row and printed lines (one
  // after another where a diagnostic prints or writes files).
  constexpr double kDegrees[] = {90.0, 120.0, 150.0};
  for (double deg : kDegrees) rows[int(deg)];
  std::vector<std::string> lines(std::size(kDegrees));
  auto measure_at = [&](size_t which) {
    const double deg = kDegrees[which];
    auto bent = bend_to(deg);
    EXPECT_TRUE(bent.ok()) << bent.status();
    if (!bent.ok()) return;
    std::vector<Similarity> world(sk.size());
    std::vector<Affine34d> skinning(sk.size());
    SkinningTransforms(sk, bent->pose, world, skinning);
    const testing::RigidPieces rigid{skinning[size_t(parent)], skinning[size_t(joint)], radius};
    std::vector<implicit_internal::LeafFrame> leaves;  // the fields posed (for the diagnostic)
    if (diag) {
      implicit_internal::MakeLeafFrames(model, skinning, leaves);
      std::printf("%s %3.0f°: pivot %.6g %.6g %.6g, parent direction %.6g %.6g %.6g, child direction %.6g %.6g %.6g, "
                  "radius %.6g\n",
                  label.c_str(), deg, bent->pivot.x(), bent->pivot.y(), bent->pivot.z(), bent->parent_dir.x(),
                  bent->parent_dir.y(), bent->parent_dir.z(), bent->child_dir.x(), bent->child_dir.y(),
                  bent->child_dir.z(), radius);
    }
    auto measure = [&](std::span<const float> out) {
      testing::ContactSkin s =
          testing::MeasureContact(*rig, out, bent->pivot, bent->parent_dir, bent->child_dir, upper, child, &rigid,
                                  &quality);
      s.crossing /= radius;
      s.contact_crossing /= radius;
      s.crease_contact_crossing /= radius;
      s.depth /= radius;
      s.crease_depth /= radius;
      return s;
    };
    Row& r = rows.at(int(deg));
    std::map<std::string, std::vector<float>> outputs;  // kept for the diagnostic
    auto keep = [&](const char* name, std::vector<float> out) -> std::span<const float> {
      return outputs[name] = std::move(out);
    };
    r.dqs = measure(keep("dqs", run(bent->pose, make("dqs").get())));
    r.is = measure(keep("implicit", run(bent->pose, make("implicit").get())));
    auto eis = make("elastic-implicit");
    std::vector<float> out;
    const int steps = int(std::ceil((deg - rest->rest_degrees) / 10));
    for (int k = 1; k <= steps; ++k) {
      auto p = bend_to(rest->rest_degrees + (deg - rest->rest_degrees) * k / steps);
      out = run(p->pose, eis.get());
    }
    r.eis_steps = measure(keep("elastic, 10° steps", std::move(out)));
    r.eis_jump = measure(keep("elastic, one jump", run(bent->pose, make("elastic-implicit").get())));
    for (const auto& [name, s] : {std::pair{"dqs", r.dqs}, {"implicit", r.is}, {"elastic, 10° steps", r.eis_steps},
                                  {"elastic, one jump", r.eis_jump}}) {
      char line[320];
      std::snprintf(line, sizeof line,
                    "%s %3.0f°  %-19s crossing %.3f R, contact crossing %.3f R (crease %.3f R), inside %3u, "
                    "deepest %.3f R; in the crease %3u, deepest %.3f R\n",
                    label.c_str(), deg, name, s.crossing, s.contact_crossing, s.crease_contact_crossing, s.inside,
                    s.depth, s.crease_inside, s.crease_depth);
      if (diag) std::fputs(line, stdout);
      else lines[which] += line;
      if (const char* dir = std::getenv("SINEW_CONTACT_DUMP")) {
        std::string file = label + " " + std::to_string(int(deg)) + " " + name;
        for (char& c : file) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
        WriteObj(std::string(dir) + "/" + file + ".obj", *rig, outputs.at(name));
      }
      if (diag) {
        const std::vector<float>& o = outputs.at(name);
        ExplainVertex(*rig, model, leaves, o, bent->pivot, radius, "contact crossing", s.contact_vertex);
        if (s.crease_contact_vertex != s.contact_vertex) {
          ExplainVertex(*rig, model, leaves, o, bent->pivot, radius, "crease contact crossing", s.crease_contact_vertex);
        }
        ExplainVertex(*rig, model, leaves, o, bent->pivot, radius, "deepest crease fold", s.crease_vertex);
        // What covers that fold: the nearest triangle beyond its one-ring (as MeshQuality's
        // depth bound: vertices welded by position count as one), and its corners.
        if (s.crease_vertex >= 0) {
          auto at = [&](uint32_t v) { return Eigen::Vector3f(o[3 * v], o[3 * v + 1], o[3 * v + 2]); };
          const Eigen::Vector3f p = at(uint32_t(s.crease_vertex));
          std::vector<Eigen::Vector3f> ring;  // the fold's position and its one-ring's
          for (size_t t = 0; t < rig->triangle_count(); ++t) {
            const uint32_t* c = &rig->triangles[3 * t];
            if ((at(c[0]) - p).norm() < 1e-6f || (at(c[1]) - p).norm() < 1e-6f || (at(c[2]) - p).norm() < 1e-6f) {
              for (int k = 0; k < 3; ++k) ring.push_back(at(c[k]));
            }
          }
          auto in_ring = [&](uint32_t v) {
            return std::any_of(ring.begin(), ring.end(), [&](const Eigen::Vector3f& r) { return (at(v) - r).norm() < 1e-6f; });
          };
          float best = INFINITY;
          size_t best_t = 0;
          for (size_t t = 0; t < rig->triangle_count(); ++t) {
            const uint32_t* c = &rig->triangles[3 * t];
            if (in_ring(c[0]) || in_ring(c[1]) || in_ring(c[2])) continue;
            const float d = float((ClosestPointOnTriangle(at(c[0]).cast<double>(), at(c[1]).cast<double>(),
                                                          at(c[2]).cast<double>(), p.cast<double>()) -
                                   p.cast<double>())
                                      .norm());
            if (d < best) {
              best = d;
              best_t = t;
            }
          }
          std::printf("    covered by triangle %zu, %.3f R away; its corners:\n", best_t, best / radius);
          for (int k = 0; k < 3; ++k) {
            ExplainVertex(*rig, model, leaves, o, bent->pivot, radius, "corner", rig->triangles[3 * best_t + k]);
          }
        }
      }
    }
  };
  if (diag || std::getenv("SINEW_CONTACT_DUMP")) {
    for (size_t a = 0; a < std::size(kDegrees); ++a) measure_at(a);
  } else {
    // The deepest bend, the longest to drive, first.
    testing::ForEachInParallel(std::size(kDegrees), [&](size_t k) { measure_at(std::size(kDegrees) - 1 - k); });
  }
  for (const std::string& l : lines) std::fputs(l.c_str(), stdout);
  return rows;
}

TEST(ImplicitContactAsset, ArmElbowBentTo150ElasticMeetsTheSkinsTo120AndKeepsItsGainsOverDqs) {
  if (!testing::ArmAvailable()) GTEST_SKIP() << "Arm data not found in " << testing::kArmDir;
  auto arm = testing::LoadArm();
  ASSERT_TRUE(arm.ok()) << arm.status();
  const std::shared_ptr<const Rig>& rig = arm->rig;
  const auto rows = BendAndMeasure(rig, "lowerarm01.R", "wrist.R", "Arm elbow");
  ASSERT_EQ(rows.size(), 3u);
  // What holds today (measured 2026-11-27, the own side of a contact measured in depth: the
  // elastic method crosses by 0, 0 and 0.167 R in steps, 0, 0 and 0.169 R in one jump, with 0, 0
  // and 11 / 0, 0 and 4 vertices inside, 2 and 2 of them new folds in the crease at 150°; DQS
  // 0.02, 0.33 and 0.62 R with 0, 27 and 74 inside, 62 in the crease at 150°; implicit 0.002,
  // 0.14 and 0.53 R with 2, 15 and 57). With the own side measured in field values (until
  // 2026-11-27) the 150° figures were 0.222 / 0.207 R, 21 / 23 inside, 16 / 19 in the crease: the
  // forearm's skin was held where the two fields are equal, 1.56 times deeper in the upper arm
  // (support radius 9.43 against the forearm's 6.03). Before the crease rule (PrepareImplicit
  // re-assigns split-weight crease vertices) 1 vertex was inside at 90° (0.2 R deep, left on dual
  // quaternion skinning) and 3 at 120°. Issue 15's bisector bound (0.05 R) is not met on this arm
  // at 150° (0.148 R); the contact crossing is (below). Part of the 150° crossing is the forearm being
  // thinner (the skins meet off the bisector plane); the contact crossing, which does not assume
  // the plane, read 0, 0.017 and 0.302 R (one jump the same; DQS 0, 0.255, 0.435). At 150° that
  // was a crease vertex the preparation left untracked, on dual quaternion skinning: v2087, on
  // the forearm's wrist side, weights lowerarm01.R 0.91 / lowerarm02.R 0.09, where the composition
  // shows lowerarm02.R's field. Since 2026-11-28 a vertex may belong to its next-largest influence
  // however small its weight (the crease rule required 0.25): elastic 0, 0.011 and 0.110 R in
  // steps, 0, 0.011 and 0.098 R in one jump, 4 / 2 vertices inside at 150°, none in the crease;
  // crossing 0.148 / 0.147 R. That 0.110 R was v1991 (forearm, 2.5 radii from the joint), 0.62
  // deep in the upper arm's field, its one own-side term held against the largest other field,
  // lowerarm02.R's, beside it (no contact). Since 2026-11-28 a node has a term against each piece
  // either side of its bone's joints and the largest other: 0.045 R in steps, 0.083 R in one jump.
  // That was v2008, 2.7 radii from the joint, carried by its bone 0.58 deep into the upper arm's
  // field by the last sub-step, where the composed gradient is null: the relaxation held such
  // nodes fixed. Free since the same day: 0.045 / 0.048 R, 2 / 2 inside, none in the crease.
  // With the relaxation's spring towards DQS (kDqsSpring, fifteenth session): 0.055 / 0.061 R, 2
  // / 2 inside, none in the crease. The worst is v2087 again, now on the fields' equal-depth
  // surface (own-side depth h 0.006 / -0.010) and 0.055 / 0.061 R past it on the skin: the fields
  // place that surface to about 0.01 R. Issue 15's 0.05 R is not met here; 0.065 guards the gains.
  // Since the upper arm's bone starts behind its joint (upperarm01.R owns a piece without a field;
  // FitBoneFields' free starts, fifty-first session), samples added near the shoulder move it to
  // 0.058 / 0.059 R (v2087 again); a refit that drew the upper arm's 81 samples anew read 0.023 /
  // 0.024 — the figure moves with the fit by about the fields' resolution.
  for (const auto& [deg, r] : rows) {
    if (deg == 150) {  // the gains of the next-largest influence (0.302 R before) and the per-piece terms
      EXPECT_LE(r.eis_steps.contact_crossing, 0.065);
      EXPECT_LE(r.eis_jump.contact_crossing, 0.065);
      EXPECT_GT(r.dqs.contact_crossing, 0.3) << "the contact measure must see DQS's fold";
    }
    if (deg <= 120) {
      EXPECT_LE(r.eis_steps.contact_crossing, 0.05) << deg;
      EXPECT_LE(r.eis_jump.contact_crossing, 0.05) << deg;
    }
    if (deg == 120) {
      EXPECT_GT(r.dqs.contact_crossing, 0.2) << "the contact measure must see DQS's fold";
      EXPECT_LT(r.eis_steps.inside, r.is.inside) << "fewer folded vertices than the implicit method";
      EXPECT_LT(r.eis_jump.inside, r.is.inside) << "fewer folded vertices than the implicit method";
    }
    if (deg >= 120) {
      EXPECT_GT(r.dqs.crossing, 0.3) << deg << "°: the measure must see DQS's fold";
      EXPECT_LE(r.eis_steps.crossing, r.dqs.crossing / 2.5) << deg;
      EXPECT_LE(r.eis_jump.crossing, r.dqs.crossing / 2.5) << deg;
      EXPECT_LE(r.eis_steps.inside, r.dqs.inside / 2) << deg;
      EXPECT_LE(r.eis_jump.inside, r.dqs.inside / 2) << deg;
      EXPECT_LE(r.eis_steps.crease_inside, r.dqs.crease_inside / 5) << deg;
      EXPECT_LE(r.eis_jump.crease_inside, r.dqs.crease_inside / 5) << deg;
    }
    if (deg <= 120) {
      EXPECT_LE(r.eis_steps.crossing, 0.05) << deg;
      EXPECT_LE(r.eis_jump.crossing, 0.05) << deg;
    }
    if (deg == 90) {
      EXPECT_EQ(r.eis_steps.inside, 0u);
      EXPECT_EQ(r.eis_jump.inside, 0u);
      EXPECT_LE(r.is.crossing, 0.05);
    }
  }
}

// The Arm's fingers (issue 15 names them beside the elbow): the index's and the middle finger's
// middle joints (PIP) and the middle finger's knuckle (MCP), each bent to 90°, 120° and 150° —
// beyond what a finger does (PIP about 110°, MCP about 90°), where its short last pieces cannot
// both keep their radius: at 120° the inner skin of a piece reaches the bisector R / tan 30° =
// 1.7 R from the joint, and the piece beyond a PIP is about 4 R long.
TEST(ImplicitContactAsset, ArmFingersBentTo150ElasticMeetsTheSkinsTo120AndFoldsLessThanImplicit) {
  if (!testing::ArmAvailable()) GTEST_SKIP() << "Arm data not found in " << testing::kArmDir;
  auto arm = testing::LoadArm();
  ASSERT_TRUE(arm.ok()) << arm.status();
  const std::shared_ptr<const Rig>& rig = arm->rig;
  // Measured 2026-11-28, every field that reaches a node among its candidates (crossing over R /
  // vertices inside; elastic in 10° steps and in one jump):
  //   index PIP  90°: DQS 0.06 / 11, implicit 0.07 / 0, elastic 0 / 0 and 0 / 0
  //             120°: DQS 0.56 / 30, implicit 0.34 / 26, elastic 0.23 / 0 and 0.23 / 0
  //             150°: DQS 1.02 / 100, implicit 1.06 / 34, elastic 1.05 / 3 and 1.05 / 4
  //   middle PIP 90°: DQS 0.28 / 19, implicit 0.20 / 0, elastic 0.001 / 1 and 0.001 / 1
  //             120°: DQS 0.66 / 38, implicit 0.69 / 16, elastic 0.39 / 0 and 0.39 / 0
  //             150°: DQS 1.01 / 153, implicit 1.03 / 57, elastic 1.01 / 6 and 1.01 / 6
  //   middle MCP 90°: DQS 0 / 11, implicit 0 / 2, elastic 0 / 0 and 0 / 0
  //             120°: DQS 0.29 / 37, implicit 0 / 25, elastic 0 / 0 and 0 / 0
  //             150°: DQS 0.64 / 90, implicit 0.86 / 49, elastic 0.29 / 17 and 0.29 / 16
  // Contact crossing (over R; elastic in steps and in one jump): index PIP 0 / 0, 0.023 / 0.018,
  // 0.019 / 0.023 (DQS 0.06, 0.34, 0.52; implicit at 120° 0.30); middle PIP 0 / 0, 0.016 / 0.016,
  // 0.444 / 0.444 (DQS 0.08, 0.27, 0.51; implicit 0.25); middle MCP 0 / 0, 0.019 / 0.019, 0.386
  // / 0.386 (DQS 0.17, 0.36, 0.39; implicit 0.20). With an own-side term per adjacent piece and
  // null-gradient nodes free (later on 2026-11-28): index PIP 0 / 0, 0.023 / 0.014, 0.025 / 0.015
  // (3 / 5 inside at 150°), middle PIP 0 / 0, 0.017 / 0.018, 0.444 / 0.444 (6 / 6), middle MCP
  // 0 / 0, 0.019 / 0.019, 0.348 / 0.348 (13 / 14, bisector 0.287); with the relaxation's step rule
  // (later that day) the same but the MCP in one jump, 0.386. Before (2026-11-27, the candidates ranked by
  // depth in their spheres, which left out fields that reach the node): elastic index PIP at 150°
  // 0.187 / 0.076 R (5 / 1 inside), middle MCP at 120° 1 / 2 inside, middle PIP at 90° none inside.
  // The 150° figures are not reproducible to better than about ±0.2 R: a change of the fields'
  // mean radius in its last bits moved the middle PIP's from 0.155 to 0.444 R in steps. At 150°
  // the PIPs' maxima lie 2.7–3.6 radii from the joint (the finger pads folded onto the previous
  // phalanx); within two radii of it (crease contact crossing) both PIPs read below 0.01 R (DQS
  // 0.24 and 0.21), the MCP 0.386, now 0.348 / 0.386 (a node of the finger 1.3 radii from the joint on its own
  // surface, 0.74 in the palm's field, where the contact gate is off: the two gradients' cosine
  // is 0.87).
  // Issue 15's bounds hold at 90° (crossing ≤ 0.05 R, no vertex inside). Until the relaxation's
  // spring towards DQS (kDqsSpring, fifteenth session) one vertex of the middle PIP's inner
  // crease was 0.069 R deep (SINEW_CONTACT_DIAG: v629, on both phalanges' surfaces, 0.016 from
  // its neighbour v640 across the segments' border, one of its triangles turned over); with it
  // the middle PIP reads 0.004 R and none inside at 90°. They hold for the folds at
  // 120° (fewer than implicit) and, where the skins meet, at 120° (contact crossing ≤ 0.05 R),
  // and at the index PIP at 150°. Since third pieces' contact gates are read at the node's DQS
  // position too (RelaxSetup, 2026-12-06) the middle MCP holds its contact at 150° as well: 0.025
  // / 0.024 R in steps / one jump (crease 0.017, bisector 0; 0.348 R before), with 6 / 7 vertices
  // inside, 2 of them in the crease 0.53 R deep (10 at 0.33 R before); the middle PIP at 150°
  // 0.071 R (0.444 before). The bisector bound does not hold at the PIPs from 120° (0.23–0.39 R,
  // the pieces' thickness), nor the contact bound at the middle PIP at 150°: these guard what
  // holds.
  for (const auto& [joint, end, label] : {std::tuple{"finger2-2.R", "finger2-3.R", "Arm index PIP"},
                                          {"finger3-2.R", "finger3-3.R", "Arm middle PIP"},
                                          {"finger3-1.R", "finger3-2.R", "Arm middle MCP"}}) {
    const auto rows = BendAndMeasure(rig, joint, end, label);
    ASSERT_EQ(rows.size(), 3u) << label;
    for (const auto& [deg, r] : rows) {
      if (deg == 90) {
        EXPECT_LE(r.eis_steps.crossing, 0.05) << label;
        EXPECT_LE(r.eis_jump.crossing, 0.05) << label;
        EXPECT_EQ(r.eis_steps.inside, 0u) << label;
        EXPECT_EQ(r.eis_jump.inside, 0u) << label;
        EXPECT_GT(r.dqs.inside, 5u) << label << ": the measure must see DQS's fold";
      }
      if (deg >= 120) {
        EXPECT_GT(r.dqs.crossing, 0.25) << label << " " << deg << "°: the measure must see DQS's fold";
        EXPECT_LE(r.eis_steps.inside, r.dqs.inside / 3) << label << " " << deg;
        EXPECT_LE(r.eis_jump.inside, r.dqs.inside / 3) << label << " " << deg;
      }
      // The index PIP's at 150° since every field that reaches a node is among its candidates; the
      // middle MCP's since third pieces are read at DQS too.
      if (deg <= 120 || std::string(label) != "Arm middle PIP") {
        EXPECT_LE(r.eis_steps.contact_crossing, 0.05) << label << " " << deg;
        EXPECT_LE(r.eis_jump.contact_crossing, 0.05) << label << " " << deg;
      }
      // At 150° the PIPs' maxima are the finger pads folded onto the previous phalanx 2.7–3.6
      // radii out; in the crease itself (within two radii of the joint) both hold.
      if (deg == 150 && std::string(label).find("PIP") != std::string::npos) {
        EXPECT_GT(r.dqs.crease_contact_crossing, 0.15) << label << ": the contact measure must see DQS's fold";
        EXPECT_LE(r.eis_steps.crease_contact_crossing, 0.05) << label << " 150°, in the crease";
        EXPECT_LE(r.eis_jump.crease_contact_crossing, 0.05) << label << " 150°, in the crease";
      }
      if (deg == 120) {
        EXPECT_GT(r.dqs.contact_crossing, 0.2) << label << ": the contact measure must see DQS's fold";
        EXPECT_LT(r.eis_steps.inside, r.is.inside) << label;
        EXPECT_LT(r.eis_jump.inside, r.is.inside) << label;
        EXPECT_LE(r.eis_steps.crossing, r.dqs.crossing / 1.5) << label;
        EXPECT_LE(r.eis_jump.crossing, r.dqs.crossing / 1.5) << label;
      }
    }
  }
}

// ImplicitConfig::contact_gate_open 0.5 with average_stalled_relaxations (2026-11-29): the own-side
// terms also act between pieces that meet side-on, which holds the two 150° bends the default
// leaves open on the Arm. Measured: middle MCP at 150° 0.013 / 0.011 R of contact crossing
// (steps / one jump; 0.348 / 0.348 with the defaults, DQS 0.386), the elbow 0.056 / 0.007 R
// (0.055 / 0.061), no finger vertex inside at 90°. Their cost is in the docs ("Not done"): the
// limb's sensitivity holds only with the averaged ending, BCN_Epileptic's clip moves by up to
// 1.2e-3 of its diagonal under 1e-6 rad turns (9.8e-4), its knee at 150° crosses by 0.087 R
// (0.076). Between 0.45 and 0.6 the asserted bounds hold; at 0.4 and 0.65 the MCP at 90° has a
// vertex 0.05–0.07 R inside. Since the upper arm's bone starts behind its joint (free starts,
// fifty-first session) the elbow at 150° reads 0.059 / 0.061 R, as with the defaults (0.058 /
// 0.059; v2087, where the two fields place the contact to about 0.01 R): guarded at 0.065 as
// there, in one jump too (0.007 before); the MCP 0.015 / 0.013.
TEST(ImplicitContactAsset, ArmMcpAndElbowHoldSideOnContactsAt150WithTheGateOpenedToThem) {
  if (!testing::ArmAvailable()) GTEST_SKIP() << "Arm data not found in " << testing::kArmDir;
  auto arm = testing::LoadArm();
  ASSERT_TRUE(arm.ok()) << arm.status();
  ImplicitConfig side_on;
  side_on.contact_gate_open = 0.5;
  side_on.average_stalled_relaxations = true;
  for (const auto& [joint, end, label] : {std::tuple{"finger3-1.R", "finger3-2.R", "Arm middle MCP, gate 0.5"},
                                          {"lowerarm01.R", "wrist.R", "Arm elbow, gate 0.5"}}) {
    const auto rows = BendAndMeasure(arm->rig, joint, end, label, side_on);
    ASSERT_EQ(rows.size(), 3u) << label;
    const bool mcp = std::string(label).find("MCP") != std::string::npos;
    for (const auto& [deg, r] : rows) {
      if (deg == 90) {
        EXPECT_EQ(r.eis_steps.inside, 0u) << label;
        EXPECT_EQ(r.eis_jump.inside, 0u) << label;
      }
      const double bound = mcp || deg < 150 ? 0.05 : 0.065;
      EXPECT_LE(r.eis_jump.contact_crossing, bound) << label << " " << deg;
      EXPECT_LE(r.eis_steps.contact_crossing, bound) << label << " " << deg;
      if (deg == 150) {
        EXPECT_GT(r.dqs.contact_crossing, 0.3) << label << ": the contact measure must see DQS's fold";
      }
    }
  }
}

// BCN_Epileptic (assimp-testmodels) bent beyond its clip at its left knee and left elbow.
TEST(ImplicitContactAsset, BcnKneeAndElbowBentTo150ElasticMeetsTheSkinsTo120AndImplicitBeatsDqs) {
  if (!testing::CharacterAvailable(testing::kBcn)) GTEST_SKIP() << testing::kAssimpMissing;
  auto bcn = testing::LoadCharacter(testing::kBcn);
  ASSERT_TRUE(bcn.ok()) << bcn.status();
  const auto rig = bcn->rig;
  for (const auto& [joint, end, label] : {std::tuple{"B_Knee_Left", "B_Ankle_Left", "BCN_Epileptic knee"},
                                          {"B_ForeArm_Left", "B_Hand_Left", "BCN_Epileptic elbow"}}) {
    const auto rows = BendAndMeasure(rig, joint, end, label);
    ASSERT_EQ(rows.size(), 3u) << label;
    // Measured 2026-11-28, the composition's controllers and the own side's other piece held
    // through each relaxation, and every field that reaches a node among its candidates
    // (crossing over the radius; 831 vertices are inside the skin already at rest, where its
    // three meshes overlap): knee DQS 0.31 / 0.71 / 1.07 R at 90° / 120° / 150°, implicit 0.055
    // / 0.31 / 1.22, elastic in steps 0.045 / 0.33 / 1.03; elbow DQS 0.07 / 0.33 / 0.56,
    // implicit 0 / 0 / 0.39, elastic 0 / 0.03 / 0.30. Contact crossing: knee DQS 0.08 / 0.31 /
    // 0.41, elastic 0 / 0.011 / 0.074 (one jump 0 / 0.011 / 0.075); elbow DQS 0.05 / 0.29 / 0.57,
    // elastic 0 / 0.002 / 0.57 (one jump 0 / 0.003 / 0.51). The elbow's 0.57 / 0.51 at 150° is the
    // left hand inside the chest, 5.2 radii from the joint, as deep as DQS's 0.57
    // (SINEW_CONTACT_DIAG: v4059, on its own surface but 0.69 in B_Spine3's field, composed 0.82;
    // the rigid hand's ARAP holds it; 0.40 / 0.51 with the old candidates); in the crease
    // (within two radii of the joint) elastic reads 0.006 / 0.015 (DQS 0.34, implicit 0.28; 0.178 / 0.187 with live
    // controllers, whose relaxations mostly ended on a failed line search), and the knee 0.030
    // / 0.029 (DQS 0.28, implicit 0.06). The bisector bound is not met at the knee from 120°,
    // nor either at 150° over the whole mesh: these guard what holds.
    // Folds, counted in the crease (within two radii of the joint, not inside at rest; the
    // whole mesh's count also holds the rest overlap and, at the elbow, the hand pushed into the
    // thigh under every method): knee DQS 60 / 107 / 128 vertices at 90° / 120° / 150°, implicit
    // 0 / 37 / 78, elastic in steps 6 / 13 / 18 (one jump the same; 6 / 6 / 11 with the Armijo
    // line search until 2026-11-28, and with the old candidates 6 / 13 / 18); elbow DQS 31 / 92 /
    // 127, implicit 0 / 18 / 91, elastic 0 / 12 / 25 (one jump 0 / 12 / 31; 12 / 24 at 150° with
    // the line search, 30 / 30 with live controllers). The knee's 6 at 90° are one welded
    // node of the thigh (weights 0.71 / 0.29), 1.7 radii above the joint, 0.05 R inside the leg:
    // issue 15's "no vertex inside at 90°" holds at the elbow, not yet at the knee. The node ends
    // at the two fields' contact (0.510 in its own field, 0.515 in the calf's), where the calf's
    // skin does not reach: the calf's nodes beside it lie outside the thigh's field, so the
    // calf's triangles pass outside the contact surface and the node is inside them.
    for (const auto& [deg, r] : rows) {
      if (deg == 90) {
        EXPECT_GT(r.dqs.crease_inside, 20u) << label << ": the measure must see DQS's fold";
        if (std::string(label).find("elbow") != std::string::npos) {
          EXPECT_EQ(r.eis_steps.crease_inside, 0u) << label;
          EXPECT_EQ(r.eis_jump.crease_inside, 0u) << label;
        }
        EXPECT_LE(r.eis_steps.crease_depth, 0.1) << label;
        EXPECT_LE(r.eis_jump.crease_depth, 0.1) << label;
      }
      if (deg == 120) {
        EXPECT_LT(r.eis_steps.crease_inside, r.is.crease_inside) << label << ": fewer folded vertices than implicit";
        EXPECT_LT(r.eis_jump.crease_inside, r.is.crease_inside) << label << ": fewer folded vertices than implicit";
      }
      if (deg == 150) {  // the elbow's since the composition's controllers are held (2026-11-28)
        EXPECT_GT(r.dqs.crease_contact_crossing, 0.2) << label << ": the contact measure must see DQS's fold";
        EXPECT_LE(r.eis_steps.crease_contact_crossing, 0.05) << label << " 150°, in the crease";
        EXPECT_LE(r.eis_jump.crease_contact_crossing, 0.05) << label << " 150°, in the crease";
      }
      if (deg > 120) continue;
      EXPECT_LE(r.eis_steps.contact_crossing, 0.05) << label << " " << deg;
      EXPECT_LE(r.eis_jump.contact_crossing, 0.05) << label << " " << deg;
      if (deg == 120) {
        EXPECT_GT(r.dqs.contact_crossing, 0.2) << label << ": the contact measure must see DQS's fold";
      }
      EXPECT_GT(r.dqs.crossing, 0.05) << label << " " << deg << "°: the measure must see DQS's fold";
      EXPECT_LE(r.is.crossing, r.dqs.crossing / 2) << label << " " << deg;
      if (std::string(label).find("elbow") != std::string::npos) {
        EXPECT_LE(r.is.crossing, 0.05) << label << " " << deg;
        EXPECT_LE(r.eis_steps.crossing, r.dqs.crossing / 3) << label << " " << deg;
      }
    }
  }
}

// BCN_Epileptic's knees and elbows bent about the axis its own clip turns each about
// (ClipBendAxis at the clip's deepest bend: the knees at 84° and 124°, the elbows at 59° and 66°)
// rather than in the plane their bones span at rest (the test above). Nearly straight at rest
// (5°, 16° and 10°), their rest planes say little: the clip's axes are 29° (knees), 44° (left
// elbow) and 6° (right elbow) from those planes' normals. Bent so, the left elbow at 150° folds the forearm onto the
// upper arm and the hand passes beside the chest, where the rest plane drives it into the chest
// (0.57 R, above). Measured 2026-11-29 (contact crossing over R, 10° steps / one jump, at 90° /
// 120° / 150°; in the crease: within two radii of the joint):
//   left knee    0 / 0, 0.017 / 0.015, 0.088 / 0.070 (crease 0.024 / 0.026); DQS 0.17, 0.36, 0.40
//   right knee   0 / 0, 0.017 / 0.017, 0.073 / 0.087 (crease 0.023 / 0.020); DQS the same
//   left elbow   0 / 0, 0 / 0, 0.009 / 0.009; DQS 0, 0.16, 0.34
//   right elbow  0 / 0, 0 / 0, 0.303 / 0.303 (crease 0 / 0: the maximum is the right thumb, a
//                thin piece left on DQS, in the chest 5.5 radii from the joint); DQS 0, 0.11, 0.43
// Folds in the crease (not inside at rest) at 90° / 120° / 150°, steps: left knee 12 / 12 / 19
// (implicit 0 / 53 / 24), right knee 12 / 12 / 12 (one jump 19; implicit 0 / 53 / 18), left
// elbow 0 / 12 / 6 (implicit 0 / 18 / 77), right elbow 6 / 6 / 0 (implicit 0 / 12 / 78). At 90°
// the knees' 12 reach 0.24 R deep (left: v12571, thigh skin 1.6 radii above the joint, on its
// own field's surface and outside the calf's, the calf's triangles passing outside it) and the
// right elbow's 6 (one welded node, v120, upper-arm skin 1.3 radii from the joint at the two
// fields' contact) 0.074 R: issue 15's "no vertex inside at 90°" holds at the left elbow only,
// so it is asserted there only, and the whole-mesh bound at 150° at the left elbow only.
TEST(ImplicitContactAsset, BcnBentAboutItsClipsAxesElasticMeetsTheSkinsTo150InEveryCreaseAndAtTheLeftElbow) {
  if (!testing::CharacterAvailable(testing::kBcn)) GTEST_SKIP() << testing::kAssimpMissing;
  auto bcn = testing::LoadCharacter(testing::kBcn);
  ASSERT_TRUE(bcn.ok()) << bcn.status();
  ASSERT_FALSE(bcn->asset.clips.empty());
  const auto rig = bcn->rig;
  for (const auto& [joint, end, label] :
       {std::tuple{"B_Knee_Left", "B_Ankle_Left", "BCN_Epileptic left knee, clip's axis"},
        {"B_Knee_Right", "B_Ankle_Right", "BCN_Epileptic right knee, clip's axis"},
        {"B_ForeArm_Left", "B_Hand_Left", "BCN_Epileptic left elbow, clip's axis"},
        {"B_ForeArm_Right", "B_Hand_Right", "BCN_Epileptic right elbow, clip's axis"}}) {
    const bool left_elbow = std::string(joint) == "B_ForeArm_Left";
    const int32_t j = JointNamed(rig->skeleton, joint), e = JointNamed(rig->skeleton, end);
    ASSERT_GE(j, 0);
    ASSERT_GE(e, 0);
    auto axis = ClipBendAxis(rig->skeleton, bcn->asset.clips[0], uint32_t(j), uint32_t(e));
    ASSERT_TRUE(axis.ok()) << axis.status();
    const auto rows = BendAndMeasure(rig, joint, end, label, {}, *axis);
    ASSERT_EQ(rows.size(), 3u) << label;
    for (const auto& [deg, r] : rows) {
      EXPECT_GT(r.dqs.crease_inside, 20u) << label << " " << deg << "°: the measure must see DQS's fold";
      if (deg == 90 && left_elbow) {
        EXPECT_EQ(r.eis_steps.crease_inside, 0u) << label;
        EXPECT_EQ(r.eis_jump.crease_inside, 0u) << label;
      }
      if (deg >= 120) {
        EXPECT_GT(r.dqs.crease_contact_crossing, 0.1) << label << " " << deg << "°: the measure must see DQS's fold";
      }
      if (deg == 120) {
        EXPECT_LT(r.eis_steps.crease_inside, r.is.crease_inside) << label << ": fewer folds than implicit";
        EXPECT_LT(r.eis_jump.crease_inside, r.is.crease_inside) << label << ": fewer folds than implicit";
      }
      EXPECT_LE(r.eis_steps.crease_contact_crossing, 0.05) << label << " " << deg << "°, in the crease";
      EXPECT_LE(r.eis_jump.crease_contact_crossing, 0.05) << label << " " << deg << "°, in the crease";
      if (deg <= 120 || left_elbow) {
        EXPECT_LE(r.eis_steps.contact_crossing, 0.05) << label << " " << deg << "°";
        EXPECT_LE(r.eis_jump.contact_crossing, 0.05) << label << " " << deg << "°";
      }
    }
  }
}


// A second character, and a quadruped: Testwuson.X (assimp-testmodels; 11 196 vertices, its mirror
// seams welded as in core/geometry/weld.h) bent at its left hind knee (HindLeg_L_03, 31° at rest)
// and left fore knee (ForeLeg_L_04, 7°), in the plane of the bones and about the axis its clip
// turns each about, without sample_triangles and with the defaults. Measured 2026-12-05 (contact
// crossing over R, elastic in 10° steps / one jump, at 90° / 120° / 150°; DQS and implicit beside),
// without sample_triangles:
//   hind knee        0 / 0, 0 / 0, 0.258 / 0.264 (crease 0 / 0); DQS 0, 0.152, 0.350; implicit 0, 0.047, 0.063
//   fore knee        0 / 0, 0.029 / 0.028, 0.764 / 0.764 (crease 0.026); DQS 0.191, 0.362, 0.622; implicit 0, 0.140, 0.681
//   hind, clip axis  0 / 0, 0 / 0, 0.259 / 0.258 (crease 0.028 / 0.027); DQS 0, 0.193, 0.417; implicit 0, 0.066, 0.049
//   fore, clip axis  0.035 / 0.034, 0.028 / 0.028, 0.013 / 0.009; DQS 0.188, 0.176, 0.480; implicit 0.036, 0.096, 0.123
// So every crease holds to 150° and the whole skin to 120°, as on BCN_Epileptic. At 150° three of
// the four do not: the paw, a third piece 4–4.7 radii from the joint, is driven side-on into the
// rump (hind: v2844, in Spine_Back01's field 0.45 against its own 0.35, gradients' cosine 0.17)
// or the chest (fore: v4040, Spine_Front02 and Neck) — where Testwuson's low-poly torso has
// pieces without a field fitted on vertices (4–14 distinct vertices between their culling planes,
// 16 needed). With sample_triangles (the default) those pieces get fields fitted on points of
// their triangles (its torso and upper forelegs; core/implicit/bone_fields.h), composed with the
// others while their own skin keeps DQS, and the paws meet them: 150° read hind 0.061 / 0.062
// (crease 0), fore 0.024 / 0.024, hind on the clip's axis 0.049 / 0.047, fore on it 0.025 / 0.025
// (with track_sampled_pieces 0.061 / 0.062, 0.024 / 0.025, 0.049 / 0.047, 0.020 / 0.020). The
// hind paw's 0.061 R was v2852 against the thigh (HindLeg_L_02) behind the thigh's joint, at 0.10
// of its bone back into the hip: the thigh's piece reaches 0.13 of its bone back over a hip
// (HindLeg_L_01, 89 vertices) without a field, and the culling and the closure cap left that skin
// outside every field. Since the thigh's bone starts where its piece does (FitBoneFields' free
// starts, fifty-first session) 150° reads hind 0.036 / 0.036 (11 / 11 crease folds, were 18),
// fore 0.024 / 0.024, hind on the clip's axis 0.042 / 0.042 (crease 0.025), fore on it 0.025 /
// 0.025: every case within the issue's 0.05 R; without sample_triangles hind 0.036 / 0.036 (was
// 0.258 / 0.264), fore 0.681 / 0.681 (0.764), hind on the clip's axis 0.056 / 0.055 (0.259 /
// 0.258), fore on it 0.011 / 0.011. Folds in the crease (elastic in steps; implicit; DQS) at 90° / 120° / 150°:
// hind 0 / 19 / 11 (0 / 13 / 30; 8 / 44 / 68), fore 6 / 12 / 0 (0 / 24 / 102; 43 / 79 / 127), hind
// on the clip's axis 0 / 19 / 7 (0 / 0 / 44), fore on it 6 / 6 / 0 (0 / 12 / 72): at 90° the fore
// knee keeps one welded node 0.17–0.32 R inside (v3614, 0.94 radii from the joint, on its own
// surface, as BCN_Epileptic's knees), and at 120° the hind knee folds more than implicit. Those
// are measured, not asserted.
TEST(ImplicitContactAsset, TestwusonKneesBentTo150ElasticHoldsEveryCreaseTheSkinTo120AndWithTorsoFieldsBothKneesTo150) {
  if (!testing::CharacterAvailable(testing::kTestwuson)) GTEST_SKIP() << testing::kAssimpMissing;
  auto wuson = testing::LoadCharacter(testing::kTestwuson);
  ASSERT_TRUE(wuson.ok()) << wuson.status();
  ASSERT_FALSE(wuson->asset.clips.empty());
  const auto rig = wuson->rig;
  for (const bool sample_triangles : {false, true}) {
    ImplicitConfig elastic;
    elastic.sample_triangles = sample_triangles;
    const std::string setting = sample_triangles ? "" : ", no sample_triangles";
    for (const auto& [joint, end, name, clip_axis] :
         {std::tuple{"HindLeg_L_03", "HindLeg_L_04", "Testwuson hind knee", false},
          {"ForeLeg_L_04", "ForeLeg_L_05", "Testwuson fore knee", false},
          {"HindLeg_L_03", "HindLeg_L_04", "Testwuson hind knee, clip's axis", true},
          {"ForeLeg_L_04", "ForeLeg_L_05", "Testwuson fore knee, clip's axis", true}}) {
      const std::string label = name + setting;
      std::optional<Eigen::Vector3d> axis;
      if (clip_axis) {
        const int32_t j = JointNamed(rig->skeleton, joint), e = JointNamed(rig->skeleton, end);
        ASSERT_GE(j, 0) << joint;
        ASSERT_GE(e, 0) << end;
        auto about = ClipBendAxis(rig->skeleton, wuson->asset.clips[0], uint32_t(j), uint32_t(e));
        ASSERT_TRUE(about.ok()) << about.status();
        axis = *about;
      }
      const auto rows = BendAndMeasure(rig, joint, end, label, elastic, axis);
      ASSERT_EQ(rows.size(), 3u) << label;
      for (const auto& [deg, r] : rows) {
        if (deg == 90) {
          EXPECT_GT(r.dqs.crease_inside, 5u) << label << ": the measure must see DQS's fold";
        }
        if (deg >= 120) {
          EXPECT_GT(std::max(r.dqs.contact_crossing, r.dqs.crease_contact_crossing), 0.1)
              << label << " " << deg << "°: the contact measure must see DQS's fold";
        }
        EXPECT_LE(r.eis_steps.crease_contact_crossing, 0.05) << label << " " << deg << "°, in the crease";
        EXPECT_LE(r.eis_jump.crease_contact_crossing, 0.05) << label << " " << deg << "°, in the crease";
        // The fore knee's paw reaches the chest only with the torso's fields (sample_triangles).
        const double whole_skin = deg <= 120 || sample_triangles ? 0.05 : INFINITY;
        EXPECT_LE(r.eis_steps.contact_crossing, whole_skin) << label << " " << deg << "°";
        EXPECT_LE(r.eis_jump.contact_crossing, whole_skin) << label << " " << deg << "°";
      }
    }
  }
}

}  // namespace
}  // namespace sinew
