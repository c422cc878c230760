// Per-bone implicit fields on the procedural limb: each bone gets a fitted field that is 0.5 on
// its piece of the skin (between the culled joint regions), above 0.5 on the bone, 0 far away;
// its baked grid reproduces it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>

#include "core/implicit/bone_fields.h"
#include "core/implicit/field_grid.h"
#include "core/procedural/limb.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

Rig Limb() {
  LimbOptions o;
  o.rings = 121;
  o.segments = 40;
  o.bones = 3;
  o.max_influences = 2;
  return testing::BuildOrDie(MakeLimb(o));
}

TEST(BoneFields, EachBoneFieldIsHalfOnItsPieceAndInsideOnTheBone) {
  const Rig rig = Limb();
  auto fields = FitBoneFields(rig);
  ASSERT_TRUE(fields.ok()) << fields.status();
  ASSERT_EQ(fields->size(), 3u);
  for (const BoneField& f : *fields) {
    EXPECT_GE(f.samples, 30u) << "bone " << f.joint;
    EXPECT_LT(f.hrbf.max_value_residual(), 1e-6);
    EXPECT_LT(f.hrbf.max_gradient_residual(), 1e-6);
    EXPECT_NEAR(f.radius, 0.25, 0.01);  // the limb's radius: the bone's farthest sample
    const Eigen::Vector3d mid = (f.b0 + f.b1) / 2;
    EXPECT_GT(f.Value(mid), 0.5) << "bone " << f.joint << " axis is inside";
    EXPECT_EQ(f.Value(mid + Eigen::Vector3d(0, 3, 0)), 0.0) << "far away is outside the support";
    // Skin vertices along the middle of the bone (away from the culled joint regions).
    const Eigen::Vector3d ab = f.b1 - f.b0;
    int checked = 0;
    double worst = 0;
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const Eigen::Vector3d x(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
      const double t = (x - f.b0).dot(ab) / ab.squaredNorm();
      if (t < 0.2 || t > 0.8) continue;
      worst = std::max(worst, std::abs(f.Value(x) - 0.5));
      ++checked;
    }
    EXPECT_GT(checked, 100);
    EXPECT_LT(worst, 0.05) << "bone " << f.joint;
  }
}

TEST(BoneFields, FittingIsDeterministic) {
  const Rig rig = Limb();
  auto a = FitBoneFields(rig), b = FitBoneFields(rig);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].hrbf.centers(), (*b)[i].hrbf.centers());
    const Eigen::Vector3d x(1.3, 0.1, 0.05);
    EXPECT_EQ((*a)[i].Value(x), (*b)[i].Value(x));
  }
}

// An exported flat-shaded mesh: every corner its own vertex, the copies a few ulps apart
// (Testwuson.X's chest: copies 9.5e-7 apart, with normals 180° apart, made the HRBF system
// singular and the whole rig was refused). On a coarse limb, whose pieces have fewer points than
// the 80 samples asked for (so every point is taken), each bone's field is the welded mesh's: the
// samples are its points, once each, with the surface's normal (the area-weighted one of the
// triangles around the point; with each copy given its triangle's normal, the mean of those).
// Until 2026-12-05 the fit failed; with its copies kept apart, each copy's own normal left the
// fields 0.029 off the welded mesh's on its skin.
TEST(BoneFields, AMeshSplitPerCornerAFewUlpsApartFitsTheFieldsOfTheWeldedMesh) {
  LimbOptions o;
  o.rings = 14;
  o.segments = 8;
  o.bones = 2;
  o.blend = 0.12f;
  RigInput welded_in = MakeLimb(o);
  welded_in.rig.normals.clear();  // area-weighted normals, as the split mesh's welded ones
  const Rig welded = testing::BuildOrDie(welded_in);
  auto a = FitBoneFields(welded);
  ASSERT_TRUE(a.ok()) << a.status();
  for (bool face_normals : {false, true}) {
    const Rig split = testing::BuildOrDie(testing::SplitPerCorner(welded_in, 2e-7, face_normals));
    ASSERT_EQ(split.vertex_count(), welded.triangles.size());
    auto b = FitBoneFields(split);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      const BoneField &f = (*a)[i], &g = (*b)[i];
      EXPECT_EQ(f.samples, g.samples) << "bone " << f.joint;
      EXPECT_LT(g.hrbf.max_value_residual(), 1e-6);
      double worst = 0;
      for (size_t v = 0; v < welded.vertex_count(); ++v) {
        const Eigen::Vector3d x(welded.positions[3 * v], welded.positions[3 * v + 1], welded.positions[3 * v + 2]);
        worst = std::max(worst, std::abs(f.Value(x) - g.Value(x)));
      }
      std::printf("bone %d, %s: the split mesh's field within %.1e of the welded one's at its points\n", f.joint,
                  face_normals ? "face normals" : "no normals", worst);
      EXPECT_LT(worst, 1e-4) << "bone " << f.joint;
    }
  }
}

