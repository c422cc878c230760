// Implicit skinning on the procedural limb (seed 000, spec §5): the rest pose returns the mesh;
// bent at 90° and 130°, implicit skinning keeps each side out of the other side's field where
// LBS and DQS interpenetrate; the bulge operator inflates the crease within the derived bound;
// the history-independent method gives the same frame whatever came before; the elastic method
// returns to the rest shape after a round trip and after a reset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/deformer/deformer.h"
#include "core/geometry/mesh_quality.h"
#include "core/geometry/winding_number.h"
#include "core/implicit/device_layout.h"
#include "core/implicit/field_eval.h"
#include "core/implicit/implicit_params.h"
#include "core/implicit/implicit_skinning.h"
#include "core/implicit/rotation_weights.h"
#include "core/procedural/limb.h"
#include "core/util/state_bytes.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

struct Fixture {
  std::shared_ptr<const Rig> rig;
  ThreadPool pool{2};
  Fixture() { rig = std::make_shared<Rig>(testing::BuildOrDie(MakeLimb(testing::TwoBoneLimb()))); }

  std::shared_ptr<const ImplicitModel> Model(const DeformerConfig& c) {
    auto p = PrepareImplicit(*rig, c, &pool, {});
    EXPECT_TRUE(p.ok()) << p.status();
    return std::dynamic_pointer_cast<const ImplicitModel>(*p);
  }
  std::unique_ptr<Deformer> Make(const DeformerConfig& c, std::shared_ptr<const ImplicitModel> model) {
    auto d = CreateImplicitDeformer(rig, model, c);
    EXPECT_TRUE(d.ok()) << d.status();
    return std::move(*d);
  }
  std::vector<float> Run(Deformer& d, const Pose& pose, std::vector<uint8_t>* states = nullptr) {
    std::vector<float> out(rig->positions.size());
    FrameInput in;
    in.pose = &pose;
    auto st = d.Deform(in, out, &pool);
    EXPECT_TRUE(st.ok()) << st;
    if (states) {
      EXPECT_TRUE(d.Extras({.vertex_states = states}).ok());
    }
    return out;
  }
  // Run on the calling thread alone (no pool): for sessions played side by side
  // (testing::ForEachInParallel), which must not share the fixture's pool.
  std::vector<float> RunAlone(Deformer& d, const Pose& pose) {
    std::vector<float> out(rig->positions.size());
    FrameInput in;
    in.pose = &pose;
    auto st = d.Deform(in, out, nullptr);
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }
  std::vector<float> Skin(const std::string& m, const Pose& pose) {
    DeformerConfig c;
    c.method = m;
    auto d = CreateDeformer(rig, c, &pool);
    EXPECT_TRUE(d.ok());
    std::vector<float> out(rig->positions.size());
    FrameInput in;
    in.pose = &pose;
    EXPECT_TRUE((*d)->Deform(in, out, &pool).ok());
    return out;
  }
  Pose Bent(double degrees) const {
    return LimbPose(rig->skeleton, 0.5, LimbMotion{.bend_degrees = degrees, .twist_degrees = 0});
  }
  double Diagonal() const {
    Eigen::Vector3d lo = Eigen::Vector3d::Constant(1e300), hi = -lo;
    for (size_t v = 0; v < rig->vertex_count(); ++v) {
      const Eigen::Vector3d p(rig->positions[3 * v], rig->positions[3 * v + 1], rig->positions[3 * v + 2]);
      lo = lo.cwiseMin(p);
      hi = hi.cwiseMax(p);
    }
    return (hi - lo).norm();
  }
};

Fixture& F() {
  static Fixture f;
  return f;
}

DeformerConfig Config(const std::string& m, ImplicitConfig ic) {
  DeformerConfig c;
  c.method = m;
  c.params = std::make_shared<ImplicitConfig>(std::move(ic));
  return c;
}

DeformerConfig Config(const std::string& m, JointOperator op = JointOperator::kContact) {
  ImplicitConfig ic;
  ic.default_operator = op;
  return Config(m, std::move(ic));
}

// Interpenetration of the two pieces, measured with the analytic (HRBF) fields moved by their
// bones: how far a vertex of one piece reaches into the other piece's volume beyond its own,
// max over vertices of f_other − max(f_own, 0.5) (0 when every vertex stays on its side of the
// contact surface and outside the other volume).
struct Penetration {
  double depth = 0;
  size_t vertices = 0;  // vertices with depth > 0.02
};

Penetration Measure(const Rig& rig, const ImplicitModel& model, const Pose& pose, std::span<const float> out) {
  std::vector<Similarity> world(rig.joint_count());
  std::vector<Affine34d> t(rig.joint_count());
  SkinningTransforms(rig.skeleton, pose, world, t);
  Penetration p;
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    const Eigen::Vector3d x(out[3 * v], out[3 * v + 1], out[3 * v + 2]);
    const int own = rig.weights.joints[rig.weights.offsets[v]];
    double f_own = 0, f_other = 0;
    for (const BoneField& f : model.fields) {
      const Affine34d inv = Inverse(t[f.joint]);
      const double value = f.Value(inv.leftCols<3>() * x + inv.col(3));
      (f.joint == own ? f_own : f_other) = std::max(f.joint == own ? f_own : f_other, value);
    }
    const double depth = f_other - std::max(f_own, 0.5);
    p.depth = std::max(p.depth, depth);
    if (depth > 0.02) ++p.vertices;
  }
  return p;
}

TEST(ImplicitSkinning, RestPoseReturnsTheMesh) {
  Fixture& f = F();
  for (const std::string& m : {std::string("implicit"), std::string("elastic-implicit")}) {
    auto model = f.Model(Config(m));
    ASSERT_TRUE(model);
    EXPECT_EQ(model->fields.size(), 2u);
    auto d = f.Make(Config(m), model);
    std::vector<uint8_t> states;
    const auto out = f.Run(*d, BindPose(f.rig->skeleton), &states);
    EXPECT_LT(testing::MaxAbsDiff(out, f.rig->positions), 1e-5 * f.Diagonal()) << m;
    size_t contact = 0, converged = 0;
    for (uint8_t s : states) {
      contact += s == uint8_t(VertexState::kContact);
      converged += s == uint8_t(VertexState::kConverged);
    }
    EXPECT_EQ(contact, 0u);
    EXPECT_GT(converged, f.rig->vertex_count() * 9 / 10);
  }
}

TEST(ImplicitSkinning, ContactAtBentJointWhereLbsAndDqsInterpenetrate) {
  Fixture& f = F();
  auto model = f.Model(Config("implicit"));
  auto is = f.Make(Config("implicit"), model);
  for (double angle : {90.0, 130.0}) {
    const Pose pose = f.Bent(angle);
    const Penetration lbs = Measure(*f.rig, *model, pose, f.Skin("lbs", pose));
    const Penetration dqs = Measure(*f.rig, *model, pose, f.Skin("dqs", pose));
    std::vector<uint8_t> states;
    const auto out = f.Run(*is, pose, &states);
    const Penetration ours = Measure(*f.rig, *model, pose, out);
    size_t contact = 0;
    for (uint8_t s : states) contact += s == uint8_t(VertexState::kContact);
    std::printf("bend %.0f°: penetration depth (field units) LBS %.3f (%zu vertices)  DQS %.3f (%zu)  "
                "implicit %.3f (%zu); contact vertices %zu\n",
                angle, lbs.depth, lbs.vertices, dqs.depth, dqs.vertices, ours.depth, ours.vertices, contact);
    for (float x : out) ASSERT_TRUE(std::isfinite(x));
    // No DQS-style bulge on the outer side (spec §5 test 13): the farthest vertex of the joint
    // region's outer side (rest distance from the elbow below 0.4, the radius being 0.25) from
    // the elbow.
    auto farthest = [&](const std::vector<float>& o) {
      const Eigen::Vector3d elbow(1.5, 0, 0);  // the joint does not move: the root stays at rest
      double m = 0;
      for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
        const Eigen::Vector3d r(f.rig->positions[3 * v], f.rig->positions[3 * v + 1], f.rig->positions[3 * v + 2]);
        if ((r - elbow).norm() > 0.4 || r.y() > -0.1) continue;  // outer side: the bend is towards +y
        m = std::max(m, (Eigen::Vector3d(o[3 * v], o[3 * v + 1], o[3 * v + 2]) - elbow).norm());
      }
      return m;
    };
    const double bulge_dqs = farthest(f.Skin("dqs", pose)), bulge_ours = farthest(out);
    std::printf("bend %.0f°: outer side, farthest joint-region vertex from the elbow: DQS %.4f, implicit %.4f\n",
                angle, bulge_dqs, bulge_ours);
    EXPECT_LE(bulge_ours, bulge_dqs + 0.002) << angle;
    // Implicit skinning: within the grid-vs-analytic tolerance (0.03 field units), at most one
    // vertex beyond 0.02.
    EXPECT_LT(ours.depth, 0.03) << angle;
    EXPECT_LE(ours.vertices, 1u) << angle;
    if (angle >= 130) {
      // Both skinning methods push one side deep into the other.
      EXPECT_GT(lbs.depth, 0.2);
      EXPECT_GT(dqs.depth, 0.2);
      EXPECT_GT(lbs.vertices, 50u);
      EXPECT_GT(dqs.vertices, 50u);
      EXPECT_GT(contact, 0u);
    } else {
      // At 90° only LBS does (DQS rotates the blend zone rigidly enough).
      EXPECT_GT(lbs.depth, 0.02);
      EXPECT_GT(lbs.vertices, 3u);
    }
  }
}

// The elastic relaxation holds the composition's controllers from its start (Evaluator::
// EvalHeld): recording them leaves the value where it is, and with them held the composed
// gradient is the derivative of the composed value. Live, the gradient leaves out the
// controllers' own derivative (spec pitfall 17), which the step rule then reads as a slope the
// value does not have. Checked by central differences (3e-3 of the diagonal) at the DQS skin of
// a 130° bend where a contact operator is open. Both also carry the grids' interpolation error
// (values and gradients are interpolated separately), which is most of what is left: measured
// 2026-11-28, mean mismatch live 0.090, held 0.062 (gradients about 4).
TEST(ImplicitSkinning, HeldControllersMakeTheComposedGradientTheValuesDerivative) {
  using namespace implicit_internal;
  Fixture& f = F();
  auto model = f.Model(Config("elastic-implicit"));
  const Pose pose = f.Bent(130);
  std::vector<Similarity> world(f.rig->joint_count());
  std::vector<Affine34d> t(f.rig->joint_count());
  SkinningTransforms(f.rig->skeleton, pose, world, t);
  std::vector<LeafFrame> leaves;
  MakeLeafFrames(*model, t, leaves);
  const Evaluator eval(*model, leaves.data());
  const std::vector<float> dqs = f.Skin("dqs", pose);
  const float h = 3e-3f * float(f.Diagonal());
  double live_error = 0, held_error = 0;
  size_t points = 0;
  for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
    const Eigen::Vector3f x(dqs[3 * v], dqs[3 * v + 1], dqs[3 * v + 2]);
    uint16_t cand[kMaxCandidates];
    const int count = Candidates(*model, leaves, x, cand);
    float controls[kMaxCandidates - 1];
    const FieldValue live = eval.Eval(x, cand, count);
    const FieldValue recorded = eval.EvalHeld(x, cand, count, controls, true);
    ASSERT_EQ(recorded.f, live.f) << v;
    ASSERT_EQ(recorded.g, live.g) << v;
    ASSERT_EQ(eval.EvalHeld(x, cand, count, controls, false).f, live.f) << v;
    // Where an operator's controller is open (a contact): elsewhere held and live agree.
    bool open = false;
    for (int k = 0; k + 1 < count; ++k) open |= controls[k] > 0.05f;
    if (!open || !(live.f > 0.3f && live.f < 0.7f) || live.g.squaredNorm() == 0) continue;
    const Eigen::Vector3f u = live.g.normalized();
    auto slope = [&](bool held) {
      const FieldValue a = held ? eval.EvalHeld(x + h * u, cand, count, controls, false) : eval.Eval(x + h * u, cand, count);
      const FieldValue b = held ? eval.EvalHeld(x - h * u, cand, count, controls, false) : eval.Eval(x - h * u, cand, count);
      return (a.f - b.f) / (2 * h);
    };
    live_error += std::abs(slope(false) - live.g.dot(u));
    held_error += std::abs(slope(true) - eval.EvalHeld(x, cand, count, controls, false).g.dot(u));
    ++points;
  }
  std::printf("%zu points in the 130° contact: mean |central difference − gradient·u| live %.4f, held %.4f\n",
              points, live_error / std::max<size_t>(points, 1), held_error / std::max<size_t>(points, 1));
  ASSERT_GT(points, 20u);
  EXPECT_LT(held_error, 0.8 * live_error);
}

