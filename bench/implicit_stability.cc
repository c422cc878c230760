// sinew-implicit-stability: how far implicit skinning's result moves when its input moves by
// float rounding (issue 15). Each sequence is played through a method once as given and once per
// perturbation (every joint of every pose turned by 1e-6 rad (--turn) about one of four axes, each in its
// own session, as a client whose poses went through other arithmetic would send them); per frame
// the largest distance of a vertex from the unperturbed result, over the bounding-box diagonal.
// A method whose output is a continuous function of its input moves by about 1e-6 of the
// diagonal; a flipped decision (a contact stop, a relaxation that never converges) shows as
// 1e-3 and more. Also the time a frame takes (1 thread), and per frame how many vertices the
// input itself drives into the skin: dual quaternion skinning's vertices inside the skin that
// were not at rest (MeshQuality::new_inside_vertices), the deepest and the heaviest joint at it,
// beside the method's (a method that folds skin DQS keeps clear shows there), and how many
// vertices inside the skin at rest it brings out (MeshQuality::exposed_vertices; a line below
// the frame's counts and names by joint those of them that DQS keeps covered). A
// frame whose DQS pushes a piece deeper into another than the piece is thick asks the method to
// resolve a contact no skin can make (BCN_Epileptic's ponytail through its back at 1.47 s).
//
//   sinew-implicit-stability [--method implicit|elastic-implicit|both] [--limb] [--bcn] [--bcn-frames N]
//                            [--asset FILE]... [--asset-frames N] [--first N] [--rounds N]
//                            [--rotation-weights skinning|harmonic] [--from-rest]
//                            [--jobs N] [--tolerance X] [--average-stalled] [--gate-open C]
//                            [--triangle-fields off|contact|tracked] [--operator-cache DIR] [--turn RADIANS]
//
// --bcn-frames N samples BCN_Epileptic's clip at N + 1 poses (8 by default; 99 is its own 30
// frames/s); --asset FILE (repeatable; a path, or one under Debian's assimp-testmodels such as
// X/Testwuson.X) plays another rigged asset's first clip the same way, at --asset-frames N + 1
// poses (8 by default), and without --limb or --bcn only those; --first N plays only the first
// N poses of each sequence; --rounds N sets the elastic relaxation's round limit
// (ImplicitConfig::relaxation_rounds, 256 by default); --rotation-weights sets what blends the elastic method's target rotations
// (ImplicitConfig::rotation_weights; the preparation then computes the bone heat weights);
// --from-rest resets every session before each frame (what a client sending DeformRequest.reset
// with every frame gets: each pose reached from rest in one jump), which separates a pose's own
// sensitivity from what a clip's history adds to it; --jobs N (1–5, default 1) plays the five
// sessions N at a time on their own threads, the same figures in less time (each session still
// runs on one thread; the printed time a frame is then not comparable). --tolerance X,
// --average-stalled and --gate-open C set the elastic session settings relaxation_tolerance,
// average_stalled_relaxations and contact_gate_open (core/implicit/implicit_params.h).
// --triangle-fields sets the preparation settings sample_triangles and track_sampled_pieces:
// off (no fields for low-poly pieces: the default until 2026-12-05), contact (the default: their
// fields composed, their skin untracked) or tracked.
// --operator-cache DIR keeps the composition operators (5 s to build, the same for every rig) in
// DIR between runs, as the server's cache does (core/implicit/operators.h). --turn sets the
// perturbation (1e-6 rad by default, in [0, 0.01]; 0 shows the method deterministic: every move
// reads 0). A continuous method's moves scale with it; the elastic method's do not (1e-14 rad
// moves the limb by 1.4e-5 of its diagonal, as 1e-6 does): there the figure is how far the
// method carries a rounding difference, not a slope (docs/implicit-skinning-log.md). A value
// out of its setting's range is refused, not clamped. Each sequence ends with a checksum of the
// unturned session's output bits: a change meant to keep the results (a faster loop, a new
// layout) shows the same checksum before and after.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "clients/import/asset_import.h"
#include "core/clip/clip.h"
#include "core/deformer/deformer.h"
#include "core/geometry/mesh_quality.h"
#include "core/implicit/implicit_params.h"
#include "core/implicit/implicit_skinning.h"
#include "core/implicit/operators.h"
#include "core/procedural/limb.h"
#include "tests/core/turned_pose.h"

