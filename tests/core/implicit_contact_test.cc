// Implicit skinning's contact, measured on the skin (issue 15): capped cylinders of several
// radii, lengths and blend widths bent at their middle joint. Two geometric measures, neither
// using the method's fields:
// - crossing: how far skin that clearly belongs to one piece (its own bone's weight ≥ 0.95)
//   ends up past the bisector plane of the bend, on the other piece's side, over the radius R;
// - inside: vertices inside the deformed skin (core/geometry/mesh_quality.h: generalized winding
//   number just outside the vertex, deeper than a tenth of an edge).
// DQS is measured beside them in the same tests, to show that the checks can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "core/deformer/deformer.h"
#include "core/deformer/skeletal.h"
#include "core/geometry/mesh_quality.h"
#include "core/implicit/implicit_params.h"
#include "core/implicit/implicit_skinning.h"
#include "core/procedural/limb.h"
#include "tests/core/contact_measure.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

struct Cylinder {
  float radius = 0.25f, length = 3.f, blend = 0.12f;  // blend: σ over the bone length (limb.h)
  float end_radius = 0;                                 // > 0: the child piece tapers to it (limb.h)
  uint32_t rings = 90, segments = 32;
};

LimbOptions Options(const Cylinder& c) {
  LimbOptions o = TwoBoneLimbOptions();
  o.rings = c.rings;
  o.segments = c.segments;
  o.length = c.length;
  o.radius = c.radius;
  o.blend = c.blend;
  o.end_radius = c.end_radius;
  return o;
}

struct Skin {
  double crossing = 0;  // over R
  double contact = 0;   // contact crossing (contact_measure.h), over R
  uint32_t inside = 0;
  double depth = 0;     // deepest inside vertex, over R
};

struct Bench {
  Cylinder cyl;
  std::shared_ptr<const Rig> rig;
  // No workers: the cylinders run side by side on the test's threads (ForEachInParallel, one per
  // core), and a pool of two workers per cylinder tripled the threads on the cores, the workers
  // spinning between the relaxation's passes (2026-12-08: 159 s for the next test alone, 118 s
  // without, the same table; the result does not depend on the thread count: ImplicitSkinning.
  // ElasticComponentsRelaxedSideBySideGiveTheBitsOfOneThread).
  ThreadPool pool{0};
  std::shared_ptr<const Prepared> model;
  std::optional<MeshQualityMeasure> quality;  // the rest mesh measured once (MeasureContact)

  explicit Bench(const Cylinder& c) : cyl(c) {
    rig = std::make_shared<Rig>(testing::BuildOrDie(MakeLimb(Options(c))));
    DeformerConfig config = Config("implicit");
    auto p = PrepareImplicit(*rig, config, &pool, {});
    EXPECT_TRUE(p.ok()) << p.status();
    model = *p;
    quality.emplace(rig->positions, rig->triangles, MeshQualityOptions{}, &pool);
  }
  static DeformerConfig Config(const std::string& method) {
    DeformerConfig c;
    c.method = method;
    c.params = std::make_shared<ImplicitConfig>();
    return c;
  }
  Pose Bent(double degrees) const {
    return LimbPose(rig->skeleton, 0.5, LimbMotion{.bend_degrees = degrees, .twist_degrees = 0});
  }
  std::unique_ptr<Deformer> Make(const std::string& method) {
    std::unique_ptr<Deformer> d;
    if (method == "implicit" || method == "elastic-implicit") {
      auto made = CreateImplicitDeformer(rig, model, Config(method));
      EXPECT_TRUE(made.ok()) << made.status();
      d = std::move(*made);
    } else {
      DeformerConfig c;
      c.method = method;
      auto made = CreateDeformer(rig, c, &pool);
      EXPECT_TRUE(made.ok()) << made.status();
      d = std::move(*made);
    }
    return d;
  }
  std::vector<float> Run(Deformer& d, double degrees) {
    std::vector<float> out(rig->positions.size());
    const Pose pose = Bent(degrees);
    FrameInput in;
    in.pose = &pose;
    auto st = d.Deform(in, out, &pool);
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }
  // The method's result at `degrees`, in one jump from rest.
  std::vector<float> Bend(const std::string& method, double degrees) { return Run(*Make(method), degrees); }