// The composed field evaluated over a point's candidates (the fields whose bounding spheres hold
// it) is the composition of every field, value and gradient alike: the fields left out are 0
// there, and a subtree of the composition holding one candidate is that field's value without
// walking its chain (Evaluator::Node). Checked bit for bit on a chain of eight bones curled by
// 0°, 20° and 40° a joint, at its DQS skin and at points moved off it by up to a fifth of its
// diagonal, where many fields are 0. (A wrong split of the candidates between a node's children
// fails it; where these grids read 0 their gradient is 0 too, so the walk's rule for a 0
// field's gradient is not exercised here.)
TEST(ImplicitSkinning, ComposedFieldOverTheCandidatesIsTheCompositionOfEveryField) {
  using namespace implicit_internal;
  ThreadPool pool(2);
  auto rig = std::make_shared<const Rig>(
      testing::BuildOrDie(MakeLimb(LimbOptions{.rings = 96, .segments = 16, .bones = 8, .length = 4.f})));
  auto prepared = PrepareImplicit(*rig, Config("implicit"), &pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const auto& model = dynamic_cast<const ImplicitModel&>(**prepared);
  ASSERT_EQ(model.fields.size(), 8u);
  std::vector<uint16_t> all(model.fields.size());
  for (size_t k = 0; k < all.size(); ++k) all[k] = uint16_t(k);
  const double diagonal = rig->bbox_diagonal();
  size_t points = 0, single = 0, zero_single = 0;
  for (double degrees : {0.0, 20.0, 40.0}) {
    Pose pose = RestPose(rig->skeleton);
    for (size_t j = 1; j < rig->joint_count(); ++j) {
      Similarity s = pose.joint(j);
      s.rotation = s.rotation * Eigen::Quaterniond(Eigen::AngleAxisd(degrees * std::numbers::pi / 180, Eigen::Vector3d::UnitZ()));
      pose.set_joint(j, s);
    }
    std::vector<Similarity> world(rig->joint_count());
    std::vector<Affine34d> t(rig->joint_count());
    SkinningTransforms(rig->skeleton, pose, world, t);
    std::vector<LeafFrame> leaves;
    MakeLeafFrames(model, t, leaves);
    const Evaluator eval(model, leaves.data());
    DeformerConfig dqs_config;
    dqs_config.method = "dqs";
    auto dqs = CreateDeformer(rig, dqs_config, &pool);
    ASSERT_TRUE(dqs.ok());
    std::vector<float> skin(rig->positions.size());
    ASSERT_TRUE((*dqs)->Deform({&pose, {}}, skin, &pool).ok());
    const Eigen::Vector3f shift = Eigen::Vector3f(0.3f, -0.5f, 0.8f).normalized() * float(0.2 * diagonal);
    for (size_t v = 0; v < rig->vertex_count(); v += 5) {
      for (float s : {0.f, 0.1f, -0.25f, 0.5f, 1.f}) {
        const Eigen::Vector3f x = Eigen::Vector3f(skin[3 * v], skin[3 * v + 1], skin[3 * v + 2]) + s * shift;
        uint16_t cand[kMaxCandidates];
        const int count = Candidates(model, leaves, x, cand);
        const FieldValue some = eval.Eval(x, cand, count);
        const FieldValue every = eval.Eval(x, all.data(), int(all.size()));
        ASSERT_EQ(some.f, every.f) << "vertex " << v << " shifted by " << s << ", " << degrees << "°";
        ASSERT_EQ(some.g, every.g) << "vertex " << v << " shifted by " << s << ", " << degrees << "°";
        ++points;
        single += count == 1;
        zero_single += count == 1 && some.f == 0;
      }
    }
  }
  std::printf("%zu points, %zu with one candidate (%zu of them where it is 0)\n", points, single, zero_single);
  EXPECT_GT(single, 0u);
  EXPECT_GT(zero_single, 0u);
}

TEST(ImplicitSkinning, UnionStopsVerticesAtTheGradientJump) {
  // With max as the operator, contact is a gradient discontinuity: vertices marching across
  // the f1 = f2 interface see the gradient turn by more than 55° and stop there (§2.7.3).
  Fixture& f = F();
  const DeformerConfig c = Config("implicit", JointOperator::kUnion);
  auto model = f.Model(c);
  auto d = f.Make(c, model);
  std::vector<uint8_t> states;
  const Pose pose = f.Bent(130);
  const auto out = f.Run(*d, pose, &states);
  size_t contact = 0;
  for (uint8_t s : states) contact += s == uint8_t(VertexState::kContact);
  const Penetration p = Measure(*f.rig, *model, pose, out);
  std::printf("union at 130°: contact vertices %zu, penetration %.3f (%zu vertices)\n", contact, p.depth, p.vertices);
  EXPECT_GT(contact, 10u);
  EXPECT_LT(p.depth, 0.05);
}

TEST(ImplicitSkinning, BulgeInflatesTheCreaseWithinTheBound) {
  Fixture& f = F();
  auto union_model = f.Model(Config("implicit", JointOperator::kCleanUnion));
  auto bulge_model = f.Model(Config("implicit", JointOperator::kBulge));
  auto a = f.Make(Config("implicit", JointOperator::kCleanUnion), union_model);
  auto b = f.Make(Config("implicit", JointOperator::kBulge), bulge_model);
  const Pose pose = f.Bent(90);
  const auto ua = f.Run(*a, pose), ub = f.Run(*b, pose);
  // Distance of each vertex from the moved axis of its own bone.
  std::vector<Similarity> world(f.rig->joint_count());
  std::vector<Affine34d> t(f.rig->joint_count());
  SkinningTransforms(f.rig->skeleton, pose, world, t);
  double most = 0;
  const double r = bulge_model->fields[0].radius;
  for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
    const int own = f.rig->weights.joints[f.rig->weights.offsets[v]];
    const BoneField* field = nullptr;
    for (const BoneField& bf : bulge_model->fields) {
      if (bf.joint == own) field = &bf;
    }
    if (!field) continue;
    const Affine34d inv = Inverse(t[own]);
    auto radial = [&](const std::vector<float>& o) {
      const Eigen::Vector3d x = inv.leftCols<3>() * Eigen::Vector3d(o[3 * v], o[3 * v + 1], o[3 * v + 2]) + inv.col(3);
      const Eigen::Vector3d ab = field->b1 - field->b0;
      const double s = std::clamp((x - field->b0).dot(ab) / ab.squaredNorm(), 0.0, 1.0);
      return (x - (field->b0 + s * ab)).norm();
    };
    most = std::max(most, radial(ub) - radial(ua));
  }
  std::printf("bulge at 90°: largest outward move %.4f = %.3f r (bound 0.108 r)\n", most, most / r);
  EXPECT_GT(most, 0.01 * r) << "the bulge operator inflates the crease";
  EXPECT_LT(most, 0.108 * r * 1.15) << "within t_r⁻¹(0.40) (plus grid tolerance)";
}

TEST(ImplicitSkinning, HistoryIndependent) {
  Fixture& f = F();
  const DeformerConfig c = Config("implicit");
  auto model = f.Model(c);
  auto d1 = f.Make(c, model), d2 = f.Make(c, model);
  f.Run(*d1, f.Bent(40));
  f.Run(*d1, f.Bent(130));
  const auto after = f.Run(*d1, f.Bent(90));
  const auto alone = f.Run(*d2, f.Bent(90));
  EXPECT_EQ(after, alone) << "bit-identical whatever came before";
}

TEST(ImplicitSkinning, ElasticReturnsToRestAfterARoundTripAndAfterReset) {
  Fixture& f = F();
  ImplicitConfig ic;
  ic.relaxation_iterations = 100;
  const DeformerConfig c = Config("elastic-implicit", ic);
  auto model = f.Model(c);
  auto d = f.Make(c, model);
  std::vector<float> out;
  for (int k = 0; k <= 8; ++k) out = f.Run(*d, f.Bent(15.0 * k));
  for (int k = 8; k >= 0; --k) out = f.Run(*d, f.Bent(15.0 * k));
  const double diag = f.Diagonal();
  const double err = testing::MaxAbsDiff(out, f.rig->positions);
  std::printf("elastic round trip to 120°: max deviation from rest %.2e diag\n", err / diag);
  EXPECT_LT(err, 1e-4 * diag);  // measured 1.8e-5
  // A jump to 120° in one frame is split into sub-steps and stays finite.
  out = f.Run(*d, f.Bent(120));
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  d->Reset();
  out = f.Run(*d, BindPose(f.rig->skeleton));
  EXPECT_LT(testing::MaxAbsDiff(out, f.rig->positions), 1e-5 * diag) << "reset returns to the rest state";
}

// A host stops a frame (FrameInput::stop) when its caller gives up on it; the session must then
// be where it was, so that the frames sent next give what they would have given.
TEST(ImplicitSkinning, ElasticFrameStoppedByItsCallerLeavesTheSessionAsBefore) {
  Fixture& f = F();
  const DeformerConfig c = Config("elastic-implicit");
  auto model = f.Model(c);
  auto stopped = f.Make(c, model), whole = f.Make(c, model), counted = f.Make(c, model);
  for (double deg : {30.0, 60.0}) {
    f.Run(*stopped, f.Bent(deg));
    f.Run(*whole, f.Bent(deg));
    f.Run(*counted, f.Bent(deg));
  }
  // How often the 60° → 120° frame asks (the limb is one component: one asking thread, so the
  // count is the same in every run).
  std::atomic<int> asked{0};
  const StopFn count = [&] { return ++asked < 0; };
  const Pose deep = f.Bent(120);
  std::vector<float> out(f.rig->positions.size());
  FrameInput in;
  in.pose = &deep;
  in.stop = &count;
  ASSERT_TRUE(counted->Deform(in, out, &f.pool).ok());
  const int total = asked.load();
  ASSERT_GT(total, 20) << "asked before every relaxation round and after every sub-step";
  // Stopped half-way (sub-steps relaxed and kept in the tracking state by then).
  std::atomic<int> left{total / 2};
  const StopFn halfway = [&] { return --left < 0; };
  in.stop = &halfway;
  const absl::Status st = stopped->Deform(in, out, &f.pool);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("stopped by its caller in sub-step"));
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("as this frame found it"));
  // The caller goes on with another pose, then sends the deep one again: the bits of a session
  // that never saw the stopped frame.
  const Pose next = f.Bent(90);
  in.pose = &next;
  in.stop = &count;
  ASSERT_TRUE(stopped->Deform(in, out, &f.pool).ok());
  std::vector<uint8_t> states, whole_states;
  ASSERT_TRUE(stopped->Extras({.vertex_states = &states}).ok());
  EXPECT_EQ(testing::MaxAbsDiff(out, f.Run(*whole, next, &whole_states)), 0.0);
  EXPECT_EQ(states, whole_states);
  EXPECT_EQ(testing::MaxAbsDiff(f.Run(*stopped, deep), f.Run(*whole, deep)), 0.0);
}