namespace sinew {
namespace {

uint32_t g_rounds = 0;  // --rounds (0: the default)
bool g_from_rest = false;  // --from-rest: every session restarts from rest before each frame
int g_jobs = 1;            // --jobs: sessions played side by side
std::optional<RotationWeights> g_rotation_weights;  // --rotation-weights (unset: the default)
std::optional<double> g_tolerance, g_gate_open;     // --tolerance, --gate-open (unset: the defaults)
bool g_average_stalled = false;                     // --average-stalled
std::optional<std::string> g_triangle_fields;       // --triangle-fields (unset: the default)
double g_turn = 1e-6;                               // --turn: radians of each perturbation

DeformerConfig Config(const std::string& method) {
  DeformerConfig c;
  c.method = method;
  auto params = std::make_shared<ImplicitConfig>();
  if (g_rounds > 0) params->relaxation_rounds = g_rounds;
  if (g_rotation_weights) params->rotation_weights = *g_rotation_weights;
  if (g_tolerance) params->relaxation_tolerance = *g_tolerance;
  if (g_gate_open) params->contact_gate_open = *g_gate_open;
  if (g_average_stalled) params->average_stalled_relaxations = true;
  if (g_triangle_fields) {
    params->sample_triangles = *g_triangle_fields != "off";
    params->track_sampled_pieces = *g_triangle_fields == "tracked";
  }
  c.params = params;
  return c;
}

struct Sequence {
  std::string name;
  std::shared_ptr<const Rig> rig;
  std::vector<Pose> poses;
  std::vector<std::string> labels;
};

// The name of the joint with the largest weight at vertex v (where a vertex is reported), "-"
// for none.
std::string JointAt(const Rig& rig, int64_t v) {
  const int32_t j = v < 0 ? -1 : HeaviestJoint(rig.weights, size_t(v));
  return j < 0 ? "-" : rig.skeleton.names[size_t(j)];
}

// Plays the sequence and its four perturbed copies, prints a row per frame (the largest move,
// the vertices moved beyond 1e-4 of the diagonal and, per heaviest joint, how many) and returns
// the worst frame's move over the diagonal.
double Play(const Sequence& s, const std::string& method, std::shared_ptr<const Prepared> model, size_t first) {
  const Rig& rig = *s.rig;
  const double diag = rig.bbox_diagonal();
  std::vector<std::unique_ptr<Deformer>> runs;
  for (int k = 0; k < 5; ++k) runs.push_back(std::move(*CreateImplicitDeformer(s.rig, model, Config(method))));
  std::vector<std::vector<float>> outputs(5, std::vector<float>(rig.positions.size()));
  std::vector<float> dqs(rig.positions.size());
  DeformerConfig dqs_config;
  dqs_config.method = "dqs";
  auto dqs_run = CreateDeformer(s.rig, dqs_config);
  if (!dqs_run.ok()) std::abort();
  const MeshQualityMeasure quality(rig.positions, rig.triangles);
  double worst = 0, seconds = 0;
  size_t moved_total = 0;
  uint64_t checksum = 1469598103934665603ull;  // FNV-1a over the unturned session's output bits
  std::printf("%s, %s (%zu vertices): frame, largest move / diag under %g rad turns, vertices beyond 1e-4 diag "
              "(the worst vertex's heaviest joint; moved vertices per heaviest joint); vertices newly inside the skin "
              "with DQS and with the method (the deepest / diag at its vertex's heaviest joint)\n",
              s.name.c_str(), method.c_str(), rig.vertex_count(), g_turn);
  const size_t frames = std::min(first, s.poses.size());
  for (size_t f = 0; f < frames; ++f) {
    if (g_from_rest) {
      for (auto& r : runs) r->Reset();
    }
    // Session 0 plays the pose as given, session k + 1 turned about axis k; each writes its own
    // output, so with --jobs they run side by side.
    const auto play = [&](int k) {
      const Pose p = k == 0 ? s.poses[f] : testing::TurnedPose(s.poses[f], g_turn, testing::kTurnAxes[k - 1]);
      const auto t0 = std::chrono::steady_clock::now();
      if (!runs[k]->Deform({&p, {}}, outputs[k], nullptr).ok()) std::abort();
      if (k == 0) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    if (g_jobs == 1) {
      for (int k = 0; k < 5; ++k) play(k);
    }
    for (int next = 0; g_jobs > 1 && next < 5;) {
      std::vector<std::thread> threads;
      for (int j = 0; j < g_jobs && next < 5; ++j) threads.emplace_back(play, next++);
      for (auto& t : threads) t.join();
    }
    const std::vector<float>& base = outputs[0];
    for (float x : base) {
      uint32_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      for (int byte = 0; byte < 4; ++byte) checksum = (checksum ^ ((bits >> (8 * byte)) & 0xffu)) * 1099511628211ull;
    }
    double frame_max = 0;
    size_t beyond = 0;
    std::string worst_joint;
    std::map<std::string, size_t> joints_beyond;
    for (int k = 0; k < 4; ++k) {
      const std::vector<float>& other = outputs[k + 1];
      size_t b = 0;
      for (size_t v = 0; v < rig.vertex_count(); ++v) {
        const double d = std::sqrt(std::pow(double(base[3 * v]) - other[3 * v], 2) +
                                   std::pow(double(base[3 * v + 1]) - other[3 * v + 1], 2) +
                                   std::pow(double(base[3 * v + 2]) - other[3 * v + 2], 2)) / diag;
        if (d > frame_max) {
          frame_max = d;
          worst_joint = JointAt(rig, int64_t(v));
        }
        if (d > 1e-4) {
          ++b;
          ++joints_beyond[JointAt(rig, int64_t(v))];
        }
      }
      beyond = std::max(beyond, b);
    }
    moved_total += beyond;
    worst = std::max(worst, frame_max);
    std::printf("  %-12s %.2e  %zu  (worst at %s)", s.labels[f].c_str(), frame_max, beyond, worst_joint.c_str());
    for (const auto& [n, c] : joints_beyond) std::printf(" %s:%zu", n.c_str(), c);
    if (!(*dqs_run)->Deform({&s.poses[f], {}}, dqs, nullptr).ok()) std::abort();
    const MeshQuality qd = quality.Measure(dqs, nullptr, true), qm = quality.Measure(base, nullptr, true);
    std::printf("; inside: DQS %u (%.1e at %s), method %u (%.1e at %s); hidden skin out: DQS %u, method %u\n",
                qd.new_inside_vertices, qd.new_max_depth / diag, JointAt(rig, qd.new_deepest_vertex).c_str(),
                qm.new_inside_vertices, qm.new_max_depth / diag, JointAt(rig, qm.new_deepest_vertex).c_str(),
                qd.exposed_vertices, qm.exposed_vertices);
    // Of the hidden skin the method brings out (MeshQuality::exposed), what DQS keeps covered or on
    // its surface (the rest mesh's own overlaps that a pose opens, BCN's left thumb in its hand, come
    // out under both), by joint.
    std::map<std::string, size_t> own_out;
    size_t own = 0;
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      if (qm.exposed[v] && !qd.exposed[v]) {
        ++own;
        ++own_out[JointAt(rig, int64_t(v))];
      }
    }
    if (own > 0) {
      std::printf("    hidden skin out under the method, covered under DQS: %zu (", own);
      const char* sep = "";
      for (const auto& [n, c] : own_out) std::printf("%s%s:%zu", std::exchange(sep, " "), n.c_str(), c);
      std::printf(")\n");
    }
  }
  std::printf("  worst %.2e of the diagonal, %zu vertex-frames beyond 1e-4; %.1f ms a frame (1 thread%s)\n", worst,
              moved_total, 1e3 * seconds / std::max<size_t>(frames, 1),
              g_jobs > 1 ? ", sessions side by side: the time is not comparable" : "");
  std::printf("  output checksum %016llx (FNV-1a of the unturned session's floats: equal before and after a change "
              "means the change kept every bit)\n\n",
              static_cast<unsigned long long>(checksum));
  return worst;
}

Sequence Limb() {
  Sequence s;
  s.name = "two-bone limb, 0-120-0 in 15 deg steps with 60 deg jumps";
  s.rig = std::make_shared<const Rig>(*BuildRig(MakeLimb(TwoBoneLimbOptions())));
  std::vector<double> bends;
  for (int k = 0; k <= 8; ++k) bends.push_back(15.0 * k);
  for (int k = 7; k >= 0; --k) bends.push_back(15.0 * k);
  bends.insert(bends.begin() + 3, {105.0, 45.0});
  for (double b : bends) {
    s.poses.push_back(LimbPose(s.rig->skeleton, 0.5, LimbMotion{.bend_degrees = b, .twist_degrees = b / 3}));
    s.labels.push_back(std::to_string(int(b)) + " deg");
  }
  return s;
}

// An asset's first clip sampled at frames + 1 poses; `flag` names the count's flag in the name.
Sequence FromAsset(const std::string& path, int frames, const std::string& title, const std::string& flag) {
  Sequence s;
  // The pose count in the name: "--bcn-frames N" is N + 1 poses, and reading one for the other
  // once made two samplings look like one sampling on two CPUs (docs/implicit-skinning-log.md).
  s.name = title + " clip at " + std::to_string(frames + 1) + " poses (" + flag + " " + std::to_string(frames) + ")";
  auto asset = ImportAsset(path);
  if (!asset.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), std::string(asset.status().message()).c_str());
    std::exit(1);
  }
  if (asset->clips.empty()) {
    std::fprintf(stderr, "%s: no animation clip to play\n", path.c_str());
    std::exit(1);
  }
  auto rig = BuildRig(asset->rig);
  if (!rig.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), std::string(rig.status().message()).c_str());
    std::exit(1);
  }
  s.rig = std::make_shared<const Rig>(*std::move(rig));
  const Clip& clip = asset->clips[0];
  for (int k = 0; k <= frames; ++k) {
    Pose p;
    SampleClip(clip, s.rig->skeleton, clip.duration * k / frames, p);
    s.poses.push_back(p);
    char buf[32];
    std::snprintf(buf, sizeof buf, "t %.2f s", clip.duration * k / frames);
    s.labels.push_back(buf);
  }
  return s;
}