  // The elastic method's results at each of `degrees`, driven from rest in steps of `step`
  // degrees in one run through all of them. Each is a whole number of steps, so the poses up to
  // it (step·k, exact) are those of a run to it alone, and so are its results, bit for bit: until
  // 2026-12-08 each angle had its own run, and the tables were the same.
  std::map<double, std::vector<float>> BendThrough(std::initializer_list<double> degrees, double step) {
    std::map<double, std::vector<float>> out;
    auto d = Make("elastic-implicit");
    const int n = int(std::lround(std::max(degrees) / step));
    for (int k = 1; k <= n; ++k) {
      const double at = step * k;
      std::vector<float> frame = Run(*d, at);
      if (std::find(degrees.begin(), degrees.end(), at) != degrees.end()) out[at] = std::move(frame);
    }
    EXPECT_EQ(out.size(), degrees.size()) << "an angle not a whole number of " << step << "° steps";
    return out;
  }

  Skin Measure(std::span<const float> out, double degrees) const {
    const Pose pose = Bent(degrees);
    std::vector<Similarity> world(rig->joint_count());
    std::vector<Affine34d> t(rig->joint_count());
    SkinningTransforms(rig->skeleton, pose, world, t);
    const std::vector<double> parent = testing::PieceWeight(*rig, [](uint32_t j) { return j == 0; });
    const std::vector<double> child = testing::PieceWeight(*rig, [](uint32_t j) { return j == 1; });
    const testing::RigidPieces rigid{t[0], t[1], cyl.radius};
    const testing::ContactSkin c =
        testing::MeasureContact(*rig, out, world[1].translation, (world[0].rotation * Eigen::Vector3d::UnitX()).normalized(),
                                (world[1].rotation * Eigen::Vector3d::UnitX()).normalized(), parent, child, &rigid,
                                &*quality);
    return Skin{c.crossing / cyl.radius, c.contact_crossing / cyl.radius, c.inside, c.depth / cyl.radius};
  }
};