// A snapshot continues bit for bit (Deformer::SaveState, the server's GetSessionState): an
// elastic session saved after six frames of a bend with twist and loaded into a new deformer
// plays the next frames (on to 120° and back, a 45° jump among them) with the original's bits and
// vertex states, where a session from rest gives other bits. Bytes that do not fit (damaged,
// truncated, another method's, another rig's counts, a value that is not finite, a state no frame
// leaves) are refused, naming what, and leave the target as it was; bytes whose nodes another
// preparation tracked load. A session saved before its
// first frame restores as one from rest. Until 2026-12-04 GetSessionState answered UNIMPLEMENTED
// for elastic sessions (a server restart or a migration lost the history).
TEST(ImplicitSkinning, ElasticSnapshotRestoreContinuesBitForBit) {
  Fixture& f = F();
  const DeformerConfig c = Config("elastic-implicit");
  auto model = f.Model(c);
  auto pose = [&](double bend) {
    return LimbPose(f.rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend, .twist_degrees = bend / 3});
  };
  auto original = f.Make(c, model), restored = f.Make(c, model), fresh = f.Make(c, model);
  for (int k = 0; k <= 5; ++k) f.Run(*original, pose(15.0 * k));
  f.Run(*restored, pose(30));  // a target with a history of its own, which refusals keep
  const auto saved = original->SaveState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  const auto target_before = restored->SaveState();
  ASSERT_TRUE(target_before.ok());

  const size_t nodes = model->node_count(), joints = f.rig->joint_count();
  const size_t head = 10 + 8 + 8 + 1, positions = head + joints * 20 * sizeof(double);
  ASSERT_EQ(saved->size(), positions + nodes * (3 * sizeof(float) + 1) + 8);
  // The client may make the checksum good over anything.
  auto reseal = [](std::string b) {
    const uint64_t sum = Fnv1a64(std::string_view(b).substr(0, b.size() - 8));
    std::memcpy(b.data() + b.size() - 8, &sum, 8);
    return b;
  };
  auto refused = [&](const std::string& bytes, absl::StatusCode code, const std::string& says) {
    const absl::Status st = restored->LoadState(bytes);
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr(says)) << st;
  };
  std::string damaged = *saved;
  damaged[damaged.size() / 2] ^= 1;
  refused(damaged, absl::StatusCode::kDataLoss, "checksum");
  refused(saved->substr(0, saved->size() - 5), absl::StatusCode::kDataLoss, "checksum");
  refused("nonsense", absl::StatusCode::kInvalidArgument, "not an elastic-implicit session state");
  std::string other_rig = *saved;
  const uint64_t more = nodes + 1;
  std::memcpy(other_rig.data() + 10, &more, 8);
  refused(reseal(other_rig), absl::StatusCode::kInvalidArgument, "this session's rig and preparation have");
  refused(reseal(saved->substr(0, saved->size() - 9) + saved->substr(saved->size() - 8)), absl::StatusCode::kDataLoss,
          "bytes of history");
  std::string not_finite = *saved;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(not_finite.data() + positions + 3 * sizeof(float), &nan, sizeof nan);
  refused(reseal(not_finite), absl::StatusCode::kInvalidArgument, "node 1's position is not finite");
  std::string skewed = *saved;
  const double two = 2;
  std::memcpy(skewed.data() + head + 20 * sizeof(double), &two, sizeof two);  // joint 1's rotation w
  refused(reseal(skewed), absl::StatusCode::kInvalidArgument, "joint 1's previous pose is not a similarity");
  // A similarity and a skinning matrix that disagree (until 2026-12-07 the matrix was taken as
  // sent, and a sheared or turned one moved every later frame's skin 2.4 radii off).
  std::string sheared = *saved;
  double entry;
  std::memcpy(&entry, sheared.data() + head + 28 * sizeof(double), sizeof entry);  // joint 1's matrix (0, 0)
  entry += 0.5;
  std::memcpy(sheared.data() + head + 28 * sizeof(double), &entry, sizeof entry);
  refused(reseal(sheared), absl::StatusCode::kInvalidArgument,
          "joint 1's previous skinning matrix is not its previous pose after the rig's inverse bind");
  size_t tracked = 0;
  while (!model->in_field[tracked]) ++tracked;
  std::string unknown = *saved;
  unknown[positions + 3 * sizeof(float) * nodes + tracked] = 9;
  refused(reseal(unknown), absl::StatusCode::kInvalidArgument, absl::StrCat("node ", tracked, "'s state 9"));
  EXPECT_EQ(*restored->SaveState(), *target_before) << "a refused state changed the target";

  // Saved by a preparation that tracked other nodes: a node tracked here and saved untracked
  // starts from its saved position, where the initial skinning put it. Flipped on a node the
  // frame left converged, the session goes on with the original's bits, below. (Saved tracked and
  // untracked here: SkinInsideTheRestSkinKeepsTheInitialSkinning.)
  const size_t states_at = positions + 3 * sizeof(float) * nodes;
  size_t converged = 0;
  while (converged < nodes &&
         (!model->in_field[converged] || (*saved)[states_at + converged] != char(VertexState::kConverged))) {
    ++converged;
  }
  ASSERT_LT(converged, nodes);
  std::string other_preparation = *saved;
  other_preparation[states_at + converged] = char(VertexState::kFree);
  ASSERT_TRUE(restored->LoadState(reseal(other_preparation)).ok());
  EXPECT_EQ(*restored->SaveState(), *saved) << "node " << converged;
  bool history_matters = false;
  for (double bend : {90.0, 105.0, 120.0, 75.0, 30.0, 45.0}) {
    std::vector<uint8_t> a_states, b_states;
    const auto a = f.Run(*original, pose(bend), &a_states);
    const auto b = f.Run(*restored, pose(bend), &b_states);
    ASSERT_EQ(a, b) << "bend " << bend;
    ASSERT_EQ(a_states, b_states) << "bend " << bend;
    history_matters = history_matters || f.Run(*fresh, pose(bend)) != a;
    fresh->Reset();
  }
  EXPECT_TRUE(history_matters) << "a session from rest gave the restored session's bits: the test cannot fail";

  // Saved before its first frame: from rest, wherever it is restored.
  const auto unplayed = f.Make(c, model)->SaveState();
  ASSERT_TRUE(unplayed.ok());
  EXPECT_EQ(unplayed->size(), head + 8);
  ASSERT_TRUE(restored->LoadState(*unplayed).ok());
  fresh->Reset();
  for (double bend : {45.0, 90.0}) ASSERT_EQ(f.Run(*restored, pose(bend)), f.Run(*fresh, pose(bend))) << bend;
}

TEST(ImplicitSkinning, ElasticKeepsContactAtDeepBend) {
  Fixture& f = F();
  const DeformerConfig c = Config("elastic-implicit");
  auto model = f.Model(c);
  auto d = f.Make(c, model);
  std::vector<float> out;
  for (int k = 0; k <= 13; ++k) out = f.Run(*d, f.Bent(10.0 * k));
  const Penetration p = Measure(*f.rig, *model, f.Bent(130), out);
  const Penetration dqs = Measure(*f.rig, *model, f.Bent(130), f.Skin("dqs", f.Bent(130)));
  std::printf("elastic at 130°: penetration %.3f (%zu vertices), DQS %.3f (%zu)\n", p.depth, p.vertices, dqs.depth,
              dqs.vertices);
  // Measured: 0.015 (0 vertices) vs DQS 0.281 (104).
  EXPECT_LT(p.depth, 0.03);
  EXPECT_LE(p.vertices, 1u);
  EXPECT_GT(dqs.vertices, 50u);
}