// A chain whose middle joint owns no vertex (a helper bone, or one the weights skip, as in
// assimp-testmodels' animation_with_skeleton.fbx): the first bone's piece reaches over both
// segments, and its field covers all of it — the segment runs on to the next joint that owns a
// piece. (Until 2026-12-05 it ended at the weightless joint: the piece beyond read 0.)
TEST(BoneFields, ABoneWhoseChildOwnsNoPieceReachesOnToTheNextOneThatDoes) {
  const Rig rig = testing::ChainWithAWeightlessMiddleJoint();  // joints at x = 0, 1, 2
  auto fields = FitBoneFields(rig);
  ASSERT_TRUE(fields.ok()) << fields.status();
  ASSERT_EQ(fields->size(), 2u);
  const BoneField& f = (*fields)[0];
  ASSERT_EQ(f.joint, 0);
  EXPECT_NEAR(f.b1.x(), 2.0, 1e-6);
  double worst = 0;
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    const Eigen::Vector3d x(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
    if (x.x() < 0.3 || x.x() > 1.7) continue;
    worst = std::max(worst, std::abs(f.Value(x) - 0.5));
  }
  EXPECT_LT(worst, 0.05) << "the piece over both segments is the field's 0.5 surface";
}

// A limb exported inside out (triangles wound inward, normals pointing in, as a negative scale
// leaves a mesh: assimp-testmodels' animation_with_skeleton.fbx) gets the limb's own fields, with
// its normals and without (until 2026-12-05 the fields were fitted to the inward normals).
TEST(BoneFields, ALimbInsideOutGetsTheFieldsOfTheLimb) {
  for (bool normals : {true, false}) {
    RigInput in = MakeLimb(TwoBoneLimbOptions());
    if (!normals) in.rig.normals.clear();
    const Rig rig = testing::BuildOrDie(in);
    std::vector<uint32_t>& tri = in.rig.triangles;
    for (size_t t = 0; t + 2 < tri.size(); t += 3) std::swap(tri[t + 1], tri[t + 2]);
    for (float& x : in.rig.normals) x = -x;
    const Rig turned = testing::BuildOrDie(std::move(in));
    auto a = FitBoneFields(rig), b = FitBoneFields(turned);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      double worst = 0;
      for (size_t v = 0; v < rig.vertex_count(); v += 7) {
        const Eigen::Vector3d x(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
        worst = std::max(worst, std::abs((*a)[i].Value(x) - (*b)[i].Value(x)));
        worst = std::max(worst, std::abs((*a)[i].Value(0.5 * x) - (*b)[i].Value(0.5 * x)));
      }
      EXPECT_LT(worst, 1e-9) << "bone " << (*a)[i].joint << (normals ? ", with normals" : ", without");
    }
  }
}

TEST(BoneFields, NeedsSkinningWeights) {
  RigInput in = MakeLimb();
  in.weights = {};
  const Rig rig = testing::BuildOrDie(std::move(in));
  EXPECT_EQ(FitBoneFields(rig).status().code(), absl::StatusCode::kFailedPrecondition);
}
}  // namespace
}  // namespace sinew