// Per cylinder, angle and blend width: crossing, contact crossing and inside vertices of DQS, IS
// and EIS (driven in 10° steps, in 15° steps — the issue's largest — and in one jump), printed as
// the issue's table and held to its bounds:
// - IS crosses by ≤ 0.05 R at 90° and 120° where the weights blend with σ ≥ 0.6 R (the next
//   test: the blend it needs);
// - EIS crosses by ≤ 0.05 R at 90°, 120° and 150°, in steps and in one jump, with no vertex
//   inside the skin at 90° and no more than IS at 120° (15° steps, 2026-11-29: at most 0.009 R
//   of contact crossing, one vertex 0.025 R inside on the wide tapered cylinder at 150°);
// - DQS beside them crosses and folds at 150° on the narrow blend (the checks can fail).
// The blends run from σ = 0.24 R (blend 0.04 of the length; the implicit method there starts
// from DQS's fold, 0.46 R of contact crossing at 120°) to 1.44 R; the elastic method holds on
// each, the thesis' "insensitive to the skinning weights" (2026-11-28, σ 0.24 / 0.36 / 0.48 R:
// ≤ 0.008 R at 90°–150° in steps and in one jump, no vertex inside).
// "Crosses" is the crossing of the bisector plane on the cylinders of one radius, and the contact
// crossing (contact_measure.h) on every cylinder, the two tapered ones included: a child piece
// narrowing from R to 0.4 R at its end meets the parent off the bisector plane: there the
// elastic method crosses that plane by 0.16-0.17 R at 150° and the implicit method by 0.08 R at
// 120°, with no vertex inside the skin and a contact crossing of at most 0.008 R.
// Measured before issue 15's changes (EIS reset far-moved vertices to DQS, stopped after 4
// rounds, took 3 sub-steps for a 150° jump, had no own-side rule): EIS 0.52 R at 150° in steps
// and 1.38 R in one jump (narrow blend), 2 vertices 0.49 R inside the skin at 90° (wide blend);
// without the own-side rule alone, the thick cylinder crossed by 0.08 R / 0.10 R at 150°.
// Before the relaxation became one energy (2026-11-27): 150° crossed by 0.026-0.038 R with up to
// 4 vertices inside; now 0.006-0.009 R with at most 1 vertex inside, except 2 (0.23 R deep) on
// the narrow tapered cylinder in steps since the own side of a contact is measured in depth (0
// before; the wide tapered one's contact crossing went from 0.006 to 0.001 R).
TEST(ImplicitContact, ElasticHoldsContactToDeepBendsOnCylinders) {
  const Cylinder cylinders[] = {
      {.radius = 0.25f, .length = 3, .blend = 0.12f},
      {.radius = 0.25f, .length = 3, .blend = 0.24f},
      {.radius = 0.25f, .length = 3, .blend = 0.04f},  // a third as wide: σ 0.24 R
      {.radius = 0.4f, .length = 4, .blend = 0.12f, .rings = 100, .segments = 40},
      {.radius = 0.25f, .length = 3, .blend = 0.12f, .end_radius = 0.1f},
      {.radius = 0.25f, .length = 3, .blend = 0.24f, .end_radius = 0.1f},
  };
  // The cylinders side by side (each with its own bench and pool); each one's table printed after.
  std::vector<std::string> tables(std::size(cylinders));
  testing::ForEachInParallel(std::size(cylinders), [&](size_t which) {
    const Cylinder& cyl = cylinders[which];
    Bench b(cyl);
    const double n = double(b.rig->vertex_count());
    const double sigma_over_r = cyl.blend * cyl.length / 2 / cyl.radius;  // limb.h's σ over R
    uint32_t is_inside_120 = 0;
    const auto steps10 = b.BendThrough({90.0, 120.0, 150.0}, 10);
    const auto steps15 = b.BendThrough({90.0, 120.0, 150.0}, 15);  // the issue's largest step
    for (double deg : {90.0, 120.0, 150.0}) {
      const Skin dqs = b.Measure(b.Bend("dqs", deg), deg);
      const Skin is = b.Measure(b.Bend("implicit", deg), deg);
      const Skin eis_steps = b.Measure(steps10.at(deg), deg);
      const Skin eis_steps15 = b.Measure(steps15.at(deg), deg);
      const Skin eis_jump = b.Measure(b.Bend("elastic-implicit", deg), deg);
      const std::string where = "R " + std::to_string(cyl.radius) + ", length " + std::to_string(cyl.length) +
                                ", blend " + std::to_string(cyl.blend) +
                                (cyl.end_radius > 0 ? ", tapering to " + std::to_string(cyl.end_radius) : "") + ", " +
                                std::to_string(int(deg)) + "°";
      for (const auto& [name, s] : {std::pair{"dqs", dqs}, {"implicit", is}, {"elastic, 10° steps", eis_steps},
                                    {"elastic, 15° steps", eis_steps15}, {"elastic, one jump", eis_jump}}) {
        char line[256];
        std::snprintf(line, sizeof line, "%s  %-19s crossing %.3f R, contact crossing %.3f R, inside %4u (%.2f%%), deepest %.3f R\n",
                      where.c_str(), name, s.crossing, s.contact, s.inside, 100.0 * s.inside / n, s.depth);
        tables[which] += line;
      }
      const bool uniform = cyl.end_radius == 0;
      // The implicit method's bound needs a blend of σ ≥ 0.6 R (the next test,
      // ImplicitHoldsContactTo120WhereTheWeightsBlendOverARadiusOrMore); the elastic method's
      // holds on every blend.
      if (deg <= 120 && sigma_over_r >= 0.599) {
        if (uniform) {
          EXPECT_LE(is.crossing, 0.05) << where;
        }
        EXPECT_LE(is.contact, 0.05) << where;
      }
      for (const auto& [path, eis] : {std::pair{"10° steps", eis_steps}, {"15° steps", eis_steps15}, {"one jump", eis_jump}}) {
        if (uniform) {
          EXPECT_LE(eis.crossing, 0.05) << where << ", " << path;
        }
        EXPECT_LE(eis.contact, 0.05) << where << ", " << path;
        if (deg == 90) {
          EXPECT_EQ(eis.inside, 0u) << where << ", " << path;
        }
      }
      if (deg == 120) {
        // No more vertices inside than IS. (Until the relaxation became one energy descended to
        // convergence, single crease vertices flipped with float rounding here and the test
        // allowed them within 0.05 R.)
        is_inside_120 = is.inside;
        EXPECT_LE(eis_steps.inside, is_inside_120) << where << ", deepest " << eis_steps.depth << " R";
        EXPECT_LE(eis_steps15.inside, is_inside_120) << where << ", 15° steps, deepest " << eis_steps15.depth << " R";
        EXPECT_LE(eis_jump.inside, is_inside_120) << where << ", deepest " << eis_jump.depth << " R";
      }
      if (deg == 150 && cyl.blend < 0.2f) {
        EXPECT_GT(dqs.crossing, 0.3) << where << ": the measure must see DQS's fold";
        EXPECT_GT(dqs.contact, 0.3) << where << ": the contact measure too";
        EXPECT_GT(dqs.inside, 50u) << where;
      }
    }
  });
  for (const std::string& t : tables) std::fputs(t.c_str(), stdout);
}