TEST(ImplicitSkinning, UploadedSegmentationReplacesTheLargestWeight) {
  Fixture& f = F();
  // Move the boundary between the two pieces from the joint (x = 1.5) to x = 1.0.
  Rig rig = *f.rig;
  AttributeMap seg{"segmentation", 1, {}};
  for (size_t v = 0; v < rig.vertex_count(); ++v) seg.values.push_back(rig.positions[3 * v] < 1.0f ? 0.f : 1.f);
  rig.attributes.push_back(seg);
  auto own = Segmentation(rig);
  ASSERT_TRUE(own.ok()) << own.status();
  size_t first = 0;
  for (int32_t j : *own) first += j == 0;
  auto by_weight = Segmentation(*f.rig);
  size_t first_by_weight = 0;
  for (int32_t j : *by_weight) first_by_weight += j == 0;
  EXPECT_LT(first, first_by_weight * 3 / 4);
  auto p = PrepareImplicit(rig, Config("implicit"), &f.pool, {});
  ASSERT_TRUE(p.ok()) << p.status();
  auto model = std::dynamic_pointer_cast<const ImplicitModel>(*p);
  for (size_t i = 0; i < model->node_count(); ++i) {
    ASSERT_EQ(model->bone[i], model->rest[3 * i] < 1.0f ? 0 : 1);
  }
  // A value that is not a joint index is named.
  rig.attributes.back().values[7] = 2.5f;
  auto bad = PrepareImplicit(rig, Config("implicit"), nullptr, {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("rig.attributes[0] (segmentation).values[7]"), std::string::npos)
      << bad.status();
}

// The limb with a seam as exporters leave a mirrored model's: along one line of the tube, the
// triangles on one side use copies of the line's vertices a few ulps from the originals
// (Testwuson.X's chest: copies 9.5e-7 apart). The copies take their points' results, so the seam
// moves as one (until 2026-12-05 each side kept its own, and Testwuson's implicit skin tore open
// by 3 % of its diagonal there). The mesh's topology is still the slit one (equal positions
// welded; see PrepareImplicit for why the sides are not joined): the implicit skin is the
// seamless limb's within 1.0e-3 of the diagonal (its smoothing sees the slit), the elastic one
// within 7.4e-3 (its relaxation has a free boundary along the slit), both measured at 90°.
TEST(ImplicitSkinning, MirrorSeamCopiesAFewUlpsApartMoveAsOnePoint) {
  Fixture& f = F();
  const LimbOptions o = testing::TwoBoneLimb();
  RigInput in = MakeLimb(o);
  const uint32_t n = uint32_t(in.rig.positions.size() / 3);
  std::vector<uint32_t> copy_of(n, UINT32_MAX);  // seam vertex -> its copy
  for (uint32_t v = 0; v < n; v += o.segments) {  // segment 0 of every ring
    copy_of[v] = uint32_t(in.rig.positions.size() / 3);
    for (int c = 0; c < 3; ++c) {
      const float x = in.rig.positions[3 * v + c];
      in.rig.positions.push_back(x + (c == 1 ? 2e-7f * std::max(std::abs(x), 1.0f) : 0.0f));
    }
    const std::array<float, 3> normal = {in.rig.normals[3 * v], in.rig.normals[3 * v + 1], in.rig.normals[3 * v + 2]};
    in.rig.normals.insert(in.rig.normals.end(), normal.begin(), normal.end());
    const uint32_t b = in.weights.offsets[v], e = in.weights.offsets[v + 1];
    for (uint32_t i = b; i < e; ++i) {
      in.weights.joints.push_back(in.weights.joints[i]);
      in.weights.weights.push_back(in.weights.weights[i]);
    }
    in.weights.offsets.push_back(uint32_t(in.weights.joints.size()));
  }
  size_t rewired = 0;
  for (size_t t = 0; t + 2 < in.rig.triangles.size(); t += 3) {
    // The side of the seam whose triangles reach the last segment of a ring.
    bool last_side = false;
    for (int k = 0; k < 3; ++k) last_side |= in.rig.triangles[t + k] % o.segments == o.segments - 1;
    if (!last_side) continue;
    for (int k = 0; k < 3; ++k) {
      uint32_t& v = in.rig.triangles[t + k];
      if (v < n && copy_of[v] != UINT32_MAX) {
        v = copy_of[v];
        ++rewired;
      }
    }
  }
  ASSERT_GT(rewired, 2u * (o.rings - 1));
  auto seamed = std::make_shared<const Rig>(testing::BuildOrDie(std::move(in)));
  const double diag = f.Diagonal();
  for (const char* method : {"implicit", "elastic-implicit"}) {
    auto prepared = PrepareImplicit(*seamed, Config(method), &f.pool, {});
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    auto d = CreateImplicitDeformer(seamed, std::dynamic_pointer_cast<const ImplicitModel>(*prepared), Config(method));
    ASSERT_TRUE(d.ok()) << d.status();
    auto w = CreateImplicitDeformer(f.rig, f.Model(Config(method)), Config(method));
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<float> out(seamed->positions.size()), welded(f.rig->positions.size());
    for (int k = 0; k <= 9; ++k) {  // to 90° in 10° steps (the elastic method's history)
      const Pose pose = f.Bent(10.0 * k);
      ASSERT_TRUE((*d)->Deform({&pose, {}}, out, &f.pool).ok());
      ASSERT_TRUE((*w)->Deform({&pose, {}}, welded, &f.pool).ok());
    }
    double torn = 0, apart = 0;
    for (uint32_t v = 0; v < n; ++v) {
      const Eigen::Vector3d x(out[3 * v], out[3 * v + 1], out[3 * v + 2]);
      apart = std::max(apart, (x - Eigen::Vector3d(welded[3 * v], welded[3 * v + 1], welded[3 * v + 2])).norm() / diag);
      if (copy_of[v] == UINT32_MAX) continue;
      const uint32_t c = copy_of[v];
      torn = std::max(torn, (x - Eigen::Vector3d(out[3 * c], out[3 * c + 1], out[3 * c + 2])).norm() / diag);
    }
    std::printf("%s at 90°: the seam's copies up to %.1e of the diagonal apart; the seamless limb's skin within %.1e\n",
                method, torn, apart);
    EXPECT_EQ(torn, 0.0) << method;
    EXPECT_LE(apart, std::string(method) == "implicit" ? 2e-3 : 1e-2) << method;
  }
}

// The pieces either side of a joint (ImplicitModel::parent_field, which the elastic method's
// own-side terms hold each node against) are found through joints that own no piece: a chain
// whose middle joint owns nothing (a helper bone, as in assimp-testmodels'
// animation_with_skeleton.fbx) makes the first and last pieces neighbours across it. Until
// 2026-12-05 the last piece had none.
TEST(ImplicitSkinning, PiecesAcrossAJointThatOwnsNothingAreNeighbours) {
  const Rig rig = testing::ChainWithAWeightlessMiddleJoint();  // joints 0 and 2 own the pieces
  auto prepared = PrepareImplicit(rig, Config("implicit"), nullptr, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
  ASSERT_EQ(model->fields.size(), 2u);
  const int32_t first = model->fields[0].joint == 0 ? 0 : 1, last = 1 - first;
  ASSERT_EQ(model->fields[size_t(last)].joint, 2);
  EXPECT_EQ(model->parent_field[size_t(last)], first) << "the piece below the weightless joint 1";
  EXPECT_EQ(model->parent_field[size_t(first)], -1);
  EXPECT_TRUE(implicit_device::AdjacentFields(model->parent_field.data(), first, last));
}

// A mesh too coarse for a field fitted on its vertices (a limb of 6 rings of 4: a dozen points a
// bone, 16 needed) gets fields fitted on points of its triangles (sample_triangles, the default),
// and with every field drawn every node is tracked (else the method would be DQS). Without
// sample_triangles it is refused saying so, what it offered and what would do (assimp-testmodels'
// huesitos.fbx, 120 triangles, was told "no bone owns enough vertices" while its bones owned 16
// to 72).
TEST(ImplicitSkinning, AMeshTooCoarseForVertexFieldsGetsTriangleFieldsAndWithoutThemIsRefusedSayingSo) {
  LimbOptions o;
  o.rings = 6;
  o.segments = 4;
  o.bones = 2;
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(MakeLimb(o)));
  ImplicitConfig vertices_only;
  vertices_only.sample_triangles = false;
  auto p = PrepareImplicit(*rig, Config("implicit", vertices_only), nullptr, {});
  ASSERT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << p.status();
  const std::string message(p.status().message());
  EXPECT_NE(message.find("2 bones own 8 vertices or more"), std::string::npos) << message;
  EXPECT_NE(message.find("too coarse"), std::string::npos) << message;
  EXPECT_NE(message.find("set sample_triangles"), std::string::npos) << message;
  for (const std::string method : {"implicit", "elastic-implicit"}) {
    const DeformerConfig config = Config(method);
    auto prepared = PrepareImplicit(*rig, config, nullptr, {});
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    const auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
    EXPECT_EQ(model->fields.size(), 2u);
    EXPECT_EQ(std::count(model->in_field.begin(), model->in_field.end(), 1), std::ptrdiff_t(model->node_count()))
        << method << ": every node tracked";
    // What `sinew play` and RigInfo.preparations say it made.
    EXPECT_THAT(model->Summary(), ::testing::StartsWith("2 bone fields (2 fitted on points of their triangles); "));
    EXPECT_THAT(model->Summary(), ::testing::EndsWith(absl::StrCat("; ", model->node_count(), " of ",
                                                                   model->node_count(), " mesh points tracked")));
    auto d = CreateImplicitDeformer(rig, model, config);
    ASSERT_TRUE(d.ok()) << d.status();
    // A session asking otherwise than its preparation is refused, naming the setting.
    for (const bool track : {false, true}) {
      ImplicitConfig other_config;
      other_config.sample_triangles = track;
      other_config.track_sampled_pieces = track;
      auto other = CreateImplicitDeformer(rig, model, Config(method, other_config));
      ASSERT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << other.status();
      EXPECT_NE(std::string(other.status().message()).find(track ? "track_sampled_pieces" : "sample_triangles"),
                std::string::npos)
          << other.status();
    }
  }
}

TEST(ImplicitSkinning, RigidMotionOfTheWholeRigMovesTheMeshRigidly) {
  // Spec §5 test 8: the same rigid transform on every bone moves the composed field rigidly, so
  // the iso values still match and the output is the moved rest mesh.
  Fixture& f = F();
  const Eigen::Quaterniond q(Eigen::AngleAxisd(0.7, Eigen::Vector3d(1, 2, 3).normalized()));
  const Eigen::Vector3d t(0.3, -1.2, 2.0);
  Pose pose = RestPose(f.rig->skeleton);
  const Similarity root = pose.joint(0);
  Similarity moved;
  moved.rotation = q * root.rotation;
  moved.translation = q * root.translation + t;
  pose.set_joint(0, moved);
  for (const std::string& m : {std::string("implicit"), std::string("elastic-implicit")}) {
    auto model = f.Model(Config(m));
    auto d = f.Make(Config(m), model);
    const auto out = f.Run(*d, pose);
    double worst = 0;
    for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
      const Eigen::Vector3d r(f.rig->positions[3 * v], f.rig->positions[3 * v + 1], f.rig->positions[3 * v + 2]);
      worst = std::max(worst, (q * r + t - Eigen::Vector3d(out[3 * v], out[3 * v + 1], out[3 * v + 2])).norm());
    }
    std::printf("rigid motion of the whole rig, method %s: max deviation %.2e diag\n", m.c_str(), worst / f.Diagonal());
    EXPECT_LT(worst, 1e-5 * f.Diagonal()) << m;
  }
}

TEST(ImplicitSkinning, MeanValueWeightsReproduceTheRestOneRing) {
  // Spec §5 test 18: the tangent-plane MVC weights sum to 1 and reproduce each node from its
  // projected rest one-ring, so relaxation does nothing at rest.
  Fixture& f = F();
  auto model = f.Model(Config("implicit"));
  size_t checked = 0;
  for (size_t i = 0; i < model->node_count(); ++i) {
    if (!model->ring_closed[i]) continue;
    const Eigen::Vector3f p(model->rest[3 * i], model->rest[3 * i + 1], model->rest[3 * i + 2]);
    Eigen::Vector3f g;
    EvaluateRestField(*model, p, &g);
    const Eigen::Vector3f n = g.normalized();
    double sum = 0, edge = 0;
    Eigen::Vector3f acc = Eigen::Vector3f::Zero();
    for (uint32_t r = model->ring_offsets[i]; r < model->ring_offsets[i + 1]; ++r) {
      const uint32_t j = model->ring[r];
      const Eigen::Vector3f q = Eigen::Vector3f(model->rest[3 * j], model->rest[3 * j + 1], model->rest[3 * j + 2]) - p;
      acc += model->mvc[r] * (q - q.dot(n) * n);
      sum += model->mvc[r];
      edge = std::max(edge, double(q.norm()));
    }
    ASSERT_NEAR(sum, 1.0, 1e-5) << "node " << i;
    ASSERT_LT(acc.norm(), 1e-5 * edge) << "node " << i;
    ++checked;
  }
  EXPECT_GT(checked, model->node_count() / 2);
}

TEST(ImplicitSkinning, ElasticResultHardlyDependsOnTheTimeStep) {
  // Spec §5 test 17: the same pose reached with steps of 0.05 and 0.01 rad gives nearly the
  // same mesh (a small fraction of the mean edge) on the same surface.
  Fixture& f = F();
  auto model = f.Model(Config("elastic-implicit"));
  auto run = [&](int frames) {
    auto d = f.Make(Config("elastic-implicit"), model);
    std::vector<float> out;
    for (int k = 1; k <= frames; ++k) out = f.Run(*d, f.Bent(60.0 * k / frames));
    return out;
  };
  const auto coarse = run(21), fine = run(105);  // ≈ 0.05 and 0.01 rad per frame
  const double diff = testing::MaxAbsDiff(coarse, fine);
  std::printf("elastic, 60° in steps of 0.05 vs 0.01 rad: max difference %.2e = %.3f mean edges\n", diff,
              diff / model->mean_edge);
  EXPECT_LT(diff, 0.25 * model->mean_edge);
}

TEST(ImplicitSkinning, ElasticResultIsContinuousInThePose) {
  // Issue 15: a 1e-6 rad turn of every joint (as a client whose poses went through other
  // arithmetic would send them) moves the elastic result by at most 1e-4 of the diagonal, over a
  // sequence with contact and two 60° jumps: 0° → 120° → 0° in 15° steps, the wrist twisting a
  // third of the bend (bench/implicit_stability.cc plays the same). Before the relaxation was
  // one energy descended to convergence, the 105° and 120° frames moved by 1.3e-2.
  Fixture& f = F();
  auto model = f.Model(Config("elastic-implicit"));
  std::vector<double> bends;
  for (int k = 0; k <= 8; ++k) bends.push_back(15.0 * k);
  for (int k = 7; k >= 0; --k) bends.push_back(15.0 * k);
  bends.insert(bends.begin() + 3, {105.0, 45.0});
  std::vector<Pose> poses;
  for (double b : bends) poses.push_back(LimbPose(f.rig->skeleton, 0.5, LimbMotion{.bend_degrees = b, .twist_degrees = b / 3}));
  const auto runs = testing::PlayTurned(poses, 1e-6, [&](const std::vector<Pose>& run) {
    auto session = f.Make(Config("elastic-implicit"), model);
    std::vector<std::vector<float>> frames;
    for (const Pose& pose : run) frames.push_back(f.RunAlone(*session, pose));
    return frames;
  });
  const double diag = f.Diagonal();
  double worst = 0;
  for (size_t k = 0; k < bends.size(); ++k) {
    for (int t = 0; t < 4; ++t) {
      const double d = testing::MaxAbsDiff(runs[t + 1][k], runs[0][k]) / diag;
      EXPECT_LE(d, 1e-4) << "bend " << bends[k] << "°, turn " << t;
      worst = std::max(worst, d);
    }
  }
  std::printf("elastic, 19 frames with contact and jumps, 1e-6 rad turns: largest move %.2e of the diagonal\n", worst);
}