namespace sinew {
namespace {

// The baked 32³ grid reproduces its field: values within 0.02 and gradients in the same
// direction wherever the field varies, 0.5 on the bone's piece of skin, 0 outside its box.
TEST(FieldGrid, BakedGridReproducesTheField) {
  LimbOptions o;
  o.rings = 121;
  o.segments = 40;
  const Rig rig = testing::BuildOrDie(MakeLimb(o));
  auto fields = FitBoneFields(rig);
  ASSERT_TRUE(fields.ok());
  ThreadPool pool(1);
  for (const BoneField& f : *fields) {
    const FieldGrid grid = FieldGrid::Bake(f, 32, &pool);
    EXPECT_EQ(grid.Bytes(), 32u * 32 * 32 * 16);
    std::mt19937 rng(f.joint);
    std::uniform_real_distribution<float> u(0, 1);
    double worst = 0;
    int compared = 0;
    for (int s = 0; s < 2000; ++s) {
      const Eigen::Vector3f x = grid.lo() + Eigen::Vector3f(u(rng), u(rng), u(rng)).cwiseProduct(grid.hi() - grid.lo());
      Eigen::Vector3f g;
      const float value = grid.Sample(x, &g);
      Eigen::Vector3d exact_grad;
      const double d = f.hrbf.ValueAndGradient(x.cast<double>(), &exact_grad);
      const double exact = CompactSupport(d, f.radius);
      worst = std::max(worst, std::abs(value - exact));
      const Eigen::Vector3d eg = CompactSupportDerivative(d, f.radius) * exact_grad;
      if (eg.norm() > 1.0 && g.norm() > 1.0) {
        EXPECT_GT(g.cast<double>().normalized().dot(eg.normalized()), 0.9) << "bone " << f.joint;
        ++compared;
      }
    }
    EXPECT_LT(worst, 0.02) << "bone " << f.joint;
    EXPECT_GT(compared, 50);
    EXPECT_EQ(grid.Sample(grid.hi() + Eigen::Vector3f::Constant(0.1f)), 0.0f);
    // Skin vertices in the middle of the bone lie on the 0.5 level of the baked field.
    const Eigen::Vector3d ab = f.b1 - f.b0;
    for (size_t v = 0; v < rig.vertex_count(); v += 7) {
      const Eigen::Vector3f x(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
      const double t = (x.cast<double>() - f.b0).dot(ab) / ab.squaredNorm();
      if (t > 0.2 && t < 0.8) {
        EXPECT_NEAR(grid.Sample(x), 0.5, 0.06) << "vertex " << v;
      }
    }
  }
}

// A low-poly limb (rings of 6: 12 vertices a bone between its culling planes, 16 needed) gets no
// field from its vertices; with points drawn over its triangles (BoneFieldOptions::
// surface_samples, the session setting sample_triangles) each bone gets one whose 0.5 level is
// the skin, within the facets' sagitta (a hexagon's faces lie 0.134 R inside its corners; a smooth
// level passes between them): measured along the radius through the vertices, the triangles'
// centroids and their edges' midpoints, none of which need be a sample.
TEST(BoneFields, ALowPolyLimbGetsFieldsFromPointsOfItsTrianglesThatFollowItsSkin) {
  LimbOptions o;
  o.rings = 7;
  o.segments = 6;
  o.bones = 2;
  const Rig rig = testing::BuildOrDie(MakeLimb(o));
  auto from_vertices = FitBoneFields(rig);
  ASSERT_TRUE(from_vertices.ok()) << from_vertices.status();
  EXPECT_TRUE(from_vertices->empty()) << "the vertices alone are too few for a field";
  BoneFieldOptions drawn;
  drawn.surface_samples = 4000;
  auto fields = FitBoneFields(rig, drawn);
  ASSERT_TRUE(fields.ok()) << fields.status();
  ASSERT_EQ(fields->size(), 2u);
  const double sagitta = o.radius * (1 - std::cos(M_PI / o.segments));
  auto at = [&](uint32_t v) { return Eigen::Vector3d(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]); };
  for (const BoneField& f : *fields) {
    EXPECT_TRUE(f.drawn);
    EXPECT_GE(f.samples, 60u) << "bone " << f.joint;
    const Eigen::Vector3d ab = f.b1 - f.b0;
    // How far from x, along the radius through it, the field reads 0.5 (it falls outward).
    auto off_level = [&](const Eigen::Vector3d& x) {
      const Eigen::Vector3d p = ClosestOnSegment(x, f.b0, f.b1);
      const Eigen::Vector3d u = (x - p).normalized();
      double lo = 0, hi = 2 * (x - p).norm();
      EXPECT_GT(f.Value(p), 0.5) << "bone " << f.joint << ": its axis is inside";
      EXPECT_LT(f.Value(p + hi * u), 0.5) << "bone " << f.joint;
      for (int k = 0; k < 60; ++k) (f.Value(p + (lo + hi) / 2 * u) > 0.5 ? lo : hi) = (lo + hi) / 2;
      return std::abs(lo - (x - p).norm());
    };
    int checked = 0;
    double worst = 0;
    auto check = [&](const Eigen::Vector3d& x) {
      const double s = (x - f.b0).dot(ab) / ab.squaredNorm();
      if (s < 0.2 || s > 0.8) return;
      worst = std::max(worst, off_level(x));
      ++checked;
    };
    for (size_t v = 0; v < rig.vertex_count(); ++v) check(at(uint32_t(v)));
    for (size_t t = 0; t < rig.triangle_count(); ++t) {
      const uint32_t* c = &rig.triangles[3 * t];
      const Eigen::Vector3d a = at(c[0]), b = at(c[1]), d = at(c[2]);
      for (const Eigen::Vector3d& x : {Eigen::Vector3d((a + b + d) / 3), Eigen::Vector3d((a + b) / 2),
                                       Eigen::Vector3d((b + d) / 2), Eigen::Vector3d((d + a) / 2)}) {
        check(x);
      }
    }
    std::printf("bone %d: %zu samples drawn over its triangles; its 0.5 level within %.3f R of %d skin points "
                "(the facets' sagitta %.3f R)\n", f.joint, f.samples, worst / o.radius, checked, sagitta / o.radius);
    EXPECT_GT(checked, 20) << "bone " << f.joint;
    EXPECT_LE(worst, sagitta) << "bone " << f.joint;
  }
}

// Drawn points make a field only of skin that goes round its bone: a bone owning one side of its
// section (a patch, as a cheek or a clavicle's piece of shoulder: no closed surface to fit) gets
// none, where the same bone owning the whole section gets one from drawn points (its 12 vertices
// between the culling planes are too few for one of their own).
TEST(BoneFields, APatchOnOneSideOfItsBoneGetsNoFieldFromItsTriangles) {
  LimbOptions o;
  o.rings = 10;  // 1/3 apart: the middle section's rings at x = 1, 4/3 and 5/3
  o.segments = 6;
  o.bones = 3;  // joints at x = 0, 1, 2
  const Rig limb = testing::BuildOrDie(MakeLimb(o));
  BoneFieldOptions drawn;
  drawn.surface_samples = 4000;
  for (const bool patch : {false, true}) {
    Rig rig = limb;
    AttributeMap seg{"segmentation", 1, {}};
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const float x = rig.positions[3 * v], y = rig.positions[3 * v + 1];
      const bool middle = x > 0.99f && x < 1.99f && (!patch || y > -1e-4f);  // a patch: the upper half
      seg.values.push_back(middle ? 1.f : x < 2.0f ? 0.f : 2.f);
    }
    rig.attributes.push_back(seg);
    auto fields = FitBoneFields(rig, drawn);
    ASSERT_TRUE(fields.ok()) << fields.status();
    const auto middle = std::find_if(fields->begin(), fields->end(), [](const BoneField& f) { return f.joint == 1; });
    EXPECT_EQ(middle != fields->end(), !patch) << (patch ? "the upper half of the middle section" : "the whole middle section");
    if (middle != fields->end()) {
      EXPECT_TRUE(middle->drawn) << "the control's field comes from drawn points";
    }
  }
}

// A piece that reaches back over its parent's bone, where the parent's own piece is too small for
// a field (Testwuson.X's thighs reach 13 % of their length into hips of 83–89 vertices without
// one): the bone starts as far back as its piece reaches, and the field is its skin there too.
// With the bone at its joint (extend_free_starts off, as before 2026-12-05) the culling and the
// closure cap leave that skin outside every field. Where the parent has a field, or the piece
// reaches back no farther than the culling band, the bone starts at its joint.
TEST(BoneFields, APieceReachingBackOverAParentWithoutAFieldIsInItsFieldThere) {
  LimbOptions o;
  o.rings = 121;  // 0.025 apart
  o.segments = 40;
  o.bones = 3;  // joints at x = 0, 1, 2
  const Rig limb = testing::BuildOrDie(MakeLimb(o));
  // Joint 0 owns the rings at x < `parent` (x < 0.05: 80 vertices, none between its culling
  // planes, no field); joint 1 the skin from `from` to x = 2, joint 2 the rest (and the skin
  // between `parent` and `from`, which keeps joint 0 without a field where joint 1 starts late).
  auto segmented = [&](float parent, float from) {
    Rig rig = limb;
    AttributeMap seg{"segmentation", 1, {}};
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const float x = rig.positions[3 * v];
      seg.values.push_back(x < parent ? 0.f : x >= from && x < 2.0f ? 1.f : 2.f);
    }
    rig.attributes.push_back(seg);
    return rig;
  };
  // The worst |f − ½| of joint 1's field over its skin at x in [lo, hi].
  auto worst_on_skin = [](const Rig& rig, const BoneField& f, double lo, double hi) {
    double worst = 0;
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const Eigen::Vector3d x(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
      if (x.x() >= lo && x.x() <= hi) worst = std::max(worst, std::abs(f.Value(x) - 0.5));
    }
    return worst;
  };
  auto field_of = [](const std::vector<BoneField>& fields, int joint) {
    return std::find_if(fields.begin(), fields.end(), [&](const BoneField& f) { return f.joint == joint; });
  };
  const Rig rig = segmented(0.05f, 0.05f);
  std::vector<BoneField> fitted[2];  // extended, at the joint
  for (const bool extend : {true, false}) {
    BoneFieldOptions options;
    options.extend_free_starts = extend;
    auto fields = FitBoneFields(rig, options);
    ASSERT_TRUE(fields.ok()) << fields.status();
    ASSERT_EQ(field_of(*fields, 0), fields->end()) << "joint 0's piece has no samples between its planes";
    const auto f = field_of(*fields, 1);
    ASSERT_NE(f, fields->end());
    const double behind = worst_on_skin(rig, *f, 0.15, 0.85);
    std::printf("extend_free_starts %d: joint 1's bone starts at x = %.3f; |f - 1/2| on its skin behind the joint "
                "%.3f, in front %.3f\n",
                int(extend), f->b0.x(), behind, worst_on_skin(rig, *f, 1.2, 1.8));
    EXPECT_NEAR(f->free_start, 1.0 - f->b0.x(), 1e-9);
    if (extend) {
      EXPECT_NEAR(f->b0.x(), 0.05, 0.03) << "the bone starts where its piece does";
      EXPECT_LT(behind, 0.05) << "the piece behind its joint is the field's 0.5 surface";
    } else {
      EXPECT_NEAR(f->b0.x(), 1.0, 1e-6);
      EXPECT_GT(behind, 0.3) << "at its joint, the field leaves the skin behind it out";
    }
    EXPECT_LT(worst_on_skin(rig, *f, 1.2, 1.8), 0.05) << "the piece in front of its joint";
    fitted[extend ? 0 : 1] = std::move(*fields);
  }
  // The extended fit keeps the samples the fit at the joint took and adds those behind it: over
  // the bone's far half the two fields differ by what the added samples move an r³ fit.
  {
    const BoneField& a = *field_of(fitted[0], 1);
    const BoneField& b = *field_of(fitted[1], 1);
    ASSERT_GT(a.samples, b.samples);
    double moved = 0;
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const Eigen::Vector3d x(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
      const Eigen::Vector3d in(x.x(), 0.5 * x.y(), 0.5 * x.z());  // halfway to the axis
      if (x.x() < 1.5 || x.x() > 2.0) continue;
      moved = std::max({moved, std::abs(a.Value(x) - b.Value(x)), std::abs(a.Value(in) - b.Value(in))});
    }
    std::printf("%zu samples at the joint, %zu extended; the far half's field moved by %.2e\n", b.samples, a.samples, moved);
    EXPECT_LT(moved, 1e-2);
  }
  // At its joint: reaching back 0.025 (within the culling band, 0.05 of the bone), and where the
  // parent has a field of its own.
  for (const auto& [parent, from, why] : {std::tuple{0.05f, 0.96f, "a reach within the culling band is the closure cap's"},
                                          {0.5f, 0.5f, "the parent's field meets it at the joint"}}) {
    auto fields = FitBoneFields(segmented(parent, from));
    ASSERT_TRUE(fields.ok()) << fields.status();
    EXPECT_EQ(field_of(*fields, 0) != fields->end(), parent > 0.1f) << why;
    const auto f = field_of(*fields, 1);
    ASSERT_NE(f, fields->end()) << why;
    EXPECT_NEAR(f->b0.x(), 1.0, 1e-6) << why;
  }
}

