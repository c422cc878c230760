// sinew-implicit-slices: cuts the skin of a bent joint with the bend's plane, for the pictures in
// docs/ (scripts/implicit_slices.py draws them). The fixtures: a capped cylinder (R 0.25, length
// 3, the narrow blend of tests/core/implicit_contact_test.cc) bent at its middle joint and the
// SuperCages Arm (../shared/data/supercages-arm) bent at its elbow, each to 120° and 150°; and
// BCN_Epileptic (assimp-testmodels) bent about the axes its own clip turns its joints about
// (core/procedural/bend.h: ClipBendAxis) — the left knee to 90° and 150°, the left elbow to 150°
// — and its left elbow to 150° in the plane its bones span at rest, as the other fixtures are.
// Each through DQS, implicit and elastic implicit skinning (driven in 10° steps).
//
// Output (stdout or the file given): CSV rows `fixture,method,degrees,x0,y0,x1,y1`, one per
// triangle the plane cuts, in the plane's coordinates (x along the parent bone into the joint,
// y across it, the joint at the origin), in units of the limb's radius. A fixture named
// `picture/row` goes into picture's PNG as the row `row`.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clients/import/asset_import.h"
#include "clients/import/supercages.h"
#include "core/deformer/deformer.h"
#include "core/implicit/implicit_params.h"
#include "core/implicit/implicit_skinning.h"
#include "core/procedural/bend.h"
#include "core/procedural/limb.h"