TEST(ImplicitSkinning, ElasticRelaxationToleranceIsReadAndTheDefaultEndsNearTheMinimum) {
  // ImplicitConfig::relaxation_tolerance: each relaxation ends when no node moves by that
  // fraction of the mean edge. A bend without contact reached in one jump, relaxed to 1e-3 (the
  // default) and to 1e-5: the two differ (the setting is read) by a small fraction of the mean
  // edge (measured 2026-11-29: 7e-4 mean edges; 1e-3 against 1e-4 4.7e-4, 1e-4 against 1e-5 and
  // 1e-5 against 0, every relaxation to its round limit, 2.3e-4 and 2.4e-4: the default already
  // ends near each minimum where the relaxation converges).
  Fixture& f = F();
  auto model = f.Model(Config("elastic-implicit"));
  constexpr double kTolerances[] = {1e-3, 1e-5};
  std::vector<std::vector<float>> out(std::size(kTolerances));
  testing::ForEachInParallel(std::size(kTolerances), [&](size_t k) {
    ImplicitConfig c;
    c.relaxation_tolerance = kTolerances[k];
    auto session = f.Make(Config("elastic-implicit", c), model);
    out[k] = f.RunAlone(*session, LimbPose(f.rig->skeleton, 0.5, LimbMotion{.bend_degrees = 75, .twist_degrees = 25}));
  });
  const double d = testing::MaxAbsDiff(out[0], out[1]) / model->mean_edge;
  std::printf("elastic, 75° in one jump: relaxation tolerance 1e-3 vs 1e-5 of the mean edge: %.2e mean edges apart\n", d);
  EXPECT_GT(d, 0) << "the tolerance must be read";
  EXPECT_LT(d, 1e-2);
}

TEST(ImplicitSkinning, ElasticComponentsOfTheMeshRelaxIndependently) {
  // The relaxation minimises each connected component's energy on its own (its CG, step
  // fraction, trust and end): limb A bending 0° → 120° comes out the same, bit for bit, whether
  // limb B beside it stays at rest or bends a third as far (fewer sub-steps than A needs, so the
  // sub-step plan is A's in both). With one set of scalars for the whole mesh, B's sums entered
  // A's steps and B's convergence decided where A stopped: BCN_Epileptic's right knee moved
  // 1e-2 of the diagonal under a 1e-6 rad turn because its ponytail, in another component, did.
  Fixture& f = F();
  const size_t n = f.rig->vertex_count();
  auto rig = std::make_shared<const Rig>(testing::TwoLimbs(*f.rig, 4.f));
  auto prepared = PrepareImplicit(*rig, Config("elastic-implicit"), &f.pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
  ASSERT_EQ(model->component_offsets.size(), 3u) << "two components";
  EXPECT_EQ(model->component_offsets[1], model->node_count() / 2);
  auto make = [&] { return std::move(*CreateImplicitDeformer(rig, model, Config("elastic-implicit"))); };
  auto still = make(), moving = make();
  std::vector<float> a(rig->positions.size()), b(rig->positions.size());
  double b_moved = 0;
  for (double bend : {0.0, 30.0, 60.0, 90.0, 120.0}) {
    const Pose limb_a = LimbPose(f.rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend, .twist_degrees = bend / 3});
    const Pose limb_b = LimbPose(f.rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend / 3, .twist_degrees = 0});
    const Pose pose_still = testing::TwoLimbsPose(rig->skeleton, limb_a, RestPose(f.rig->skeleton));
    const Pose pose_moving = testing::TwoLimbsPose(rig->skeleton, limb_a, limb_b);
    ASSERT_TRUE(still->Deform({&pose_still, {}}, a, &f.pool).ok());
    ASSERT_TRUE(moving->Deform({&pose_moving, {}}, b, &f.pool).ok());
    size_t differ = 0;
    for (size_t k = 0; k < 3 * n; ++k) differ += a[k] != b[k];
    EXPECT_EQ(differ, 0u) << "limb A's coordinates that differ at " << bend << "°";
    b_moved = std::max(b_moved, testing::MaxAbsDiff(std::span<const float>(a).subspan(3 * n),
                                                    std::span<const float>(b).subspan(3 * n)));
  }
  EXPECT_GT(b_moved, 0.1) << "limb B bent";
}

// A closed part wound the other way on its own (exported mirrored) gets the same fields as wound
// outward (core/geometry PieceFacing): two limbs, the second's triangles reversed, track the same
// points, none of the second's taken for skin inside the rest skin, and bend as the outward pair
// does (to the sampling of the surface, whose corners are taken in the other order: 0.019 radii).
// Until 2026-12-07 the whole mesh's sign was taken for every part: the reversed limb's fields
// were inside out, 2 816 of its points "inside the rest skin", and a review measured a skin 0.47
// off at 120° on two capped tubes.
TEST(ImplicitSkinning, APartWoundTheOtherWayOnItsOwnGetsOutwardFields) {
  Fixture& f = F();
  const size_t n = f.rig->vertex_count();
  const Rig outward = testing::TwoLimbs(*f.rig, 4.f);
  Rig reversed = outward;
  for (size_t t = f.rig->triangles.size(); t + 2 < reversed.triangles.size(); t += 3) {
    std::swap(reversed.triangles[t + 1], reversed.triangles[t + 2]);
  }
  std::vector<std::vector<float>> out;
  std::vector<size_t> tracked, hidden;
  for (const Rig* r : {&outward, static_cast<const Rig*>(&reversed)}) {
    auto rig = std::make_shared<const Rig>(*r);
    auto prepared = PrepareImplicit(*rig, Config("implicit"), &f.pool, {});
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    const auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
    tracked.push_back(size_t(std::count(model->in_field.begin(), model->in_field.end(), 1)));
    hidden.push_back(model->hidden_nodes);
    auto d = CreateImplicitDeformer(rig, model, Config("implicit"));
    ASSERT_TRUE(d.ok()) << d.status();
    const Pose limb = LimbPose(f.rig->skeleton, 0.5, LimbMotion{.bend_degrees = 90, .twist_degrees = 0});
    const Pose pose = testing::TwoLimbsPose(rig->skeleton, limb, limb);
    std::vector<float> o(rig->positions.size());
    ASSERT_TRUE((*d)->Deform({&pose, {}}, o, &f.pool).ok());
    out.push_back(std::move(o));
  }
  const double radius = TwoBoneLimbOptions().radius;
  const double b_apart = testing::MaxAbsDiff(std::span<const float>(out[0]).subspan(3 * n),
                                             std::span<const float>(out[1]).subspan(3 * n)) / radius;
  std::printf("tracked %zu / %zu, hidden %zu / %zu; the reversed limb at 90 degrees %.2e radii from the outward one\n",
              tracked[0], tracked[1], hidden[0], hidden[1], b_apart);
  EXPECT_EQ(tracked[1], tracked[0]);
  EXPECT_EQ(hidden[1], hidden[0]);
  EXPECT_LT(b_apart, 0.05);
}

// A sheared inverse bind is refused before the fields are fitted, by both methods, as dqs (their
// start) refuses it: until 2026-12-07 only the deformer refused, after a preparation that was
// kept on the rig and that no session could use (minutes and gigabytes at 4 096 fields).
TEST(ImplicitSkinning, AShearedInverseBindIsRefusedBeforePreparing) {
  RigInput in = MakeLimb(testing::TwoBoneLimb());
  in.rig.skeleton.inverse_bind.assign(in.rig.skeleton.parents.size(), IdentityAffine());
  in.rig.skeleton.inverse_bind[1](0, 1) = 0.02;  // a 2 % shear
  const Rig rig = testing::BuildOrDie(std::move(in));
  ASSERT_FALSE(rig.skeleton.inverse_bind_is_similarity);
  for (const char* method : {"implicit", "elastic-implicit"}) {
    bool progressed = false;
    const auto st = PrepareImplicit(rig, Config(method), nullptr, [&](double) {
                      progressed = true;
                      return true;
                    }).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << method << ": " << st;
    EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("use lbs")) << method;
    EXPECT_FALSE(progressed) << method << ": refused after preparing";
  }
}

TEST(ImplicitSkinning, ElasticComponentsRelaxedSideBySideGiveTheBitsOfOneThread) {
  // A mesh whose components are each at most half of it relaxes them side by side on the pool,
  // one per thread (Relax; since 2026-12-01, for BCN_Epileptic's six); every sum is still added
  // in the device program's order, so the two limbs bending 0° → 120° (B a third as far) come out
  // bit for bit as on one thread, frame after frame (each frame starts from the last).
  Fixture& f = F();
  ASSERT_GT(f.pool.workers(), 0u);
  auto rig = std::make_shared<const Rig>(testing::TwoLimbs(*f.rig, 4.f));
  auto prepared = PrepareImplicit(*rig, Config("elastic-implicit"), &f.pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
  ASSERT_EQ(model->component_offsets.size(), 3u) << "two components";
  auto make = [&] { return std::move(*CreateImplicitDeformer(rig, model, Config("elastic-implicit"))); };
  auto threaded = make(), alone = make();
  std::vector<float> a(rig->positions.size()), b(rig->positions.size()), rest = rig->positions;
  for (double bend : {30.0, 60.0, 90.0, 120.0}) {
    const Pose limb_a = LimbPose(f.rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend, .twist_degrees = bend / 3});
    const Pose limb_b = LimbPose(f.rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend / 3, .twist_degrees = 0});
    const Pose pose = testing::TwoLimbsPose(rig->skeleton, limb_a, limb_b);
    ASSERT_TRUE(threaded->Deform({&pose, {}}, a, &f.pool).ok());
    ASSERT_TRUE(alone->Deform({&pose, {}}, b, nullptr).ok());
    size_t differ = 0;
    for (size_t k = 0; k < a.size(); ++k) differ += std::memcmp(&a[k], &b[k], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << "coordinates that differ at " << bend << "°";
  }
  EXPECT_GT(testing::MaxAbsDiff(a, rest), 0.1) << "the limbs bent";
}