Sequence Bcn(int frames) {
  return FromAsset(std::string(SINEW_ASSIMP_MODELS) + "/X/BCN_Epileptic.X", frames, "BCN_Epileptic", "--bcn-frames");
}

// A flag's value, refused (with the flag, its range and exit status 2) when it is not a number
// in [lo, hi] ((lo, hi] with open_low), or not a whole number where one is needed. The
// session settings' own ranges (core/implicit/implicit_skinning.cc) for --tolerance, --gate-open
// and --rounds.
double Number(const std::string& flag, const char* text, double lo, double hi, bool integer = true,
              bool open_low = false) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  const bool ok = end != text && *end == '\0' && std::isfinite(v) && (open_low ? v > lo : v >= lo) && v <= hi &&
                  (!integer || v == std::floor(v));
  if (!ok) {
    std::fprintf(stderr, "sinew-implicit-stability: %s %s: expected %s in %c%g, %g]\n", flag.c_str(), text,
                 integer ? "a whole number" : "a number", open_low ? '(' : '[', lo, hi);
    std::exit(2);
  }
  return v;
}

}  // namespace
}  // namespace sinew

int main(int argc, char** argv) {
  using namespace sinew;
  std::vector<std::string> methods = {"implicit", "elastic-implicit"};
  bool limb = false, bcn = false;
  int bcn_frames = 8, asset_frames = 8;
  std::vector<std::string> assets;
  size_t first = SIZE_MAX;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--method" && i + 1 < argc) {
      const std::string m = argv[++i];
      if (m != "both") methods = {m};
    } else if (a == "--limb") {
      limb = true;
    } else if (a == "--bcn") {
      bcn = true;
    } else if (a == "--bcn-frames" && i + 1 < argc) {
      bcn_frames = int(Number(a, argv[++i], 1, 999));
    } else if (a == "--asset" && i + 1 < argc) {
      assets.push_back(argv[++i]);
    } else if (a == "--asset-frames" && i + 1 < argc) {
      asset_frames = int(Number(a, argv[++i], 1, 999));
    } else if (a == "--first" && i + 1 < argc) {
      first = size_t(Number(a, argv[++i], 1, 1e9));
    } else if (a == "--jobs" && i + 1 < argc) {
      g_jobs = int(Number(a, argv[++i], 1, 5));
    } else if (a == "--from-rest") {
      g_from_rest = true;
    } else if (a == "--rounds" && i + 1 < argc) {
      g_rounds = uint32_t(Number(a, argv[++i], 1, 1000));
    } else if (a == "--tolerance" && i + 1 < argc) {
      g_tolerance = Number(a, argv[++i], 0.0, 0.1, /*integer=*/false);
    } else if (a == "--gate-open" && i + 1 < argc) {
      g_gate_open = Number(a, argv[++i], -0.2, 1.0, /*integer=*/false, /*open_low=*/true);
    } else if (a == "--operator-cache" && i + 1 < argc) {
      SetOperatorCacheDirectory(argv[++i]);
    } else if (a == "--triangle-fields" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "off" || std::string(argv[i + 1]) == "contact" ||
                std::string(argv[i + 1]) == "tracked")) {
      g_triangle_fields = argv[++i];
    } else if (a == "--turn" && i + 1 < argc) {
      g_turn = Number(a, argv[++i], 0.0, 0.01, /*integer=*/false);
    } else if (a == "--average-stalled") {
      g_average_stalled = true;
    } else if (a == "--rotation-weights" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "skinning" || std::string(argv[i + 1]) == "harmonic")) {
      g_rotation_weights = std::string(argv[++i]) == "harmonic" ? RotationWeights::kHarmonic : RotationWeights::kSkinning;
    } else {
      std::fprintf(stderr, "usage: sinew-implicit-stability [--method implicit|elastic-implicit|both] [--limb] [--bcn] "
                           "[--bcn-frames N] [--asset FILE]... [--asset-frames N] [--first N] [--rounds N] [--rotation-weights skinning|harmonic] [--from-rest] [--jobs N] "
                           "[--tolerance X] [--average-stalled] [--gate-open C] [--triangle-fields off|contact|tracked] "
                           "[--operator-cache DIR] [--turn RADIANS]\n");
      return 2;
    }
  }
  if (!limb && !bcn && assets.empty()) limb = bcn = true;
  std::vector<Sequence> seqs;
  if (limb) seqs.push_back(Limb());
  if (bcn) seqs.push_back(Bcn(bcn_frames));
  for (const std::string& a : assets) {
    // A path as given, else under Debian's assimp-testmodels (X/Testwuson.X).
    const std::string path = std::filesystem::exists(a) ? a : std::string(SINEW_ASSIMP_MODELS) + "/" + a;
    seqs.push_back(FromAsset(path, asset_frames, std::filesystem::path(path).stem().string(), "--asset-frames"));
  }
  for (const Sequence& s : seqs) {
    auto model = PrepareImplicit(*s.rig, Config("implicit"), nullptr, {});
    if (!model.ok()) {
      std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
      return 1;
    }
    for (const std::string& m : methods) Play(s, m, *model, first);
  }
  return 0;
}