namespace sinew {
namespace {

struct Fixture {
  std::string name;
  std::shared_ptr<const Rig> rig;
  uint32_t joint = 0, end = 0;  // the bent joint and a joint below it (the Arm, BCN_Epileptic)
  double radius = 1;            // the limb's radius at the joint: the pictures' unit
  std::vector<double> degrees = {120, 150};
  std::optional<Eigen::Vector3d> axis;  // bent about it (BendJointAbout), else in the bones' plane
};

DeformerConfig Config(const std::string& method) {
  DeformerConfig c;
  c.method = method;
  c.params = std::make_shared<ImplicitConfig>();
  return c;
}

// Writes the segments where the plane through `b.pivot` spanned by the two bones cuts the mesh.
void Slice(FILE* out, const Fixture& f, const std::string& method, double degrees, const BentJoint& b,
           const std::vector<float>& p) {
  const Eigen::Vector3d n = b.parent_dir.cross(b.child_dir).normalized();
  const Eigen::Vector3d ex = b.parent_dir, ey = n.cross(ex);
  auto at = [&](uint32_t v) -> Eigen::Vector3d { return Eigen::Vector3d(p[3 * v], p[3 * v + 1], p[3 * v + 2]) - b.pivot; };
  const std::vector<uint32_t>& t = f.rig->triangles;
  for (size_t k = 0; k + 2 < t.size(); k += 3) {
    Eigen::Vector3d x[3];
    double d[3];
    for (int c = 0; c < 3; ++c) {
      x[c] = at(t[k + c]);
      d[c] = n.dot(x[c]);
    }
    Eigen::Vector3d hit[2];
    int hits = 0;
    for (int c = 0; c < 3 && hits < 2; ++c) {
      const int e = (c + 1) % 3;
      if ((d[c] < 0) == (d[e] < 0)) continue;
      hit[hits++] = x[c] + (d[c] / (d[c] - d[e])) * (x[e] - x[c]);
    }
    if (hits < 2) continue;
    std::fprintf(out, "%s,%s,%.0f,%.5f,%.5f,%.5f,%.5f\n", f.name.c_str(), method.c_str(), degrees,
                 hit[0].dot(ex) / f.radius, hit[0].dot(ey) / f.radius, hit[1].dot(ex) / f.radius,
                 hit[1].dot(ey) / f.radius);
  }
}

int Run(FILE* out, const std::string& arm_dir, const std::string& bcn_path) {
  std::vector<Fixture> fixtures;
  {
    auto built = BuildRig(MakeLimb(TwoBoneLimbOptions()));
    if (!built.ok()) return std::fprintf(stderr, "limb: %s\n", std::string(built.status().message()).c_str()), 1;
    // Bent by the limb's own pose (below): joint and end unused.
    fixtures.push_back(Fixture{"cylinder", std::make_shared<const Rig>(std::move(*built)), 0, 0, 0.25, {120, 150}, std::nullopt});
  }
  if (std::filesystem::exists(arm_dir + "/arm.obj")) {
    auto sc = ReadSuperCages(SuperCagesFilesIn(arm_dir, "arm"));
    if (!sc.ok()) return std::fprintf(stderr, "arm: %s\n", std::string(sc.status().message()).c_str()), 1;
    auto built = BuildRig(sc->rig);
    if (!built.ok()) return std::fprintf(stderr, "arm: %s\n", std::string(built.status().message()).c_str()), 1;
    Fixture f{"arm", std::make_shared<const Rig>(std::move(*built)), 0, 0, 5.5, {120, 150}, std::nullopt};  // radius: the contact test's
    for (size_t j = 0; j < f.rig->skeleton.size(); ++j) {
      if (f.rig->skeleton.names[j] == "lowerarm01.R") f.joint = uint32_t(j);
      if (f.rig->skeleton.names[j] == "wrist.R") f.end = uint32_t(j);
    }
    fixtures.push_back(std::move(f));
  } else {
    std::fprintf(stderr, "sinew-implicit-slices: no Arm in %s\n", arm_dir.c_str());
  }
  if (std::filesystem::exists(bcn_path)) {
    auto asset = ImportAsset(bcn_path);
    if (!asset.ok()) return std::fprintf(stderr, "bcn: %s\n", std::string(asset.status().message()).c_str()), 1;
    auto built = BuildRig(asset->rig);
    if (!built.ok() || asset->clips.empty()) return std::fprintf(stderr, "bcn: no rig or no clip\n"), 1;
    auto rig = std::make_shared<const Rig>(std::move(*built));
    auto joint = [&](const std::string& name) {  // the skeleton's size when there is none
      for (size_t j = 0; j < rig->skeleton.size(); ++j) {
        if (rig->skeleton.names[j] == name) return uint32_t(j);
      }
      return uint32_t(rig->skeleton.size());
    };
    // Radii: the contact test's (the median distance of the upper piece's skin from its bone).
    const uint32_t knee = joint("B_Knee_Left"), ankle = joint("B_Ankle_Left");
    const uint32_t elbow = joint("B_ForeArm_Left"), hand = joint("B_Hand_Left");
    auto knee_axis = ClipBendAxis(rig->skeleton, asset->clips[0], knee, ankle);
    auto elbow_axis = ClipBendAxis(rig->skeleton, asset->clips[0], elbow, hand);
    for (const auto* axis : {&knee_axis, &elbow_axis}) {  // (a missing joint is out of range there)
      if (!axis->ok()) return std::fprintf(stderr, "bcn: %s\n", std::string(axis->status().message()).c_str()), 1;
    }
    fixtures.push_back(Fixture{"bcn/left knee about the clip's axis", rig, knee, ankle, 0.0742, {90, 150}, *knee_axis});
    fixtures.push_back(Fixture{"bcn/left elbow about the clip's axis", rig, elbow, hand, 0.0522, {150}, *elbow_axis});
    fixtures.push_back(Fixture{"bcn/left elbow in the rest plane", rig, elbow, hand, 0.0522, {150}, std::nullopt});
  } else {
    std::fprintf(stderr, "sinew-implicit-slices: no %s\n", bcn_path.c_str());
  }
  std::fprintf(out, "fixture,method,degrees,x0,y0,x1,y1\n");
  ThreadPool pool(1);  // one worker and the calling thread
  std::map<const Rig*, std::shared_ptr<const Prepared>> prepared_for;  // one preparation a rig
  for (const Fixture& f : fixtures) {
    auto& prepared = prepared_for[f.rig.get()];
    if (!prepared) {
      auto p = PrepareImplicit(*f.rig, Config("implicit"), &pool, {});
      if (!p.ok()) return std::fprintf(stderr, "%s: %s\n", f.name.c_str(), std::string(p.status().message()).c_str()), 1;
      prepared = std::move(*p);
    }
    // The pose at a bend: the cylinder's own limb pose (a bend about z at its middle joint), the
    // characters' joints turned in the plane of their bones or about the fixture's axis.
    auto pose_at = [&](double deg) -> BentJoint {
      if (f.name == "cylinder") {
        BentJoint b;
        b.pose = LimbPose(f.rig->skeleton, 0.5, LimbMotion{.bend_degrees = deg, .twist_degrees = 0});
        b.pivot = Eigen::Vector3d(1.5, 0, 0);
        b.parent_dir = Eigen::Vector3d::UnitX();
        const double a = deg * M_PI / 180;
        b.child_dir = Eigen::Vector3d(std::cos(a), std::sin(a), 0);
        return b;
      }
      return f.axis ? *BendJointAbout(f.rig->skeleton, f.joint, f.end, deg, *f.axis)
                    : *BendJoint(f.rig->skeleton, f.joint, f.end, deg);
    };
    const double rest = f.name == "cylinder" ? 0.0 : BendJoint(f.rig->skeleton, f.joint, f.end, 0)->rest_degrees;
    for (double deg : f.degrees) {
      const BentJoint b = pose_at(deg);
      for (const std::string method : {"dqs", "implicit", "elastic-implicit"}) {
        std::unique_ptr<Deformer> d;
        if (method == "dqs") {
          DeformerConfig c;
          c.method = "dqs";
          d = std::move(*CreateDeformer(f.rig, c, &pool));
        } else {
          d = std::move(*CreateImplicitDeformer(f.rig, prepared, Config(method)));
        }
        std::vector<float> p(f.rig->positions.size());
        const int steps = method == "elastic-implicit" ? int(std::ceil((deg - rest) / 10)) : 1;
        for (int k = 1; k <= steps; ++k) {
          const BentJoint s = steps == 1 ? b : pose_at(rest + (deg - rest) * k / steps);
          FrameInput in;
          in.pose = &s.pose;
          if (auto st = d->Deform(in, p, &pool); !st.ok()) {
            return std::fprintf(stderr, "%s %s: %s\n", f.name.c_str(), method.c_str(), std::string(st.message()).c_str()), 1;
          }
        }
        Slice(out, f, method, deg, b, p);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace sinew

int main(int argc, char** argv) {
  std::string file, arm_dir = SINEW_SHARED_DATA "/supercages-arm",
                    bcn_path = SINEW_ASSIMP_MODELS "/X/BCN_Epileptic.X";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--arm" && i + 1 < argc) {
      arm_dir = argv[++i];
    } else if (a == "--bcn" && i + 1 < argc) {
      bcn_path = argv[++i];
    } else if (a == "-h" || a == "--help" || a[0] == '-') {
      std::fprintf(stderr, "usage: sinew-implicit-slices [OUT.csv] [--arm DIR] [--bcn FILE]\n"
                           "  (a fixture whose files are missing is left out, and said so)\n");
      return a[0] == '-' && a != "-h" && a != "--help" ? 2 : 0;
    } else {
      file = a;
    }
  }
  FILE* out = file.empty() ? stdout : std::fopen(file.c_str(), "w");
  if (!out) return std::fprintf(stderr, "sinew-implicit-slices: cannot write %s\n", file.c_str()), 1;
  const int rc = sinew::Run(out, arm_dir, bcn_path);
  if (out != stdout) std::fclose(out);
  return rc;
}