// The relaxation's step rule (implicit_device::RelaxStepFraction, NextTrust; shared by the CPU
// and the device): on an energy that is a parabola along the step it lands on the minimum, and
// both are continuous in their inputs, so that no rounding of E flips a decision (the Armijo
// line search they replaced accepted or rejected trials; BCN_Epileptic moved by 3.3e-2 of its
// diagonal under 1e-6 rad turns with it).
TEST(ImplicitSkinning, RelaxationStepIsTheParabolasMinimumAndContinuous) {
  using implicit_device::kMaxTrust;
  using implicit_device::kMinStepFraction;
  using implicit_device::NextTrust;
  using implicit_device::RelaxStepFraction;
  // E(a) = 2 − a + 2a²: minimum at a = 1/4.
  EXPECT_NEAR(RelaxStepFraction(2.0, -1.0, 3.0), 0.25f, 1e-7);
  // Flat or concave along the step: the whole step; very curved: the shortest; NaN: the shortest.
  EXPECT_EQ(RelaxStepFraction(2.0, -1.0, 1.0), 1.f);
  EXPECT_EQ(RelaxStepFraction(2.0, -1.0, 0.5), 1.f);
  EXPECT_EQ(RelaxStepFraction(2.0, -1.0, 1e6), kMinStepFraction);
  EXPECT_EQ(RelaxStepFraction(2.0, -1.0, std::nan("")), kMinStepFraction);
  // Continuous through both clamps: E at the full step swept finely from below E + slope (a = 1)
  // to far above it (a = 1/16); no jump larger than the sweep's own slope allows.
  float prev = RelaxStepFraction(2.0, -1.0, 0.9);
  double largest_jump = 0;
  for (double e1 = 0.9; e1 < 12.0; e1 += 1e-5) {
    const float a = RelaxStepFraction(2.0, -1.0, e1);
    largest_jump = std::max(largest_jump, double(std::abs(a - prev)));
    EXPECT_GE(a, kMinStepFraction);
    EXPECT_LE(a, 1.f);
    prev = a;
  }
  EXPECT_LT(largest_jump, 1e-4);
  // The caps' trust: ×2 after a full step up to kMaxTrust, unchanged at a = 1/3, never below 1.
  EXPECT_EQ(NextTrust(1.f, 1.f), 2.f);
  EXPECT_EQ(NextTrust(2.f, 1.f), kMaxTrust);
  EXPECT_NEAR(NextTrust(1.5f, 1.f / 3), 1.5f, 1e-6);
  EXPECT_EQ(NextTrust(1.f, kMinStepFraction), 1.f);
  float t_prev = NextTrust(1.6f, 0.f);
  double trust_jump = 0;
  for (float a = 0; a <= 1.f; a += 1e-5f) {
    const float t = NextTrust(1.6f, a);
    trust_jump = std::max(trust_jump, double(std::abs(t - t_prev)));
    t_prev = t;
  }
  EXPECT_LT(trust_jump, 1e-4);
}

// The per-node trust of a relaxation still running after kNodeTrustRound rounds (NodeStepModel,
// NextNodeTrust; shared by the CPU and the device): the model of a node's field terms along its
// step is exact where the field and the own-side depth are linear and the hinge stays on, so the
// trust grows there (×1.5, at most 1); where the terms rose beyond the model (a hinge that
// switched on within the step, BCN_Epileptic's legs at the leg's highest raise) it falls, never
// below kNodeTrustFloor; and it is continuous in what it reads, so that no rounding flips it.
TEST(ImplicitSkinning, NodeTrustFallsWhereTheFieldTermsLeaveTheirModelAndIsContinuous) {
  using implicit_device::kNodeTrustFloor;
  using implicit_device::NextNodeTrust;
  using implicit_device::NodeStepModel;
  // ½ k (c + g·d)² + ½ k γ (h + ∇h·d)², h < 0 throughout: exactly quadratic in d.
  const float k = 3.f, c = 0.2f, gamma = 0.7f, h = -0.05f;
  const float g[3] = {0.5f, -1.f, 2.f}, dh[3] = {-1.f, 0.25f, 0.5f}, d[3] = {0.01f, 0.02f, -0.005f};
  const float gh[3] = {gamma * h * dh[0], gamma * h * dh[1], gamma * h * dh[2]};
  const float cm[6] = {gamma * dh[0] * dh[0], gamma * dh[0] * dh[1], gamma * dh[0] * dh[2],
                       gamma * dh[1] * dh[1], gamma * dh[1] * dh[2], gamma * dh[2] * dh[2]};
  auto energy = [&](double s) {
    const double gd = s * (double(g[0]) * d[0] + double(g[1]) * d[1] + double(g[2]) * d[2]);
    const double hd = s * (double(dh[0]) * d[0] + double(dh[1]) * d[1] + double(dh[2]) * d[2]);
    const double hs = std::min(0.0, h + hd);
    return 0.5 * k * ((c + gd) * (c + gd) + gamma * hs * hs);
  };
  double predicted = 0, size = 0;
  NodeStepModel(k, c, g, gh, cm, d, &predicted, &size);
  EXPECT_NEAR(predicted, energy(1) - energy(0), 1e-6 * size);
  EXPECT_GT(size, std::abs(predicted) / 2);
  EXPECT_FLOAT_EQ(NextNodeTrust(0.5f, energy(0), energy(1), predicted, size), 0.75f) << "as modelled: ×1.5";
  EXPECT_FLOAT_EQ(NextNodeTrust(0.8f, energy(0), energy(1), predicted, size), 1.f) << "at most 1";
  EXPECT_FLOAT_EQ(NextNodeTrust(0.5f, energy(0), energy(1) - size, predicted, size), 0.75f)
      << "a fall beyond the model is no reason to shorten";
  // A rise beyond the model by r × its size: × (1.5 − ½ r).
  EXPECT_NEAR(NextNodeTrust(1.f, energy(0), energy(1) + 2 * size, predicted, size), 0.5f, 1e-5);
  EXPECT_FLOAT_EQ(NextNodeTrust(1.f, energy(0), energy(1) + 100 * size, predicted, size), kNodeTrustFloor);
  EXPECT_FLOAT_EQ(NextNodeTrust(kNodeTrustFloor, energy(0), energy(1) + 100 * size, predicted, size), kNodeTrustFloor);
  // Continuous in the energy after the step.
  double jump = 0;
  float previous = NextNodeTrust(0.6f, energy(0), energy(1), predicted, size);
  for (int s = 1; s <= 40000; ++s) {
    const float t = NextNodeTrust(0.6f, energy(0), energy(1) + 1e-4 * s * size, predicted, size);
    jump = std::max(jump, double(std::abs(t - previous)));
    previous = t;
  }
  EXPECT_LT(jump, 1e-4);
  EXPECT_FLOAT_EQ(previous, kNodeTrustFloor);
}

// Elastic sessions asking for the bone heat rotation weights.
ImplicitConfig Harmonic() {
  ImplicitConfig c;
  c.rotation_weights = RotationWeights::kHarmonic;
  return c;
}

// The elastic method's harmonic rotation weights (bone heat, spec §2.8.2): a partition of unity
// per node, at most kMaxRotationWeights each, and along the limb the child bone's weight rises
// from 0 at the root to 1 at the end, monotonically through the joint (averaged over slices
// across the axis; the limb lies along x).
TEST(ImplicitSkinning, BoneHeatWeightsAreAPartitionOfUnityThatRisesAcrossTheJoint) {
  Fixture& f = F();
  auto model = f.Model(Config("elastic-implicit", Harmonic()));
  const NodeWeights& h = model->heat;
  const size_t nn = model->node_count();
  ASSERT_EQ(h.offsets.size(), nn + 1);
  int32_t child = -1;
  for (size_t j = 0; j < f.rig->joint_count(); ++j) {
    if (f.rig->skeleton.names[j] == "bone1") child = int32_t(j);
  }
  ASSERT_GE(child, 0);
  double lo = 1e300, hi = -1e300;
  for (size_t i = 0; i < nn; ++i) {
    lo = std::min(lo, double(model->rest[3 * i]));
    hi = std::max(hi, double(model->rest[3 * i]));
  }
  constexpr int kSlices = 24;
  double sum[kSlices] = {}, count[kSlices] = {};
  for (size_t i = 0; i < nn; ++i) {
    const uint32_t e0 = h.offsets[i], e1 = h.offsets[i + 1];
    ASSERT_GE(e1 - e0, 1u) << "node " << i;
    ASSERT_LE(e1 - e0, uint32_t(kMaxRotationWeights)) << "node " << i;
    double total = 0, w_child = 0;
    for (uint32_t e = e0; e < e1; ++e) {
      EXPECT_GT(h.weights[e], 0.f) << "node " << i;
      EXPECT_LE(h.weights[e], 1.f) << "node " << i;
      total += h.weights[e];
      if (h.joints[e] == child) w_child += h.weights[e];
    }
    EXPECT_NEAR(total, 1.0, 1e-5) << "node " << i;
    const int s = std::min(kSlices - 1, int((model->rest[3 * i] - lo) / (hi - lo) * kSlices));
    sum[s] += w_child;
    count[s] += 1;
  }
  ASSERT_GT(count[0], 0);
  ASSERT_GT(count[kSlices - 1], 0);
  EXPECT_LT(sum[0] / count[0], 0.02) << "near the root";
  EXPECT_GT(sum[kSlices - 1] / count[kSlices - 1], 0.98) << "at the end";
  double previous = -1;
  for (int s = 0; s < kSlices; ++s) {
    if (count[s] == 0) continue;
    const double mean = sum[s] / count[s];
    std::printf("slice %2d: child bone's heat weight %.3f (%g nodes)\n", s, mean, count[s]);
    EXPECT_GE(mean, previous - 1e-3) << "slice " << s;
    previous = mean;
  }
}

// BP07's visibility test: a node takes its heat from the nearest bone it can see. A thick
// "torso" tube (radius 1) with a thin "arm" tube (radius 0.2) hanging 0.1 beside it, each with
// two bones along its axis: the torso's skin facing the arm is nearer the arm's axis (0.3) than
// its own (1), but the arm's skin lies between. Every torso node must draw (almost) nothing from
// the arm's bones, and the fixture must have such nodes.
TEST(ImplicitSkinning, BoneHeatComesFromTheNearestVisibleBone) {
  LimbOptions torso_options = TwoBoneLimbOptions(), arm_options = TwoBoneLimbOptions();
  torso_options.radius = 1.0f;
  torso_options.rings = 30;
  torso_options.segments = 48;
  arm_options.radius = 0.2f;
  arm_options.rings = 30;
  arm_options.segments = 16;
  RigInput in = MakeLimb(torso_options);
  const RigInput arm = MakeLimb(arm_options);
  const uint32_t torso_vertices = uint32_t(in.rig.positions.size() / 3), torso_joints = uint32_t(in.rig.skeleton.size());
  for (size_t v = 0; v < arm.rig.positions.size() / 3; ++v) {
    in.rig.positions.insert(in.rig.positions.end(),
                            {arm.rig.positions[3 * v], arm.rig.positions[3 * v + 1] + 1.3f, arm.rig.positions[3 * v + 2]});
    in.rig.normals.insert(in.rig.normals.end(), {arm.rig.normals[3 * v], arm.rig.normals[3 * v + 1], arm.rig.normals[3 * v + 2]});
  }
  for (uint32_t t : arm.rig.triangles) in.rig.triangles.push_back(t + torso_vertices);
  for (size_t j = 0; j < arm.rig.skeleton.size(); ++j) {
    in.rig.skeleton.names.push_back("arm" + std::to_string(j));
    in.rig.skeleton.parents.push_back(arm.rig.skeleton.parents[j] < 0 ? -1 : arm.rig.skeleton.parents[j] + int32_t(torso_joints));
    Similarity rest = arm.rig.skeleton.rest_local[j];
    if (arm.rig.skeleton.parents[j] < 0) rest.translation += Eigen::Vector3d(0, 1.3, 0);
    in.rig.skeleton.rest_local.push_back(rest);
  }
  const uint32_t base = in.weights.offsets.back();
  for (size_t v = 1; v < arm.weights.offsets.size(); ++v) in.weights.offsets.push_back(base + arm.weights.offsets[v]);
  for (uint32_t j : arm.weights.joints) in.weights.joints.push_back(j + torso_joints);
  in.weights.weights.insert(in.weights.weights.end(), arm.weights.weights.begin(), arm.weights.weights.end());
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(std::move(in)));
  ThreadPool pool(2);
  auto prepared = PrepareImplicit(*rig, Config("elastic-implicit", Harmonic()), &pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const auto& model = dynamic_cast<const ImplicitModel&>(**prepared);
  size_t facing = 0;
  double worst = 0;
  for (uint32_t v = 0; v < torso_vertices; ++v) {
    const size_t i = model.node_of_vertex[v];
    const double y = model.rest[3 * i + 1], z = model.rest[3 * i + 2];
    if (std::hypot(y - 1.3, z) < std::hypot(y, z)) ++facing;  // nearer the arm's axis than its own
    double from_arm = 0;
    for (uint32_t e = model.heat.offsets[i]; e < model.heat.offsets[i + 1]; ++e) {
      if (model.heat.joints[e] >= torso_joints) from_arm += model.heat.weights[e];
    }
    worst = std::max(worst, from_arm);
  }
  std::printf("%zu torso nodes nearer the arm's axis than their own; largest arm heat on the torso %.4f\n", facing, worst);
  EXPECT_GT(facing, 30u) << "the fixture must have torso skin nearer the arm's bones";
  EXPECT_LT(worst, 0.01);
}