// Which starts are free: the joint across a bone's start is found through joints its segment
// runs through (owning no piece, one child), and it must have this one child — a second child's
// piece may meet the bone's end there. A four-joint limb (joints at x = 0, 0.75, 1.5, 2.25):
// joint 0 owns the rings at x < 0.05 (no field), joint 1 nothing, joint 2 the skin from there to
// x = 2.25; then the same with a fifth joint, a second child of joint 0, owning nothing.
TEST(BoneFields, AStartIsFreeThroughJointsThatOwnNoPieceAndOnlyWhereTheJointAcrossHasOneChild) {
  for (const bool second_child : {false, true}) {
    LimbOptions o;
    o.rings = 121;
    o.segments = 40;
    o.bones = 4;
    RigInput in = MakeLimb(o);
    if (second_child) {
      in.rig.skeleton.names.push_back("side");
      in.rig.skeleton.parents.push_back(0);
      Similarity rest;
      rest.translation = Eigen::Vector3d(0, 1, 0);
      in.rig.skeleton.rest_local.push_back(rest);
    }
    Rig rig = testing::BuildOrDie(std::move(in));
    AttributeMap seg{"segmentation", 1, {}};
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const float x = rig.positions[3 * v];
      seg.values.push_back(x < 0.05f ? 0.f : x < 2.25f ? 2.f : 3.f);
    }
    rig.attributes.push_back(seg);
    auto fields = FitBoneFields(rig);
    ASSERT_TRUE(fields.ok()) << fields.status();
    const auto f = std::find_if(fields->begin(), fields->end(), [](const BoneField& b) { return b.joint == 2; });
    ASSERT_NE(f, fields->end());
    if (second_child) {
      EXPECT_NEAR(f->b0.x(), 1.5, 1e-6) << "joint 0's other child may meet joint 2's piece at its start";
    } else {
      EXPECT_NEAR(f->b0.x(), 0.05, 0.03) << "joint 1 owns nothing: joint 0 is across joint 2's start";
    }
  }
}

}  // namespace
}  // namespace sinew