// The blend width the implicit method needs (issue 15: "state the blend width it needs"). Its
// start is DQS, whose crease deepens as the weights blend over less of the limb, and it projects
// each vertex from there onto its iso-surface, stopping where the gradient turns (a contact): the
// narrower the blend, the deeper the fold it starts from and the more vertices stop inside the
// other piece. Cylinders of two radii, the weights of the two bones blended with σ from 0.24 R to
// 0.6 R (limb.h: the child's weight rises from 0.1 to 0.9 over 2.96 σ along the bone, 0.7 R to
// 1.8 R), bent to 90° and 120°. Measured 2026-11-28 (crossing / contact crossing over R at 120°;
// DQS beside it): σ 0.24 R 0.53 / 0.46 (DQS 0.60 / 0.48), 0.36 R 0.17 / 0.043, 0.40 R 0.15 /
// 0.035, 0.48 R 0.064 / 0.024, 0.50 R 0.065 / 0.020, 0.60 R 0.002–0.011 / ≤ 0.006; at 90° every
// contact crossing ≤ 0.001 R and the bisector crossing ≤ 0.02 R from σ 0.36 R (0.09–0.14 R at
// 0.2–0.24 R). The bone's length does not matter: at σ 0.5 R the 120° figures are 0.053–0.070 /
// 0.021–0.025 R for bones of 2, 3, 4 and 6 radii. So the implicit method meets the skins (contact
// crossing ≤ 0.05 R) to 120° from σ ≈ 0.4 R (a 0.1–0.9 blend over 1.2 R) and holds the bisector
// from σ ≈ 0.6 R (1.8 R). The Arm's elbow and fingers blend over 1.5–2.35 R and BCN_Epileptic's
// knee and elbow over 1.0–1.2 R (tests/import/implicit_contact_asset_test.cc prints it), so the
// implicit method's 0.20–0.30 R at the fingers at 120° is not the blend's doing. The elastic
// method holds 0.05 R on every blend (the previous test, down to σ 0.24 R).
TEST(ImplicitContact, ImplicitHoldsContactTo120WhereTheWeightsBlendOverARadiusOrMore) {
  const Cylinder cylinders[] = {
      {.radius = 0.25f, .length = 3, .blend = 0.04f},  // σ 0.24 R
      {.radius = 0.25f, .length = 3, .blend = 0.08f},  // σ 0.48 R
      {.radius = 0.25f, .length = 3, .blend = 0.10f},  // σ 0.60 R
      {.radius = 0.4f, .length = 4, .blend = 0.08f, .rings = 100, .segments = 40},  // σ 0.40 R
      {.radius = 0.4f, .length = 4, .blend = 0.12f, .rings = 100, .segments = 40},  // σ 0.60 R
  };
  // The cylinders side by side (each with its own bench and pool); each one's table printed after.
  std::vector<std::string> tables(std::size(cylinders));
  testing::ForEachInParallel(std::size(cylinders), [&](size_t which) {
    const Cylinder& cyl = cylinders[which];
    Bench b(cyl);
    const double sigma_over_r = cyl.blend * cyl.length / 2 / cyl.radius;
    for (double deg : {90.0, 120.0}) {
      const Skin dqs = b.Measure(b.Bend("dqs", deg), deg);
      const Skin is = b.Measure(b.Bend("implicit", deg), deg);
      char where[96];
      std::snprintf(where, sizeof where, "R %.2f, σ %.2f R (blend 0.1-0.9 over %.2f R), %.0f°", cyl.radius, sigma_over_r,
                    2.96 * sigma_over_r, deg);
      char line[256];
      std::snprintf(line, sizeof line, "%s  dqs crossing %.3f R, contact crossing %.3f R, inside %3u; implicit %.3f R, %.3f R, %3u\n",
                    where, dqs.crossing, dqs.contact, dqs.inside, is.crossing, is.contact, is.inside);
      tables[which] += line;
      EXPECT_LE(is.contact, deg == 90 || sigma_over_r >= 0.399 ? 0.05 : 1e9) << where;
      if (sigma_over_r >= 0.599) {
        EXPECT_LE(is.crossing, 0.05) << where;
      }
      if (deg == 120 && sigma_over_r < 0.3) {
        // The bound needs the blend: on this one the method starts from DQS's fold and keeps it.
        EXPECT_GT(dqs.contact, 0.3) << where << ": the measure must see DQS's fold";
        EXPECT_GT(is.contact, 0.25) << where << ": narrower than the method needs";
      }
    }
  });
  for (const std::string& t : tables) std::fputs(t.c_str(), stdout);
}

}  // namespace
}  // namespace sinew