// Spec §2.8.2 (the thesis, Fig. 4.21): the rotations' weights change the tangential distribution of the
// vertices, never the shape, which the implicit surface fixes. The limb bent in 15° steps with
// skinning and with harmonic weights: every vertex of one result lies on the other's surface
// (distance to its nearest triangle) within a small fraction of the mean edge, while vertices
// slide along it by more.
TEST(ImplicitSkinning, ElasticRotationWeightsSlideTheSkinAlongItsSurface) {
  Fixture& f = F();
  auto model = f.Model(Config("elastic-implicit", Harmonic()));  // serves both choices
  auto a = f.Make(Config("elastic-implicit"), model);
  auto b = f.Make(Config("elastic-implicit", Harmonic()), model);
  for (int k = 1; k <= 8; ++k) {
    const Pose pose = f.Bent(15.0 * k);
    const auto out_a = f.Run(*a, pose), out_b = f.Run(*b, pose);
    const RayCaster surface_a(out_a, f.rig->triangles);
    double off = 0, off_mean = 0, slide = 0;
    for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
      const double x[3] = {out_b[3 * v], out_b[3 * v + 1], out_b[3 * v + 2]};
      const double d = surface_a.Nearest(x, [](uint32_t) { return false; });
      off = std::max(off, d);
      off_mean += d / double(f.rig->vertex_count());
      double m2 = 0;
      for (int c = 0; c < 3; ++c) m2 += std::pow(double(out_b[3 * v + c]) - out_a[3 * v + c], 2);
      slide = std::max(slide, std::sqrt(m2));
    }
    std::printf("%3d°: harmonic vs skinning weights: off the surface max %.3f, mean %.4f mean edges; "
                "vertex moves up to %.3f mean edges\n",
                15 * k, off / model->mean_edge, off_mean / model->mean_edge, slide / model->mean_edge);
    EXPECT_LT(off, 0.25 * model->mean_edge) << 15 * k << "°";
  }
}

// A host that runs the deformer on a device frees the CPU-only scratch (StateBytes drops by
// the per-node arrays); the CPU path still works afterwards: the history-independent method
// gives the same frame, the elastic one starts again from the rest state.
TEST(ImplicitSkinning, RunsOnDeviceFreesTheCpuScratch) {
  Fixture& f = F();
  for (const std::string& m : {std::string("implicit"), std::string("elastic-implicit")}) {
    auto model = f.Model(Config(m));
    auto d = f.Make(Config(m), model);
    const Pose pose = f.Bent(m == "implicit" ? 100 : 30);
    const auto before = f.Run(*d, pose);
    const size_t full = d->StateBytes();
    d->RunsOnDevice();
    EXPECT_LT(d->StateBytes() + 60 * model->node_count(), full) << m;
    std::vector<uint8_t> states;
    EXPECT_EQ(d->Extras({.vertex_states = &states}).code(), absl::StatusCode::kFailedPrecondition);
    auto fresh = f.Make(Config(m), model);
    const auto again = f.Run(*d, pose, &states);
    EXPECT_EQ(states.size(), f.rig->vertex_count());
    EXPECT_EQ(again, m == "implicit" ? before : f.Run(*fresh, pose)) << m;
  }
}

TEST(ImplicitSkinning, PiecesThinnerThanTheLimitKeepTheInitialSkinning) {
  // ImplicitConfig::min_field_radius: a node whose own field's support radius is below that
  // fraction of the rig's mean is not tracked and comes out as dual quaternion skinning; the
  // others are tracked as with no limit. The limb's forearm widens to 0.4 at the wrist (a
  // field's support radius is its samples' largest distance from the bone, so the upper arm's,
  // 0.25, is the thinner) and the limit is set between the two pieces' radii.
  Fixture f;
  LimbOptions tapered = testing::TwoBoneLimb();
  tapered.end_radius = 0.4f;
  f.rig = std::make_shared<Rig>(testing::BuildOrDie(MakeLimb(tapered)));
  ImplicitConfig every;
  every.min_field_radius = 0;
  const auto all = f.Model(Config("elastic-implicit", every));
  ASSERT_GE(all->fields.size(), 2u);
  double mean = 0, lo = 1e300, hi = 0;
  for (const BoneField& b : all->fields) {
    mean += b.radius / all->fields.size();
    lo = std::min(lo, b.radius);
    hi = std::max(hi, b.radius);
  }
  ASSERT_GT(hi, 1.05 * lo) << "the limb's pieces must differ in thickness for this test";
  ImplicitConfig limited;
  limited.min_field_radius = (lo + hi) / 2 / mean;
  const auto thin = f.Model(Config("elastic-implicit", limited));
  size_t dropped = 0;
  for (size_t i = 0; i < thin->node_count(); ++i) {
    const int32_t own = all->own_leaf[i];
    const bool too_thin = own >= 0 && all->fields[own].radius < limited.min_field_radius * mean;
    EXPECT_EQ(thin->in_field[i], all->in_field[i] && !too_thin) << "node " << i;
    dropped += all->in_field[i] && too_thin;
  }
  EXPECT_GT(dropped, 0u);
  const Pose pose = f.Bent(90);
  const auto dqs = f.Skin("dqs", pose);
  auto thin_d = f.Make(Config("elastic-implicit", limited), thin);
  auto all_d = f.Make(Config("elastic-implicit", every), all);
  const auto out_thin = f.Run(*thin_d, pose), out_all = f.Run(*all_d, pose);
  double untracked_off_dqs = 0, tracked_off_dqs = 0;
  for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
    const uint32_t i = thin->node_of_vertex[v];
    if (thin->in_field[i] || !all->in_field[i]) continue;
    for (int c = 0; c < 3; ++c) {
      untracked_off_dqs = std::max(untracked_off_dqs, double(std::abs(out_thin[3 * v + c] - dqs[3 * v + c])));
      tracked_off_dqs = std::max(tracked_off_dqs, double(std::abs(out_all[3 * v + c] - dqs[3 * v + c])));
    }
  }
  std::printf("limit %.3f of the mean radius: %zu nodes untracked; they move %.2e from DQS (%.3f mean edges "
              "when tracked)\n",
              limited.min_field_radius, dropped, untracked_off_dqs, tracked_off_dqs / all->mean_edge);
  EXPECT_LE(untracked_off_dqs, 1e-5 * f.Diagonal());
  EXPECT_GT(tracked_off_dqs, 0.05 * all->mean_edge) << "tracked, the same nodes leave DQS at 90°";
}

// Skin inside the rest skin (a mesh overlapping another: BCN_Epileptic's legs reach into its
// body) is not tracked (PrepareImplicit, 2026-12-06): nobody sees it, and tracked it folded
// BCN's throat into its head. The skin around it carries it (FollowPosition): kept on DQS, skin
// pressed in by a contact passed it (BCN's chest under its chin) and more of it came out than
// under DQS. A second tube inside the limb at 0.9 of its radius, skinned to the same bones: none
// of its nodes is tracked and the preparation says how many it left; bent in 15° steps to 150°,
// at most a twentieth as many of its vertices end outside the outer tube (winding number of the
// outer tube's triangles) as on DQS beside the tracked outer tube (6 against 166 at 150°, in the
// crease), and under the history-independent method at 60°–120° (0–3 against 65–153); the outer
// tube is tracked as without it. A session state saved by a preparation that
// tracked them loads.
TEST(ImplicitSkinning, SkinInsideTheRestSkinStaysInsideAsTheSkinAroundItMoves) {
  Fixture& f = F();
  const Rig& limb = *f.rig;
  const size_t n = limb.vertex_count();
  const float scale = 0.9f;  // the inner tube's radius, of the limb's
  RigInput in;
  in.rig.positions = limb.positions;
  for (size_t v = 0; v < n; ++v) {
    in.rig.positions.insert(in.rig.positions.end(), {1.5f + 0.9f * (limb.positions[3 * v] - 1.5f),
                                                     scale * limb.positions[3 * v + 1], scale * limb.positions[3 * v + 2]});
  }
  in.rig.triangles = limb.triangles;
  for (uint32_t t : limb.triangles) in.rig.triangles.push_back(t + uint32_t(n));
  in.rig.skeleton = limb.skeleton;
  in.weights.offsets.assign(1, 0);
  for (int copy = 0; copy < 2; ++copy) {
    for (size_t v = 0; v < n; ++v) {
      for (uint32_t e = limb.weights.offsets[v]; e < limb.weights.offsets[v + 1]; ++e) {
        in.weights.joints.push_back(limb.weights.joints[e]);
        in.weights.weights.push_back(limb.weights.weights[e]);
      }
      in.weights.offsets.push_back(uint32_t(in.weights.joints.size()));
    }
  }
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(std::move(in)));
  auto prepared = PrepareImplicit(*rig, Config("elastic-implicit"), &f.pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
  size_t outer_tracked = 0, inner_tracked = 0;
  for (size_t v = 0; v < 2 * n; ++v) (v < n ? outer_tracked : inner_tracked) += model->in_field[model->node_of_vertex[v]];
  std::printf("outer tube: %zu of %zu vertices tracked; inner tube: %zu; %s\n", outer_tracked, n, inner_tracked,
              model->Summary().c_str());
  EXPECT_EQ(inner_tracked, 0u);
  EXPECT_GT(outer_tracked, n * 9 / 10);
  EXPECT_GT(model->hidden_nodes, n / 2) << "the inner tube's nodes were trackable but for being hidden";
  EXPECT_NE(model->Summary().find("inside the rest skin move with the skin around them"), std::string::npos)
      << model->Summary();
  DeformerConfig dqs_config;
  dqs_config.method = "dqs";
  auto dqs = CreateDeformer(rig, dqs_config, &f.pool);
  ASSERT_TRUE(dqs.ok()) << dqs.status();
  auto elastic = CreateImplicitDeformer(rig, model, Config("elastic-implicit"));
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  const std::span<const uint32_t> outer_triangles(rig->triangles.data(), limb.triangles.size());
  std::vector<float> a(rig->positions.size()), b(rig->positions.size());
  // How many of the inner tube's vertices in `p` lie outside the method's outer tube (`skin`'s
  // first n vertices), by the winding number of its triangles.
  auto outside = [&](const std::vector<float>& skin, const std::vector<float>& p) {
    const WindingNumberTree outer(std::span<const float>(skin).first(3 * n), outer_triangles);
    size_t count = 0;
    for (size_t v = n; v < 2 * n; ++v) count += outer(Eigen::Vector3d(p[3 * v], p[3 * v + 1], p[3 * v + 2])) < 0.5;
    return count;
  };
  size_t worst_out = 0, worst_out_on_dqs = 0;
  double moved = 0;
  for (int k = 1; k <= 10; ++k) {
    const double bend = 15.0 * k;
    const Pose pose = LimbPose(rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend, .twist_degrees = 0});
    ASSERT_TRUE((*dqs)->Deform({&pose, {}}, a, &f.pool).ok());
    ASSERT_TRUE((*elastic)->Deform({&pose, {}}, b, &f.pool).ok());
    const size_t out = outside(b, b), out_on_dqs = outside(b, a);
    for (size_t c = 3 * n; c < 6 * n; ++c) moved = std::max(moved, double(std::abs(b[c] - a[c])));
    std::printf("bend %3.0f°: %zu inner vertices outside the outer tube (%zu left on DQS)\n", bend, out, out_on_dqs);
    // Measured: 0 0 0 0 1 2 2 2 3 6 (DQS 0 0 23 67 91 115 129 140 153 166).
    EXPECT_LE(20 * out, out_on_dqs) << "bend " << bend;
    worst_out = std::max(worst_out, out);
    worst_out_on_dqs = std::max(worst_out_on_dqs, out_on_dqs);
  }
  EXPECT_LE(worst_out, 8u);
  EXPECT_GT(worst_out_on_dqs, 100u) << "on DQS the inner tube stays inside too: the test cannot fail";
  EXPECT_GT(moved, 0.05 * model->mean_edge) << "the inner tube moved off DQS";
  // The history-independent method carries it the same way (its own output path).
  auto history_free = CreateImplicitDeformer(rig, model, Config("implicit"));
  ASSERT_TRUE(history_free.ok()) << history_free.status();
  for (double bend : {60.0, 90.0, 120.0}) {
    const Pose pose = LimbPose(rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend, .twist_degrees = 0});
    ASSERT_TRUE((*dqs)->Deform({&pose, {}}, a, &f.pool).ok());
    ASSERT_TRUE((*history_free)->Deform({&pose, {}}, b, &f.pool).ok());
    const size_t out = outside(b, b), out_on_dqs = outside(b, a);
    std::printf("implicit, bend %3.0f°: %zu inner vertices outside the outer tube (%zu left on DQS)\n", bend, out, out_on_dqs);
    EXPECT_GT(out_on_dqs, 50u) << "bend " << bend;
    EXPECT_LE(20 * out, out_on_dqs) << "bend " << bend;
  }

  // A session state saved before 2026-12-06, by a preparation that tracked the inner tube (this
  // one with its hidden nodes tracked and following nothing), loads (it was refused, and a
  // server upgraded under --state-dir started such sessions again from rest): the outer tube, a
  // component of its own, goes on with the bits of a session that had this preparation all
  // along, and so the inner tube, which follows it.
  auto before = std::make_shared<ImplicitModel>(*model);
  size_t retracked = 0;
  for (size_t v = n; v < 2 * n; ++v) {
    uint8_t& tracked = before->in_field[before->node_of_vertex[v]];
    retracked += !tracked;
    tracked = 1;
  }
  before->hidden_nodes = 0;
  before->follow_offsets.assign(before->node_count() + 1, 0);
  before->follow_source.clear();
  before->follow_weight.clear();
  before->follow_sources.clear();
  auto old_session = CreateImplicitDeformer(rig, before, Config("elastic-implicit"));
  ASSERT_TRUE(old_session.ok()) << old_session.status();
  auto now_session = CreateImplicitDeformer(rig, model, Config("elastic-implicit"));
  ASSERT_TRUE(now_session.ok()) << now_session.status();
  for (double bend : {30.0, 60.0, 90.0}) {
    const Pose p = LimbPose(rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend, .twist_degrees = 0});
    ASSERT_TRUE((*old_session)->Deform({&p, {}}, a, &f.pool).ok());
    ASSERT_TRUE((*now_session)->Deform({&p, {}}, b, &f.pool).ok());
  }
  EXPECT_GT(testing::MaxAbsDiff(std::span<const float>(a).subspan(3 * n), std::span<const float>(b).subspan(3 * n)),
            0.05 * model->mean_edge)
      << "tracked, the inner tube goes elsewhere: the saved state differs from this preparation's";
  const auto saved = (*old_session)->SaveState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  auto upgraded = CreateImplicitDeformer(rig, model, Config("elastic-implicit"));
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  ASSERT_TRUE((*upgraded)->LoadState(*saved).ok()) << (*upgraded)->LoadState(*saved);
  std::vector<float> c(rig->positions.size());
  for (double bend : {120.0, 60.0}) {
    const Pose p = LimbPose(rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend, .twist_degrees = 0});
    ASSERT_TRUE((*upgraded)->Deform({&p, {}}, c, &f.pool).ok());
    ASSERT_TRUE((*now_session)->Deform({&p, {}}, b, &f.pool).ok());
    EXPECT_EQ(testing::MaxAbsDiff(b, c), 0.0) << "bend " << bend << ": as a session of this preparation";
  }
  EXPECT_GT(retracked, n / 2);
}

TEST(ImplicitSkinning, Validation) {
  Fixture& f = F();
  ImplicitConfig ic;
  ic.joint_operators = {{7, JointOperator::kBulge}};
  DeformerConfig c = Config("implicit", ic);
  EXPECT_EQ(PrepareImplicit(*f.rig, c, nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);
  ic.joint_operators = {{1, JointOperator::kBulge}, {1, JointOperator::kUnion}};
  c = Config("implicit", ic);
  EXPECT_EQ(PrepareImplicit(*f.rig, c, nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);
  ImplicitConfig zero_sigma;
  zero_sigma.sigma = 0;
  c = Config("implicit", zero_sigma);
  auto model = f.Model(Config("implicit"));
  EXPECT_EQ(CreateImplicitDeformer(f.rig, model, c).status().code(), absl::StatusCode::kInvalidArgument);
  // Operator choices are part of the preparation key; equal choices give equal keys.
  DeformerConfig a = Config("implicit"), b = Config("elastic-implicit");
  EXPECT_EQ(ImplicitKey(a), ImplicitKey(b));
  ImplicitConfig bulge_at_1;
  bulge_at_1.joint_operators = {{1, JointOperator::kBulge}};
  b = Config("elastic-implicit", bulge_at_1);
  EXPECT_NE(ImplicitKey(a), ImplicitKey(b));
  // So is the choice of harmonic rotation weights, which only such a preparation computes: a
  // session asking for them refuses a model prepared without.
  EXPECT_NE(ImplicitKey(Config("elastic-implicit")), ImplicitKey(Config("elastic-implicit", Harmonic())));
  EXPECT_TRUE(model->heat.offsets.empty());
  EXPECT_EQ(CreateImplicitDeformer(f.rig, model, Config("elastic-implicit", Harmonic())).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // So is the thin-piece limit; a session whose limit differs from its preparation's, or is out
  // of [0, 1], is refused, and the parser names the field.
  ImplicitConfig all_pieces;
  all_pieces.min_field_radius = 0;
  EXPECT_NE(ImplicitKey(Config("elastic-implicit")), ImplicitKey(Config("elastic-implicit", all_pieces)));
  EXPECT_EQ(CreateImplicitDeformer(f.rig, model, Config("elastic-implicit", all_pieces)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // So are sample_triangles (which pieces get fields) and track_sampled_pieces (whether their
  // skin is tracked); the second means nothing without the first.
  ImplicitConfig vertices_only;
  vertices_only.sample_triangles = false;
  ImplicitConfig tracked;
  tracked.track_sampled_pieces = true;
  EXPECT_NE(ImplicitKey(Config("elastic-implicit")), ImplicitKey(Config("elastic-implicit", vertices_only)));
  EXPECT_NE(ImplicitKey(Config("elastic-implicit")), ImplicitKey(Config("elastic-implicit", tracked)));
  EXPECT_EQ(CreateImplicitDeformer(f.rig, model, Config("elastic-implicit", vertices_only)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CreateImplicitDeformer(f.rig, model, Config("elastic-implicit", tracked)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  tracked.sample_triangles = false;
  EXPECT_EQ(ImplicitKey(Config("elastic-implicit", vertices_only)), ImplicitKey(Config("elastic-implicit", tracked)));
  ImplicitConfig too_large;
  too_large.min_field_radius = 1.5;
  EXPECT_EQ(CreateImplicitDeformer(f.rig, model, Config("elastic-implicit", too_large)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ParamSet bad;
  bad.Set("min_field_radius", ParamValue::Number(-0.1));
  const auto parsed = ParseImplicitParams(bad, "implicit");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("implicit.min_field_radius"), std::string_view::npos) << parsed.status();
  // Session settings (not part of the preparation): out-of-range values are refused at session
  // creation, and the parser names the field.
  auto refused = [&](auto setting) {
    ImplicitConfig c;
    setting(c);
    return CreateImplicitDeformer(f.rig, model, Config("elastic-implicit", c)).status().code() ==
           absl::StatusCode::kInvalidArgument;
  };
  auto parser_names = [](const char* field, double value) {
    ParamSet set;
    set.Set(field, ParamValue::Number(value));
    const auto parsed = ParseImplicitParams(set, "implicit");
    return parsed.status().message().find(std::string("implicit.") + field) != std::string_view::npos;
  };
  // The contact gate's opening is in (-0.2, 1] (at -0.2 its ramp would divide by 0).
  for (double open : {-0.2, 1.5, std::nan("")}) {
    EXPECT_TRUE(refused([&](ImplicitConfig& c) { c.contact_gate_open = open; })) << open;
  }
  EXPECT_TRUE(parser_names("contact_gate_open", -0.5));
  // The relaxation's tolerance is in [0, 0.1] (0: every relaxation runs its rounds).
  for (double tolerance : {-1e-3, 0.2, std::nan("")}) {
    EXPECT_TRUE(refused([&](ImplicitConfig& c) { c.relaxation_tolerance = tolerance; })) << tolerance;
  }
  EXPECT_TRUE(parser_names("relaxation_tolerance", 0.5));
  ImplicitConfig settings;
  settings.contact_gate_open = 0.5;
  settings.average_stalled_relaxations = true;
  settings.relaxation_tolerance = 0;
  EXPECT_EQ(ImplicitKey(Config("elastic-implicit")), ImplicitKey(Config("elastic-implicit", settings)));
  EXPECT_TRUE(CreateImplicitDeformer(f.rig, model, Config("elastic-implicit", settings)).ok());
  // A frame without a pose names the field.
  auto d = f.Make(a, model);
  std::vector<float> out(f.rig->positions.size());
  auto st = d->Deform(FrameInput{}, out, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("pose"), std::string::npos);
}

// The elastic relaxation's reductions add each node's term in a fixed order (SumComponents), so
// a frame does not depend on how many threads share its passes: the limb bent in 30° steps and
// then jumping back by 90° gives the same bits with the fixture's pool of 2 and on the calling
// thread alone. The limb has more than 2 048 nodes, so its conjugate gradient runs on the pool
// (a sum whose order followed the split would fail this).
TEST(ImplicitSkinning, ElasticFramesAreTheSameBitsOnOneThreadAndOnAPool) {
  Fixture& f = F();
  auto model = f.Model(Config("elastic-implicit"));
  ASSERT_GE(model->node_count(), 2048u) << "the fixture must be large enough for the pooled conjugate gradient";
  auto pooled = f.Make(Config("elastic-implicit"), model);
  auto alone = f.Make(Config("elastic-implicit"), model);
  for (double degrees : {30.0, 60.0, 90.0, 0.0}) {
    const Pose pose = f.Bent(degrees);
    const std::vector<float> a = f.Run(*pooled, pose), b = f.RunAlone(*alone, pose);
    ASSERT_EQ(a.size(), b.size());
    size_t differ = 0;
    for (size_t k = 0; k < a.size(); ++k) differ += std::memcmp(&a[k], &b[k], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << "at " << degrees << "°";
  }
}

}  // namespace
}  // namespace sinew
