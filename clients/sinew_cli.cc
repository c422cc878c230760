// sinew: command-line client of the Sinew service. See `sinew help`.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <iostream>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "clients/export/gltf_clip.h"
#include "clients/export/snapshot.h"
#include "clients/import/asset_import.h"
#include "clients/import/point_set.h"
#include "clients/import/supercages.h"
#include "clients/lib/args.h"
#include "clients/lib/batch_shards.h"
#include "clients/lib/connection.h"
#include "clients/lib/interrupt.h"
#include "clients/lib/methods.h"
#include "clients/lib/point_cache.h"
#include "clients/lib/progress.h"
#include "clients/lib/client.h"
#include "clients/lib/stats.h"
#include "core/geometry/mesh_quality.h"
#include "core/parallel/thread_pool.h"
#include "core/util/atomic_file.h"
#include "sinew/v1/rig_id.h"
#include "core/procedural/limb.h"

namespace {

using namespace sinew;
using Clock = std::chrono::steady_clock;
constexpr int kLimbCycle = 120;  // frames in one bend-and-twist cycle of the procedural limb

const char* kUsage = R"(sinew: command-line client of a Sinew deformation server.

Usage: sinew [--target HOST:PORT] COMMAND [flags]

Commands:
  info                       server version, methods, backends, limits
  upload                     upload a rig (the built-in procedural limb) and print its id
  rigs                       list resident rigs
  rig ID                     one rig's details (joints, sizes)
  delete-rig ID              remove a rig no session uses
  session create             open a session: --rig ID [--method M] [--encoding E] [--backend B]
                             [--operator OP] [--joint-operator J=OP,...] (implicit methods)
  session get ID | session list | session close ID
  import FILE                read a rigged asset (FBX, glTF, Collada, .x, ... via assimp) and
                             list its meshes, joints, clips and what was dropped
  play [FILE]                upload FILE's rig (or the procedural limb, or use --rig ID), open a
                             session per method, stream the clip through the server and report
                             frames, frames/s and latency percentiles; --snapshot draws frames
                             of each method into a PNG
  batch FILE                 deform a whole clip on the server (DeformClip) into a .pc2 point
                             cache (--pc2), a glTF binary that viewers play (--gltf) and/or an
                             OBJ sequence (--obj); an interrupted batch resumes from the last
                             frame written when run again (only into its own job's files:
                             OUT.pc2.job, DIR/STEM.job); --shard I/N (or --shard-from-env N)
                             deforms only the I-th of N slices of the frames into
                             OUT.pc2.shard-I-of-N (not with --gltf)
  merge-shards               join the N parts of a sharded batch into the cache one run would
                             write (--pc2 OUT.pc2, --obj DIR checks the OBJ frames); refuses,
                             naming the missing frames, while a shard is missing or incomplete
  help                       this text (also --help)

Flags:
)";

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "sinew: %s: %s\n", absl::StatusCodeToString(st.code()).c_str(),
               std::string(st.message()).c_str());
  return 1;
}

int Usage(const client::Args& args, const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "sinew: %s\n\n", error.c_str());
  std::fprintf(error.empty() ? stdout : stderr, "%s%s", kUsage, args.Help().c_str());
  return error.empty() ? 0 : 2;
}

// `s` as a JSON string, quotes included.
std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(ch));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

// Serialized with map and unknown-field order fixed: equal messages give equal bytes.
std::string Deterministic(const google::protobuf::Message& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return out;
}

bool ParseMethod(const std::string& s, v1::Method* m) { return client::MethodFromName(s, m); }

// --backend: auto, cpu or gpu.
bool ParseBackend(const std::string& s, v1::Backend* b) {
  if (s == "auto") *b = v1::BACKEND_AUTO;
  else if (s == "cpu") *b = v1::BACKEND_CPU;
  else if (s == "gpu") *b = v1::BACKEND_GPU;
  else return false;
  return true;
}

const std::string kMethods = client::MethodNames();

// One method ("dqs") or a pipeline of them ("cage-mvc+lbs") into `config`, the flags' parameters
// (--skinning, --operator, ...) on every stage they apply to; its methods in `methods`. With the
// server's `info`, --param NAME=VALUE,... sets the method's parameters by name (a pipeline's:
// STAGE.NAME=VALUE); `params`, when given, instead of --param (play's share of it for one method
// of its list).
bool MethodParams(client::Args& args, v1::Method method, v1::DeformerConfig* config, std::string* error);
bool ParseDeformer(client::Args& args, const std::string& spec, v1::DeformerConfig* config,
                   std::vector<v1::Method>* methods, std::string* error, const v1::ServerInfo* info = nullptr,
                   const std::string* params = nullptr) {
  const std::string& param = params ? *params : args.Get("param");
  methods->clear();
  for (const auto& part : absl::StrSplit(spec, '+')) {
    v1::Method m;
    if (!ParseMethod(std::string(part), &m)) {
      *error = absl::StrCat("--method: \"", std::string(part), "\" is not one of ", kMethods,
                            " (a pipeline joins them with '+', e.g. cage-mvc+lbs)");
      return false;
    }
    methods->push_back(m);
  }
  if (methods->size() == 1) {
    config->set_method(methods->front());
    if (!MethodParams(args, methods->front(), config, error)) return false;
    if (info == nullptr || param.empty()) return true;
    for (const v1::MethodInfo& mi : info->methods()) {
      if (mi.method() == methods->front()) return client::SetParams(config, mi.params_field(), param, error);
    }
    *error = "--method: the server does not offer " + spec;
    return false;
  }
  for (v1::Method m : *methods) {
    v1::DeformerConfig* stage = config->add_stages();
    stage->set_method(m);
    if (!MethodParams(args, m, stage, error)) return false;
  }
  if (info == nullptr || param.empty()) return true;
  // A pipeline's parameters name their stage: STAGE.NAME=VALUE, STAGE a method of the pipeline
  // (once in it) or its 0-based index.
  std::vector<std::string> per_stage(methods->size());
  for (const auto& item : absl::StrSplit(param, ',', absl::SkipEmpty())) {
    const std::string a(item);
    const size_t eq = a.find('='), dot = a.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
      *error = absl::StrCat("--param: in a pipeline write STAGE.NAME=VALUE (STAGE: a method of it or its index), not '",
                            a, "'");
      return false;
    }
    const std::string stage = a.substr(0, dot);
    int at = -1;
    for (size_t k = 0; k < methods->size(); ++k) {
      if (client::MethodName((*methods)[k]) != stage && std::to_string(k) != stage) continue;
      if (at >= 0) {
        *error = absl::StrCat("--param ", a, ": ", stage, " is more than one stage; name it by index");
        return false;
      }
      at = int(k);
    }
    if (at < 0) {
      *error = absl::StrCat("--param ", a, ": no stage ", stage, " in ", spec);
      return false;
    }
    if (!per_stage[at].empty()) per_stage[at] += ',';
    per_stage[at] += a.substr(dot + 1);
  }
  for (size_t k = 0; k < methods->size(); ++k) {
    if (per_stage[k].empty()) continue;
    const v1::MethodInfo* mi = nullptr;
    for (const v1::MethodInfo& m : info->methods()) {
      if (m.method() == (*methods)[k]) mi = &m;
    }
    if (mi == nullptr) {
      *error = "--method: the server does not offer " + client::MethodName((*methods)[k]);
      return false;
    }
    if (!client::SetParams(config->mutable_stages(int(k)), mi->params_field(), per_stage[k], error)) {
      *error = absl::StrCat("stage ", k, " (", client::MethodName((*methods)[k]), "): ", *error);
      return false;
    }
  }
  return true;
}

// What the server says a method reads and returns (GetServerInfo), for the methods of a spec.
struct MethodUse {
  bool pose = false, cages = false, vertex_states = false;
};
MethodUse UseOf(const v1::ServerInfo& info, const std::vector<v1::Method>& methods) {
  MethodUse use;
  for (v1::Method m : methods) {
    for (const v1::MethodInfo& mi : info.methods()) {
      if (mi.method() != m) continue;
      for (const std::string& in : mi.inputs()) {
        use.pose |= in == "pose";
        use.cages |= in == "cages";
      }
      use.vertex_states |= mi.vertex_states();
    }
  }
  return use;
}

bool ParseOperator(absl::string_view s, v1::JointOperator* op) {
  if (s == "union") *op = v1::JOINT_OPERATOR_UNION;
  else if (s == "clean-union") *op = v1::JOINT_OPERATOR_CLEAN_UNION;
  else if (s == "contact") *op = v1::JOINT_OPERATOR_CONTACT;
  else if (s == "bulge") *op = v1::JOINT_OPERATOR_BULGE;
  else return false;
  return true;
}

// The method's parameters from the flags (--skinning, --operator, --joint-operator); false with
// a message for a bad value.
bool MethodParams(client::Args& args, v1::Method method, v1::DeformerConfig* config, std::string* error) {
  if (const std::string sk = args.Get("skinning"); sk != "lbs" && sk != "dqs") {
    *error = "--skinning: lbs or dqs, not '" + sk + "'";
    return false;
  }
  if (method == v1::METHOD_SUPERCAGES && args.Get("skinning") == "dqs") {
    config->mutable_supercages()->set_skinning(v1::METHOD_DQS);
  }
  if (method == v1::METHOD_BLEND && !args.Get("blend-weight").empty()) {
    double w;
    if (!absl::SimpleAtod(args.Get("blend-weight"), &w) || !(w >= 0 && w <= 1)) {
      *error = "--blend-weight: a number in [0, 1]";
      return false;
    }
    config->mutable_blend()->set_weight(w);
  }
  if (method != v1::METHOD_IMPLICIT && method != v1::METHOD_ELASTIC_IMPLICIT) return true;
  v1::ImplicitParams* p = config->mutable_implicit();
  v1::JointOperator op;
  if (!ParseOperator(args.Get("operator"), &op)) {
    *error = "--operator: union, clean-union, contact or bulge";
    return false;
  }
  p->set_default_operator(op);
  if (args.Get("joint-operator").empty()) return true;
  for (absl::string_view item : absl::StrSplit(args.Get("joint-operator"), ',')) {
    const size_t eq = item.find('=');
    uint32_t joint;
    if (eq == absl::string_view::npos || !absl::SimpleAtoi(item.substr(0, eq), &joint) ||
        !ParseOperator(item.substr(eq + 1), &op)) {
      *error = absl::StrCat("--joint-operator: JOINT=OPERATOR,... (e.g. 3=bulge), not '", std::string(item), "'");
      return false;
    }
    v1::JointOperatorChoice* c = p->add_joints();
    c->set_joint(joint);
    c->set_op(op);
  }
  return true;
}

// A method flag that no method (or pipeline stage) of the command takes, named; empty when each
// is used. Until 2026-12-03 such a flag was ignored without a word (`--method lbs --blend-weight 7`
// was not even range-checked).
std::string UnusedMethodFlag(client::Args& args, const std::vector<std::vector<v1::Method>>& specs) {
  auto any = [&](std::initializer_list<v1::Method> wanted) {
    for (const auto& stages : specs) {
      for (v1::Method m : stages) {
        if (std::find(wanted.begin(), wanted.end(), m) != wanted.end()) return true;
      }
    }
    return false;
  };
  if (args.Has("blend-weight") && !any({v1::METHOD_BLEND})) return "--blend-weight: no method of --method is blend";
  if ((args.Has("operator") || args.Has("joint-operator")) &&
      !any({v1::METHOD_IMPLICIT, v1::METHOD_ELASTIC_IMPLICIT})) {
    return "--operator, --joint-operator: no method of --method is implicit or elastic-implicit";
  }
  if (args.Has("skinning") && !any({v1::METHOD_SUPERCAGES})) return "--skinning: no method of --method is supercages";
  return {};
}

// CreateSession progress on stderr: a line per 10 % (the server reports finer steps).
std::function<void(double, const std::string&)> PrepareProgress() {
  auto last = std::make_shared<int>(-1);
  return [last](double f, const std::string& what) {
    const int step = int(f * 10);
    if (step == *last) return;
    *last = step;
    std::fprintf(stderr, "preparing %s: %d%%\n", what.c_str(), 10 * step);
  };
}

// The fallback that serves a session of `stages` while its preparation runs
// (GetServerInfo's MethodInfo.fallback), or "" when none of them has one.
std::string FallbackOf(const v1::ServerInfo& info, const std::vector<v1::Method>& stages) {
  std::string fallback;
  for (v1::Method m : stages) {
    for (const v1::MethodInfo& mi : info.methods()) {
      if (mi.method() == m && !mi.fallback().empty()) fallback = mi.fallback();
    }
  }
  return fallback;
}

// Waits until the preparations `session` asked for (Session.preparations) are done, as GetRig
// lists them, showing the running one's progress on stderr every second as `label`: a session
// of a method with a fallback is created at once and served by the fallback meanwhile. The first
// that failed (the session then serves its fallback for good), or nullopt.
absl::StatusOr<std::optional<v1::Preparation>> WaitForPreparations(client::Client& c, const v1::Session& session,
                                                                    const std::string& fallback,
                                                                    const std::string& label) {
  const auto& own = session.preparations();
  for (auto shown = std::chrono::steady_clock::now();;) {
    auto rig_info = c.GetRig(session.rig_id());
    if (!rig_info.ok()) return rig_info.status();
    const v1::Preparation* pending = nullptr;
    for (const v1::Preparation& p : rig_info->preparations()) {
      if (std::find(own.begin(), own.end(), p.key()) == own.end()) continue;
      if (p.done() && !p.error().empty()) return p;
      if (!p.done()) pending = &p;
    }
    if (pending == nullptr) return std::nullopt;
    if (std::chrono::steady_clock::now() - shown >= std::chrono::seconds(1)) {
      shown = std::chrono::steady_clock::now();
      std::fprintf(stderr, "%s: preparing %s: %.0f%% (frames meanwhile come from %s)\n", label.c_str(),
                   pending->key().c_str(), 100 * pending->progress(), fallback.c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

bool LimbFromArgs(client::Args& args, LimbOptions* limb) {
  long long v, b, k;
  if (!args.GetInt("vertices", &v, 300, 50'000'000) || !args.GetInt("bones", &b, 1, 1000) ||
      !args.GetInt("influences", &k, 1, 64)) {
    return false;
  }
  *limb = client::LimbWithVertices(size_t(v), uint32_t(b), uint32_t(k));
  return true;
}

absl::StatusOr<v1::UploadRigResponse> UploadLimb(client::Client& c, const LimbOptions& limb,
                                                 double* seconds) {
  const v1::Rig rig = client::RigToProto(MakeLimb(limb));
  const auto t0 = Clock::now();
  auto r = c.UploadRig(rig);
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

// What `play` sends: a rig on the server and one cycle of poses, looped.
struct PlaySource {
  std::string rig_id;
  std::vector<v1::DeformRequest> cycle;
  bool procedural = false;
  std::vector<float> rest;          // the mesh, for --snapshot (empty with --rig ID)
  std::vector<uint32_t> triangles;
};

// --snapshot's settings from the flags; false with a message.
struct SnapshotPlan {
  std::string path;
  std::vector<long long> frames;  // the sent frames to draw, one column each
  client::SnapshotOptions options;
};
bool ParseSnapshot(client::Args& args, long long frames, SnapshotPlan* plan, std::string* error) {
  if (!args.GetOutputPath("snapshot", &plan->path)) {  // before the methods play, not after
    *error = args.error();
    return false;
  }
  if (plan->path.empty()) {
    // Refused, as a flag the command does not read is (until 2026-12-07 ignored, unchecked).
    for (const char* flag : {"snapshot-frames", "snapshot-size", "snapshot-view", "snapshot-diff"}) {
      if (args.Has(flag)) {
        *error = absl::StrCat("--", flag, " draws into --snapshot's PNG: give --snapshot FILE too");
        return false;
      }
    }
    return true;
  }
  const std::string list = args.Get("snapshot-frames");
  if (list.empty()) {  // four frames spread over the run
    for (int k = 0; k < 4; ++k) plan->frames.push_back(std::min(frames - 1, (2 * k + 1) * frames / 8));
    plan->frames.erase(std::unique(plan->frames.begin(), plan->frames.end()), plan->frames.end());
  } else {
    for (absl::string_view item : absl::StrSplit(list, ',')) {
      long long f;
      if (!absl::SimpleAtoi(item, &f) || f < 0 || f >= frames) {
        *error = absl::StrCat("--snapshot-frames: '", std::string(item), "' is not a frame in [0, ", frames, ")");
        return false;
      }
      plan->frames.push_back(f);
    }
  }
  if (plan->frames.size() > 64) {
    *error = "--snapshot-frames: at most 64 frames";
    return false;
  }
  const std::string size = args.Get("snapshot-size");
  const size_t x = size.find('x');
  if (x == std::string::npos || !absl::SimpleAtoi(size.substr(0, x), &plan->options.cell_width) ||
      !absl::SimpleAtoi(size.substr(x + 1), &plan->options.cell_height) || plan->options.cell_width < 16 ||
      plan->options.cell_height < 42 || plan->options.cell_width > 4096 || plan->options.cell_height > 4096) {
    *error = "--snapshot-size: WIDTHxHEIGHT of a cell in pixels, from 16x42 to 4096x4096 (e.g. 320x400)";
    return false;
  }
  const std::string view = args.Get("snapshot-view");
  if (view != "auto") {
    // VIEW,UP: signed axes, e.g. +x,+z: the camera on the +x side looking back along x, z up.
    std::vector<std::string> parts = absl::StrSplit(view, ',');
    auto axis = [](const std::string& a, int* index, bool* negative) {
      if (a.size() != 2 || (a[0] != '+' && a[0] != '-') || a[1] < 'x' || a[1] > 'z') return false;
      *negative = a[0] == '-';
      *index = a[1] - 'x';
      return true;
    };
    if (parts.size() != 2 || !axis(parts[0], &plan->options.view_axis, &plan->options.view_negative) ||
        !axis(parts[1], &plan->options.up_axis, &plan->options.up_negative) ||
        plan->options.view_axis == plan->options.up_axis) {
      *error = "--snapshot-view: auto, or VIEW,UP as two different signed axes (e.g. +x,+z)";
      return false;
    }
  }
  if (!args.GetDouble("snapshot-diff", &plan->options.diff_scale, 0, 1)) {
    *error = args.error();
    return false;
  }
  return true;
}

// `text_out`: where the line goes (stderr under --json, whose stdout is JSON alone).
absl::StatusOr<v1::UploadRigResponse> UploadReport(client::Client& c, const v1::Rig& rig, FILE* text_out = stdout) {
  const auto t0 = Clock::now();
  auto up = c.UploadRig(rig);
  if (!up.ok()) return up;
  std::fprintf(text_out, "rig %s: %u vertices, %u triangles, %u joints, %s in %.1f ms (id %.12s)\n",
              up->info().name().c_str(), up->info().vertex_count(), up->info().triangle_count(),
              up->info().joint_count(), up->already_resident() ? "already resident" : "uploaded",
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count(),
              up->rig_id().c_str());
  return up;
}

// Picks a clip by --clip (name or index); the first one by default.
absl::StatusOr<const Clip*> ChooseClip(const ImportedAsset& asset, const std::string& which) {
  if (asset.clips.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(asset.path, ": the file has no animation clip"));
  }
  if (which.empty()) return &asset.clips.front();
  for (const Clip& clip : asset.clips) {
    if (clip.name == which) return &clip;
  }
  size_t index;
  if (absl::SimpleAtoi(which, &index) && index < asset.clips.size()) return &asset.clips[index];
  return absl::NotFoundError(absl::StrCat("--clip ", which, ": no such clip name or index (",
                                          asset.clips.size(), " clips)"));
}

// Imports FILE (any assimp format, or a SuperCages .skt with its sibling files) and validates
// it locally, so that bad files fail before any upload.
absl::StatusOr<ImportedAsset> LoadAsset(const std::string& path) {
  absl::StatusOr<ImportedAsset> asset;
  if (absl::EndsWithIgnoreCase(path, ".skt")) {
    const std::filesystem::path p(path);
    auto sc = ReadSuperCages(SuperCagesFilesIn(p.parent_path().string(), p.stem().string()));
    if (!sc.ok()) return sc.status();
    asset.emplace();
    asset->path = path;
    // The rig's name is ReadSuperCages's: the stem as valid UTF-8 (until 2026-12-07 the raw stem
    // replaced it here, and a Latin-1 file name failed the upload again).
    asset->rig = std::move(sc->rig);
    asset->bones = asset->rig.rig.joint_count();
    asset->meshes.push_back({"mesh", 0, static_cast<uint32_t>(asset->rig.rig.vertex_count()), 0,
                             static_cast<uint32_t>(asset->rig.rig.triangle_count()), true});
    if (!sc->skeleton_clip.tracks.empty()) asset->clips.push_back(std::move(sc->skeleton_clip));
    if (!sc->cage_clip.times.empty()) asset->cage_clips.push_back(std::move(sc->cage_clip));
    asset->notes = std::move(sc->notes);
  } else {
    asset = ImportAsset(path);
  }
  if (!asset.ok()) return asset.status();
  for (const auto& n : asset->notes) std::fprintf(stderr, "sinew: %s: note: %s\n", path.c_str(), n.c_str());
  return asset;
}

// --point-set N: the asset's character made into N surface points with a sphere-mesh
// (clients/import/point_set.h), for baseline skinning and for LBS/DQS on the same points.
absl::Status ApplyPointSet(client::Args& args, ImportedAsset& asset, client::Client& c) {
  long long points;
  if (!args.GetInt("point-set", &points, 0, 50'000'000)) return absl::InvalidArgumentError(args.error());
  if (points == 0) return absl::OkStatus();
  // More points than the server takes in a rig are refused before they are sampled (gigabytes
  // and minutes for 50 million) rather than by the upload after it (until 2026-12-07). A server
  // that does not answer now is left to the upload's error.
  if (auto info = c.GetServerInfo(); info.ok() && info->limits().max_vertices_per_rig() > 0 &&
                                     uint64_t(points) > info->limits().max_vertices_per_rig()) {
    return absl::InvalidArgumentError(absl::StrCat("--point-set: ", points, " points; the server takes rigs of at most ",
                                                   info->limits().max_vertices_per_rig(), " vertices (its --max-vertices)"));
  }
  PointSetOptions o;
  o.points = size_t(points);
  PointSetReport report;
  auto in = PointSetFromCharacter(asset.rig, o, &report);
  if (!in.ok()) return absl::Status(in.status().code(), absl::StrCat(asset.path, ": ", in.status().message()));
  std::fprintf(stderr, "sinew: %s: %zu points, a sphere-mesh of %zu spheres and %zu bones (%zu junctions)\n",
               asset.path.c_str(), o.points, report.spheres, report.bones, report.junctions);
  for (const auto& n : report.notes) std::fprintf(stderr, "sinew: %s: note: %s\n", asset.path.c_str(), n.c_str());
  asset.rig = std::move(*in);
  asset.meshes = {{"points", 0, uint32_t(o.points), 0, 0, true}};
  return absl::OkStatus();
}

int Play(client::Client& c, client::Args& args, const LimbOptions& limb) {
  // --json: stdout carries one JSON object per method and nothing else; the other lines go to stderr.
  FILE* const text_out = args.Has("json") ? stderr : stdout;
  long long frames;
  double fps, clip_fps;
  if (!args.GetInt("frames", &frames, 0, 100'000'000) || !args.GetDouble("fps", &fps, 0, 1e6) ||
      !args.GetDouble("clip-fps", &clip_fps, 1.0 / 60, 1e6)) {
    return Usage(args, args.error());
  }
  // As sinew-load's: below one frame in about 17 minutes, a rate is a typo (1e-9 waited 31
  // years for frame 1; 1e-12 overflowed the schedule's nanoseconds).
  if (fps > 0 && fps < 0.001) return Usage(args, absl::StrCat("--fps: ", fps, "; expected 0 (as fast as answered) or at least 0.001"));
  // The flags that need neither the asset nor the server, checked before either is touched.
  v1::Backend backend;
  if (!ParseBackend(args.Get("backend"), &backend)) return Usage(args, "--backend: auto, cpu or gpu");
  {
    v1::CreateSessionRequest scratch;
    if (std::string error; !client::EncodingFromFlags(args, &scratch, &error)) return Usage(args, error);
  }
  const bool want_quality = args.Has("quality");
  long long point_set = 0;
  if (!args.GetInt("point-set", &point_set, 0, 50'000'000)) return Usage(args, args.error());
  if (want_quality && point_set > 0) {
    return Usage(args, "play --quality: measures a mesh's skin (not a --point-set)");
  }
  std::vector<std::string> specs;
  std::vector<std::vector<v1::Method>> parsed_stages;
  for (const auto& spec : absl::StrSplit(args.Get("method"), ',')) {
    v1::DeformerConfig check;
    std::vector<v1::Method> stages;
    if (std::string error; !ParseDeformer(args, std::string(spec), &check, &stages, &error)) return Usage(args, error);
    specs.emplace_back(spec);
    parsed_stages.push_back(std::move(stages));
  }
  if (const std::string unused = UnusedMethodFlag(args, parsed_stages); !unused.empty()) return Usage(args, unused);
  const auto& pos = args.positional();
  // Flags the source would ignore (until 2026-12-03 silently).
  if (pos.size() >= 2 && !args.Get("rig").empty()) {
    return Usage(args, "play FILE plays the file's rig; --rig ID plays a stored rig with the procedural limb's poses: give one");
  }
  if (pos.size() < 2 && point_set > 0) return Usage(args, "--point-set: makes an asset's character into points: play FILE");
  // --snapshot's flags too, but for --snapshot-frames against the clip's length (checked again
  // below, once it is known): until 2026-12-07 a bad --snapshot-size or path was named only after
  // the asset was loaded, sampled and uploaded.
  {
    SnapshotPlan early;
    if (std::string error; !ParseSnapshot(args, int64_t{1} << 40, &early, &error)) return Usage(args, error);
    if (!early.path.empty() && (point_set > 0 || !args.Get("rig").empty())) {
      return Usage(args, "--snapshot: draws a mesh: play FILE (not --point-set) or the procedural limb, not --rig ID");
    }
  }
  PlaySource source;
  if (pos.size() >= 2) {  // an asset file: its clip, sampled at --clip-fps
    auto asset = LoadAsset(pos[1]);
    if (!asset.ok()) return Fail(asset.status());
    if (auto st = ApplyPointSet(args, *asset, c); !st.ok()) return Fail(st);
    auto clip = ChooseClip(*asset, args.Get("clip"));
    if (!clip.ok()) return Fail(clip.status());
    auto built = BuildRig(asset->rig);
    if (!built.ok()) return Fail(absl::Status(built.status().code(), absl::StrCat(pos[1], ": ", built.status().message())));
    if (auto st = c.WaitReady(); !st.ok()) return Fail(st);
    auto up = UploadReport(c, client::RigToProto(asset->rig), text_out);
    if (!up.ok()) return Fail(up.status());
    source.rig_id = up->rig_id();
    Pose pose;
    const CageClip* cage_clip = asset->cage_clips.empty() ? nullptr : &asset->cage_clips.front();
    const double duration = std::max((*clip)->duration, cage_clip ? cage_clip->duration() : 0.0);
    // Saturated, as ClipFrameCount does (an absurd duration from a file is not a conversion's
    // undefined behaviour).
    const double sampled = std::floor(duration * clip_fps + 1e-9);
    const size_t n = sampled < 1e15 ? static_cast<size_t>(sampled) + 1 : size_t{1'000'000'000'000'000};
    // The frames played are the clip's first `frames` (cycled beyond n): only those are sampled,
    // and the requests are held in memory (about 40 bytes a joint and 12 a cage vertex each,
    // twice), so bounded: by count, and by bytes (a cage clip's frames are as large as its cage).
    const size_t kept = frames > 0 ? std::min<size_t>(n, size_t(frames)) : n;
    constexpr size_t kMaxSampled = 1'000'000;
    if (kept > kMaxSampled) {
      return Usage(args, absl::StrCat("play: --clip-fps ", clip_fps, " samples ", n, " frames of the clip \"",
                                      (*clip)->name, "\"; at most ", kMaxSampled,
                                      " are held in memory: give --frames, or a lower --clip-fps"));
    }
    const size_t cage_floats = cage_clip && !cage_clip->offsets.empty() ? cage_clip->offsets.front().size() : 0;
    const double frame_bytes = 40.0 * double(built->skeleton.size()) + 4.0 * double(cage_floats);
    constexpr double kMaxSampledBytes = double(uint64_t{1} << 30);
    if (double(kept) * frame_bytes > kMaxSampledBytes) {
      return Usage(args, absl::StrFormat("play: %zu frames of about %.0f bytes each (%.0f MB) are more than the 1024 MB "
                                         "held in memory: give --frames, or a lower --clip-fps",
                                         kept, frame_bytes, double(kept) * frame_bytes / 1048576));
    }
    source.cycle = client::ClipRequests(**clip, cage_clip, built->skeleton, clip_fps, kept);
    source.rest = asset->rig.rig.positions;
    source.triangles = asset->rig.rig.triangles;
    std::fprintf(text_out, "clip \"%s\"%s: %.3f s, %zu frames at %g frames/s\n", (*clip)->name.c_str(),
                cage_clip ? " with a cage clip" : "", duration, n, clip_fps);
    if (frames == 0) frames = static_cast<long long>(n);
  } else {  // the procedural limb (or --rig ID with the limb's joints): its bend-and-twist cycle
    if (auto st = c.WaitReady(); !st.ok()) return Fail(st);  // the flags above are checked
    source.procedural = args.Get("rig").empty();
    source.rig_id = args.Get("rig");
    RigInput in = MakeLimb(limb);
    if (source.procedural) {
      source.rest = in.rig.positions;
      source.triangles = in.rig.triangles;
    }
    if (source.procedural) {
      auto up = UploadReport(c, client::RigToProto(in), text_out);
      if (!up.ok()) return Fail(up.status());
      source.rig_id = up->rig_id();
    } else {
      auto info = c.GetRig(source.rig_id);
      if (!info.ok()) return Fail(info.status());
      if (info->joint_count() != in.rig.joint_count()) {
        std::fprintf(stderr, "sinew: play --rig poses the procedural limb's %zu joints; rig has %u\n",
                     in.rig.joint_count(), info->joint_count());
        return 1;
      }
    }
    auto built = BuildRig(std::move(in));
    if (!built.ok()) return Fail(built.status());
    source.cycle.resize(kLimbCycle);
    for (int f = 0; f < kLimbCycle; ++f) {
      client::PoseToProto(LimbPose(built->skeleton, double(f) / kLimbCycle), *source.cycle[f].mutable_pose());
    }
    if (frames == 0) frames = 2 * kLimbCycle;
  }
  const std::string& rig_id = source.rig_id;
  std::vector<v1::DeformRequest>& clip = source.cycle;
  const bool procedural = source.procedural;
  const size_t kCycle = clip.size();

  const bool json = args.Has("json");
  int status = 0;
  const std::vector<v1::DeformRequest> all_inputs = clip;
  SnapshotPlan snap;
  if (std::string error; !ParseSnapshot(args, frames, &snap, &error)) return Usage(args, error);
  if (!snap.path.empty() && source.triangles.empty()) {
    return Usage(args, "--snapshot: draws a mesh: play FILE (not --point-set) or the procedural limb, not --rig ID");
  }
  if (!snap.path.empty()) {  // the image's size (a row per method, a column per frame), before anything plays
    if (auto st = client::CheckSnapshotSize(specs.size(), snap.frames.size(), snap.options); !st.ok()) {
      return Usage(args, absl::StrCat("--", st.message()));
    }
  }
  std::vector<std::vector<std::vector<float>>> shots;  // [method][column]: positions
  auto info = c.GetServerInfo();  // what each method reads and returns
  if (!info.ok()) return Fail(info.status());
  // --param with a list of methods: each NAME=VALUE goes to the methods of the list that take it
  // (a pipeline's STAGE.NAME=VALUE to the pipelines with that stage); one that none takes is an
  // error. Every method's parameters are checked before the first one plays.
  std::vector<std::string> spec_params(specs.size(), args.Get("param"));
  if (specs.size() > 1 && !args.Get("param").empty()) {
    for (auto& p : spec_params) p.clear();
    for (const auto& part : absl::StrSplit(args.Get("param"), ',', absl::SkipEmpty())) {
      const std::string item(part);
      std::string why;
      bool taken = false;
      for (size_t k = 0; k < specs.size(); ++k) {
        v1::DeformerConfig scratch;
        std::vector<v1::Method> stages;
        if (std::string error; !ParseDeformer(args, specs[k], &scratch, &stages, &error, &*info, &item)) {
          absl::StrAppend(&why, why.empty() ? "" : "; ", specs[k], ": ", error);
          continue;
        }
        absl::StrAppend(&spec_params[k], spec_params[k].empty() ? "" : ",", item);
        taken = true;
      }
      if (!taken) return Usage(args, absl::StrCat("--param ", item, ": no method of --method ", args.Get("method"), " takes it (", why, ")"));
    }
  }
  std::vector<v1::DeformerConfig> configs(specs.size());
  std::vector<std::vector<v1::Method>> spec_stages(specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    if (std::string error; !ParseDeformer(args, specs[k], &configs[k], &spec_stages[k], &error, &*info, &spec_params[k])) {
      return Usage(args, specs.size() > 1 ? absl::StrCat(specs[k], ": ", error) : error);
    }
  }
  // A method the source cannot drive is found before any plays (until 2026-12-03 the methods
  // before it played in full, and the run then ended without its snapshot).
  for (size_t k = 0; k < specs.size(); ++k) {
    if (UseOf(*info, spec_stages[k]).cages && all_inputs.front().cages_size() == 0) {
      return Fail(absl::FailedPreconditionError(absl::StrCat("--method ", specs[k], ": this asset has no cage clip to play")));
    }
  }
  for (size_t spec_index = 0; spec_index < specs.size(); ++spec_index) {
    const std::string& spec = specs[spec_index];
    const std::vector<v1::Method>& stages = spec_stages[spec_index];
    // The stream, or the server, gave out: nothing more plays. With --json this method and each
    // not played get their object, as promised (until 2026-12-07 the output stopped short).
    auto broken = [&](const absl::Status& st) {
      if (json) {
        for (size_t k = spec_index; k < specs.size(); ++k) {
          const std::string why = k == spec_index ? absl::StrCat(absl::StatusCodeToString(st.code()), ": ", st.message())
                                                  : absl::StrCat("not played: ", spec, " failed");
          std::printf("{\"method\":%s,\"error\":%s}\n", JsonString(specs[k]).c_str(), JsonString(why).c_str());
        }
      }
      return Fail(st);
    };
    v1::CreateSessionRequest req;
    req.set_rig_id(rig_id);
    req.set_backend(backend);
    if (std::string error; !client::EncodingFromFlags(args, &req, &error)) return Usage(args, error);
    *req.mutable_deformer() = configs[spec_index];
    const MethodUse use = UseOf(*info, stages);
    const auto t_session = Clock::now();
    // Closed on every way out: a failed stream or frame, or a clip the method cannot play, does
    // not leave the session open on the server until its idle TTL; nor does Ctrl-C, also while
    // the session is being created.
    client::ClosedOnInterrupt interrupt_closes(c);
    auto session = c.CreateSession(req, PrepareProgress());
    if (!session.ok()) {  // the other methods still play (their row of the snapshot stays blank)
      std::fprintf(stderr, "%s: no session: %s: %s\n", spec.c_str(), absl::StatusCodeToString(session.status().code()).c_str(),
                   std::string(session.status().message()).c_str());
      if (json) {  // one object per method, as promised (until 2026-12-03 none for this one)
        std::printf("{\"method\":%s,\"error\":%s}\n", JsonString(spec).c_str(),
                    JsonString(absl::StrCat(absl::StatusCodeToString(session.status().code()), ": ",
                                            session.status().message()))
                        .c_str());
      }
      if (!snap.path.empty()) shots.emplace_back(snap.frames.size());
      status = 1;
      continue;
    }
    interrupt_closes.Set(session->session_id());
    bool session_closed = false;
    absl::Cleanup close_session = [&] {
      if (!session_closed) (void)c.CloseSession(session->session_id());
    };
    // A method that serves a fallback while it prepares (GetServerInfo's MethodInfo.fallback) is
    // measured itself: wait for its preparation, showing its progress from GetRig. A failed one
    // leaves the session on its fallback for good: its frames count as errors, named below.
    const std::string fallback = FallbackOf(*info, stages);
    if (!fallback.empty()) {
      if (auto waited = WaitForPreparations(c, *session, fallback, spec); !waited.ok()) return broken(waited.status());
    }
    const double prepare_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_session).count();
    const char* name = spec.c_str();
    const char* on = session->backend() == v1::BACKEND_GPU ? "gpu" : "cpu";
    // Each method gets the inputs it takes: the pose, the cage, or both.
    clip = all_inputs;
    for (auto& r : clip) {
      r.set_session_id(session->session_id());
      if (!use.pose) r.clear_pose();
      if (!use.cages) r.clear_cages();
      if (use.vertex_states) r.mutable_outputs()->set_vertex_states(true);  // summarised below
      if (want_quality) r.mutable_outputs()->set_quality(true);
    }
    // --quality: the server's per-frame QualityReport, summarised over the frames.
    struct {
      uint64_t frames_inside = 0, worst_inside = 0, worst_frame = 0, touching = 0, rest_inside = 0;
      uint64_t frames_new = 0, worst_new = 0, worst_new_frame = 0;
      uint64_t worst_exposed = 0, worst_exposed_frame = 0;  // inside at rest, brought out (exposed_vertices)
      double max_depth = 0, new_depth = 0, volume_min = INFINITY, volume_max = -INFINITY, stretch_min = INFINITY,
             stretch_max = 0;
      // Where the deepest new inside vertex was (QualityReport.new_deepest_*): frame (−1: none),
      // vertex, joint.
      long long deepest_frame = -1;
      uint32_t deepest_vertex = 0;
      std::string deepest_joint;
    } q;
    uint64_t states[6] = {};
    // Baseline skinning's status bytes (core/baseline/baseline.h): on a bone, on a joint's arc or
    // an end cap, a degenerate joint this frame, moved rigidly with its bone.
    const bool baseline = stages.size() == 1 && stages[0] == v1::METHOD_BASELINE;
    uint64_t on_bone = 0, on_sphere = 0, degenerate = 0, rigid = 0;
    if (prepare_ms > 50) std::fprintf(text_out, "%s: session ready in %.0f ms (prepared once per rig and shared by its sessions)\n", name, prepare_ms);
    // What each preparation made, in its method's words (Preparation.summary: implicit skinning's
    // fields and untracked pieces, pbs's tets): why skin stays untracked is read there.
    if (auto rig_info = c.GetRig(session->rig_id()); rig_info.ok()) {
      const auto& own = session->preparations();
      for (const v1::Preparation& p : rig_info->preparations()) {
        if (p.done() && !p.summary().empty() && std::find(own.begin(), own.end(), p.key()) != own.end()) {
          std::fprintf(text_out, "%s: prepared: %s\n", name, p.summary().c_str());
        }
      }
    }

    client::LatencyStats lat;
    if (!snap.path.empty()) shots.emplace_back(snap.frames.size());
    std::vector<float> peak;  // positions at the clip's peak (t = 0.5)
    std::vector<float> xyz;
    client::PositionDecoder decoder;  // every frame is decoded, as a client would
    std::string decode_error;
    // The server's reason for the first failed frame, and how many failed with another one.
    std::string frame_error;
    uint64_t other_frame_errors = 0;
    v1::DeformResponse resp;
    std::unique_ptr<client::FrameStream> stream;
    if (!args.Has("unary")) stream = c.OpenStream();
    const auto start = Clock::now();
    uint64_t errors = 0, bytes = 0, ok_frames = 0, fallback_frames = 0;
    for (long long f = 0; f < frames; ++f) {
      bool failed = false;  // counted once, whatever went wrong
      const auto scheduled = fps > 0 ? start + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(f / fps))
                                     : Clock::now();
      if (fps > 0) std::this_thread::sleep_until(scheduled);
      v1::DeformRequest& r = clip[f % kCycle];
      r.set_frame(static_cast<uint64_t>(f));
      if (stream) {
        if (!stream->Write(r) || !stream->Read(&resp)) {
          const absl::Status st = stream->Close();
          return broken(absl::Status(st.ok() ? absl::StatusCode::kUnknown : st.code(),
                                     absl::StrCat(name, ": frame ", f, ": the stream ended: ", st.message())));
        }
      } else if (auto u = c.Deform(r); u.ok()) {
        resp = std::move(*u);
      } else if (u.status().code() == absl::StatusCode::kUnavailable &&
                 !absl::StartsWith(u.status().message(), "overloaded")) {  // the server, not the frame
        return broken(absl::UnavailableError(absl::StrCat(name, ": frame ", f, ": ", u.status().message())));
      } else {
        // A unary frame's error is the call's status: one failed frame, as on a stream (until
        // 2026-12-03 it ended the run, unnamed, and skipped the later methods and the snapshot).
        resp.Clear();
        resp.set_frame(static_cast<uint64_t>(f));
        resp.mutable_error()->set_code(static_cast<int>(u.status().code()));
        resp.mutable_error()->set_message(std::string(u.status().message()));
      }
      const double frame_ms = std::chrono::duration<double, std::milli>(Clock::now() - scheduled).count();
      if (resp.has_error() || resp.frame() != static_cast<uint64_t>(f)) failed = true;
      if (resp.has_error()) {
        const std::string e = absl::StrCat(
            absl::StatusCodeToString(static_cast<absl::StatusCode>(resp.error().code())), ": ", resp.error().message());
        if (frame_error.empty()) {
          frame_error = absl::StrCat("frame ", f, ": ", e);
        } else if (!absl::StrContains(frame_error, e)) {
          ++other_frame_errors;
        }
      } else if (resp.frame() != static_cast<uint64_t>(f) && frame_error.empty()) {
        frame_error = absl::StrCat("frame ", f, ": the server answered frame ", resp.frame());
      }
      // A single method's frame made by its fallback (a preparation cancelled meanwhile) is not
      // this method's: counted, and named below.
      if (!resp.has_error() && stages.size() == 1 && resp.method() != stages[0]) {
        failed = true;
        ++fallback_frames;
      }
      bytes += resp.positions().size();
      // Only a frame decoded here is drawn or measured: a frame whose decoding failed left `xyz`
      // the frame before's (or half overwritten), which until 2026-12-03 went into the snapshot.
      bool decoded = false;
      if (!resp.has_error()) {
        if (auto st = decoder.Decode(resp, xyz); !st.ok()) {
          failed = true;
          if (decode_error.empty()) decode_error = absl::StrCat("frame ", f, ": ", st.message());
        } else {
          decoded = true;
        }
      }
      if (resp.has_quality()) {
        const v1::QualityReport& r = resp.quality();
        q.frames_inside += r.inside_vertices() > 0;
        if (r.inside_vertices() > q.worst_inside) {
          q.worst_inside = r.inside_vertices();
          q.worst_frame = static_cast<uint64_t>(f);
        }
        q.rest_inside = r.rest_inside_vertices();
        q.frames_new += r.new_inside_vertices() > 0;
        if (r.exposed_vertices() > q.worst_exposed) {
          q.worst_exposed = r.exposed_vertices();
          q.worst_exposed_frame = static_cast<uint64_t>(f);
        }
        if (r.new_inside_vertices() > q.worst_new) {
          q.worst_new = r.new_inside_vertices();
          q.worst_new_frame = static_cast<uint64_t>(f);
        }
        if (r.has_new_deepest_vertex() && (q.deepest_frame < 0 || r.new_max_depth() > q.new_depth)) {
          q.deepest_frame = f;
          q.deepest_vertex = r.new_deepest_vertex();
          q.deepest_joint = r.new_deepest_joint();
        }
        q.new_depth = std::max(q.new_depth, r.new_max_depth());
        q.touching = std::max<uint64_t>(q.touching, r.touching_vertices());
        q.max_depth = std::max(q.max_depth, r.max_depth());
        q.volume_min = std::min(q.volume_min, r.volume_ratio());
        q.volume_max = std::max(q.volume_max, r.volume_ratio());
        q.stretch_min = std::min(q.stretch_min, r.edge_stretch_min());
        q.stretch_max = std::max(q.stretch_max, r.edge_stretch_max());
      }
      for (char c : resp.vertex_states()) {
        const unsigned st = static_cast<unsigned char>(c);
        if (!baseline) {
          ++states[std::min(st, 5u)];
          continue;
        }
        ((st & 3) == 1 ? on_bone : on_sphere)++;
        degenerate += (st & 4) != 0;
        rigid += (st & (8u << 3)) != 0;
      }
      if (procedural && static_cast<size_t>(f) % kCycle == kCycle / 2 && peak.empty() && decoded) peak = xyz;
      for (size_t k = 0; k < snap.frames.size(); ++k) {
        if (snap.frames[k] == f && decoded) shots.back()[k] = xyz;
      }
      errors += failed;
      ok_frames += !failed;
      // The latency and rate are the frames answered without error's: a refusal answered at once
      // (overloaded, out of range) pulled them down and up until 2026-12-07, as sinew-load's did
      // before 2026-12-03.
      if (!failed) lat.Add(frame_ms);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    if (stream) {
      if (auto st = stream->Close(); !st.ok()) return broken(st);
    }
    session_closed = true;
    // Its frames are measured: reported whatever the close says, and the next methods play
    // (until 2026-12-03 a failed close dropped this method's report and the rest of the run).
    if (auto closed = c.CloseSession(session->session_id()); !closed.ok()) {
      std::fprintf(stderr, "%s: closing its session failed: %s\n", spec.c_str(), closed.status().ToString().c_str());
      status = 1;
    }
    const double p50 = lat.Percentile(50), p99 = lat.Percentile(99), mx = lat.Max();
    std::string quality;
    if (procedural && !peak.empty() && limb.bones >= 3) {  // fewer: no wrist and elbow apart
      const double x_wrist = limb.length * (limb.bones - 1) / limb.bones;
      const double x_elbow = limb.length * std::max<uint32_t>(1, limb.bones / 2) / limb.bones;
      quality = absl::StrFormat(
          "; at peak (bend %.0f deg, twist %.0f deg): wrist radius %.3f, elbow radius %.3f "
          "(rest %.3f)",
          LimbMotion{}.bend_degrees, LimbMotion{}.twist_degrees,
          LimbRingRadius(limb, peak, x_wrist), LimbRingRadius(limb, peak, x_elbow), limb.radius);
    }
    if (use.vertex_states && baseline) {
      const double n = std::max<double>(1, double(on_bone + on_sphere));
      quality += absl::StrFormat(
          "; point-frames: %.1f%% on bones, %.1f%% on joint arcs and end caps, %.2f%% at a degenerate joint, "
          "%.2f%% moved rigidly with their bone",
          100 * on_bone / n, 100 * on_sphere / n, 100 * degenerate / n, 100 * rigid / n);
    } else if (use.vertex_states) {
      const double n = std::max<double>(1, double(states[0] + states[1] + states[2] + states[3] + states[4] + states[5]));
      quality += absl::StrFormat(
          "; vertex-frames: %.1f%% converged, %.2f%% stopped at contacts, %.2f%% at the iteration limit or a "
          "null gradient, %.2f%% kept at DQS (left their field), %.1f%% untracked",
          100 * states[1] / n, 100 * states[2] / n, 100 * (states[3] + states[4]) / n, 100 * states[5] / n,
          100 * states[0] / n);
    }
    const bool measured = want_quality && q.volume_max >= q.volume_min;  // some frame carried a report
    const std::string deepest =
        q.deepest_frame < 0 ? std::string()
                            : absl::StrFormat(" in frame %lld at vertex %u%s%s", q.deepest_frame, q.deepest_vertex,
                                              q.deepest_joint.empty() ? "" : ", joint ", q.deepest_joint);
    if (measured) {
      quality += q.frames_inside == 0
                     ? std::string("; skin: no vertex inside the skin in any frame")
                     : absl::StrFormat("; skin: %llu of %lld frames with vertices inside the skin (worst: frame %llu, "
                                       "%llu vertices; deepest %.4g%s)",
                                       (unsigned long long)q.frames_inside, frames, (unsigned long long)q.worst_frame,
                                       (unsigned long long)q.worst_inside, q.max_depth,
                                       q.rest_inside > 0 ? "" : deepest);
      if (q.rest_inside > 0) {  // a rig inside itself at rest: what the poses added
        quality += absl::StrFormat(", %llu inside already at rest; ", (unsigned long long)q.rest_inside);
        quality += q.frames_new == 0
                       ? std::string("no frame with vertices inside that were not at rest")
                       : absl::StrFormat("%llu frames with vertices inside that were not at rest (worst: frame %llu, "
                                         "%llu vertices; deepest %.4g%s)",
                                         (unsigned long long)q.frames_new, (unsigned long long)q.worst_new_frame,
                                         (unsigned long long)q.worst_new, q.new_depth, deepest);
        quality += q.worst_exposed == 0
                       ? std::string("; no vertex inside at rest brought out of the skin")
                       : absl::StrFormat("; at most %llu vertices inside at rest brought out of the skin (frame %llu)",
                                         (unsigned long long)q.worst_exposed, (unsigned long long)q.worst_exposed_frame);
      }
      quality += absl::StrFormat(", up to %llu touching at contacts, volume %+.2f%% to %+.2f%% of rest, edges "
                                 "stretched x%.3f to x%.3f",
                                 (unsigned long long)q.touching, 100 * (q.volume_min - 1), 100 * (q.volume_max - 1),
                                 q.stretch_min, q.stretch_max);
    }
    if (json) {
      // --quality: the same summary as the text's, as numbers (the deepest new inside vertex's
      // frame, vertex and joint only when some frame had one).
      std::string quality_json;
      if (measured) {
        quality_json = absl::StrFormat(
            ",\"quality\":{\"frames_inside\":%llu,\"worst_frame\":%llu,\"worst_inside\":%llu,\"max_depth\":%.9g,"
            "\"rest_inside\":%llu,\"frames_new\":%llu,\"worst_new_frame\":%llu,\"worst_new\":%llu,"
            "\"new_max_depth\":%.9g,\"touching_max\":%llu,\"volume_ratio_min\":%.9g,\"volume_ratio_max\":%.9g,"
            "\"edge_stretch_min\":%.9g,\"edge_stretch_max\":%.9g,\"worst_exposed\":%llu,\"worst_exposed_frame\":%llu",
            (unsigned long long)q.frames_inside, (unsigned long long)q.worst_frame, (unsigned long long)q.worst_inside,
            q.max_depth, (unsigned long long)q.rest_inside, (unsigned long long)q.frames_new,
            (unsigned long long)q.worst_new_frame, (unsigned long long)q.worst_new, q.new_depth,
            (unsigned long long)q.touching, q.volume_min, q.volume_max, q.stretch_min, q.stretch_max,
            (unsigned long long)q.worst_exposed, (unsigned long long)q.worst_exposed_frame);
        if (q.deepest_frame >= 0) {
          quality_json += absl::StrFormat(",\"new_deepest_frame\":%lld,\"new_deepest_vertex\":%u,\"new_deepest_joint\":%s",
                                          q.deepest_frame, q.deepest_vertex, JsonString(q.deepest_joint));
        }
        quality_json += "}";
      }
      std::printf(
          "{\"method\":\"%s\",\"backend\":\"%s\",\"frames\":%lld,\"vertices\":%u,\"seconds\":%.4f,"
          "\"frames_per_s\":%.2f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"errors\":%llu,\"bytes\":%llu%s}\n",
          name, on, frames, session->vertex_count(), secs, ok_frames / secs, p50, p99, mx,
          (unsigned long long)errors, (unsigned long long)bytes, quality_json.c_str());
    } else {
      std::string wire;
      if (session->encoding() != v1::OUTPUT_ENCODING_FLOAT32 && ok_frames > 0) {  // of the frames answered
        const double f32 = 12.0 * session->vertex_count();
        wire = absl::StrFormat(", positions %.1f kB a frame (%.3f of float32's)", bytes / 1e3 / ok_frames,
                               bytes / (f32 * ok_frames));
      }
      std::printf("%s (%s): %lld frames x %u vertices in %.2f s over %s: %.1f frames/s, latency p50 %.2f ms, "
                  "p99 %.2f ms, max %.2f ms, %llu errors%s%s\n",
                  name, on, frames, session->vertex_count(), secs, stream ? "StreamDeform" : "Deform",
                  ok_frames / secs, p50, p99, mx, (unsigned long long)errors, wire.c_str(), quality.c_str());
    }
    if (!frame_error.empty()) {
      std::fprintf(stderr, "%s: %s%s\n", name, frame_error.c_str(),
                   other_frame_errors ? absl::StrCat(" (and ", other_frame_errors, " frames failed otherwise)").c_str() : "");
    }
    if (!decode_error.empty()) std::fprintf(stderr, "%s: positions did not decode: %s\n", name, decode_error.c_str());
    if (fallback_frames > 0) {
      std::fprintf(stderr, "%s: %llu frames came from the method's fallback, not from %s: its preparation was "
                   "cancelled or failed (`sinew rig %s` lists it with its error); counted as errors\n", name,
                   (unsigned long long)fallback_frames, name, rig_id.c_str());
    }
    if (errors) status = 1;
  }
  if (!snap.path.empty()) {
    client::SnapshotGrid grid;
    grid.rest = source.rest;
    grid.triangles = source.triangles;
    grid.row_labels = specs;
    for (long long f : snap.frames) grid.column_labels.push_back(absl::StrCat("frame ", f));
    for (const auto& row : shots) {
      grid.cells.emplace_back();
      for (const auto& cell : row) grid.cells.back().emplace_back(cell);
    }
    auto image = client::RenderSnapshot(grid, snap.options);
    if (!image.ok()) return Fail(image.status());
    if (auto st = client::WritePng(snap.path, *image); !st.ok()) return Fail(st);
    std::fprintf(text_out, "snapshot %s: %zu methods x %zu frames, %dx%d pixels\n", snap.path.c_str(), shots.size(),
                snap.frames.size(), image->width, image->height);
    // How far each method's frame is from the first method's: where to look.
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (size_t i = 0; i < source.rest.size(); ++i) lo[i % 3] = std::min<double>(lo[i % 3], source.rest[i]), hi[i % 3] = std::max<double>(hi[i % 3], source.rest[i]);
    const double diag = std::sqrt(std::pow(hi[0] - lo[0], 2) + std::pow(hi[1] - lo[1], 2) + std::pow(hi[2] - lo[2], 2));
    for (size_t m = 1; m < shots.size(); ++m) {
      std::string line;
      for (size_t k = 0; k < snap.frames.size(); ++k) {
        const auto &a = shots[0][k], &b = shots[m][k];
        if (a.empty() || b.empty()) {  // a frame that failed (or a method without a session) is not drawn
          absl::StrAppendFormat(&line, "%s frame %lld n/a (not drawn)", k ? "," : "", snap.frames[k]);
          continue;
        }
        double far = 0;
        for (size_t v = 0; v + 2 < a.size() && a.size() == b.size(); v += 3) {
          far = std::max<double>(far, std::hypot(a[v] - b[v], a[v + 1] - b[v + 1], a[v + 2] - b[v + 2]));
        }
        absl::StrAppendFormat(&line, "%s frame %lld %.2f%%", k ? "," : "", snap.frames[k], 100 * far / diag);
      }
      std::fprintf(text_out, "  %s vs %s, farthest vertex apart (of the rest diagonal):%s\n", specs[m].c_str(), specs[0].c_str(), line.c_str());
    }
  }
  return status;
}

// Whether `path` exists, and a file's size (0 if unknown), without the exceptions the plain
// std::filesystem calls throw on EACCES or a stale NFS handle (inside a frame's callback one
// ended the client in std::terminate, leaving its session open, until 2026-12-03).
bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}
uintmax_t FileSize(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  return ec ? 0 : size;
}

// Temporaries an interrupted or killed run left in the folders of these outputs (files: their
// folder; folders: themselves), untouched for an hour (RemoveStaleTemporaries): until 2026-12-03
// a merged cache's temporary, as large as the cache, stayed on a shared volume for good.
void RemoveStaleOutputTemporaries(const std::vector<std::string>& files, const std::vector<std::string>& folders) {
  std::vector<std::string> dirs = folders;
  for (const std::string& f : files) {
    if (!f.empty()) dirs.push_back(std::filesystem::path(f).parent_path().string());
  }
  for (std::string& d : dirs) {
    if (d.empty()) d.push_back('.');  // the working folder (= "." trips GCC 12's -Wrestrict, a false positive)
    const int removed =
        RemoveStaleTemporaries(d, kStaleTemporaryAge, {".pc2", ".glb", ".obj", ".job", ".manifest"},
                               /*earlier_names=*/false);  // the user's folders: only names AtomicFile makes
    if (removed > 0) std::fprintf(stderr, "sinew: removed %d stale temporaries in %s\n", removed, d.c_str());
  }
}

// A file-name flag given a folder (or a name ending in '/'): "" when `name` is not one. Refused
// before the batch: --gltf renders/ (an existing folder) failed only when the baked clip was
// written, after the whole bake, until 2026-12-03.
std::string FolderGivenAsFile(const client::Args& args, const std::string& name) {
  const std::string v = args.Get(name);
  std::error_code ec;
  if (v.empty() || (v.back() != '/' && !std::filesystem::is_directory(v, ec))) return "";
  return absl::StrCat("--", name, ": '", v, "' is a folder; give a file's path");
}

// Deforms every frame of a clip on the server and writes a .pc2 point cache and/or an OBJ
// sequence, resuming after the last frame already on disk.
int Batch(client::Client& c, client::Args& args) {
  const auto& pos = args.positional();
  if (pos.size() != 2) return Usage(args, "batch takes one asset file");
  const std::string gltf = args.Get("gltf"), obj_dir = args.Get("obj");
  if (args.Get("pc2").empty() && obj_dir.empty() && gltf.empty()) {
    return Usage(args, "batch: give --pc2 FILE, --gltf FILE.glb and/or --obj DIR");
  }
  for (const char* name : {"pc2", "gltf"}) {
    if (const std::string error = FolderGivenAsFile(args, name); !error.empty()) return Usage(args, error);
  }
  if (args.Has("quality") && gltf.empty()) return Usage(args, "batch --quality: goes with --gltf (it is stored in the .glb)");
  // --gltf without --pc2 bakes into a point cache beside the .glb (FILE.glb.part.pc2), which
  // makes the batch resumable like any other; the .glb is written from the complete cache when
  // the last frame is in, and the part file is then removed.
  const bool part_cache = args.Get("pc2").empty() && !gltf.empty();
  const std::string pc2 = part_cache ? gltf + ".part.pc2" : args.Get("pc2");
  double clip_fps;
  if (!args.GetDouble("clip-fps", &clip_fps, 1.0 / 60, 1e6)) return Usage(args, args.error());
  v1::DeformerConfig deformer;
  std::vector<v1::Method> stages;
  if (std::string error; !ParseDeformer(args, args.Get("method"), &deformer, &stages, &error)) return Usage(args, error);
  if (const std::string unused = UnusedMethodFlag(args, {stages}); !unused.empty()) return Usage(args, unused);
  const bool resume = !args.Has("no-resume");
  long long max_frames = 0;
  if (!args.GetInt("max-frames", &max_frames, 0, 1LL << 40)) return Usage(args, args.error());
  // --shard I/N, or N with the index from $JOB_COMPLETION_INDEX (a Kubernetes Indexed Job's).
  std::optional<client::Shard> shard;
  if (args.Has("shard") && args.Has("shard-from-env")) return Usage(args, "give --shard or --shard-from-env, not both");
  if (args.Has("shard")) {
    auto s = client::ParseShard(args.Get("shard"));
    if (!s.ok()) return Usage(args, std::string(s.status().message()));
    shard = *s;
  } else if (args.Has("shard-from-env")) {
    long long n = 0;
    if (!args.GetInt("shard-from-env", &n, 1, client::kMaxShards)) return Usage(args, args.error());
    auto s = client::ShardFromEnvironment(static_cast<uint64_t>(n));
    if (!s.ok()) return Usage(args, std::string(s.status().message()));
    shard = *s;
  }
  if (shard && !gltf.empty()) {
    return Usage(args, "--gltf writes the whole clip: bake the shards with --pc2, join them with merge-shards, "
                       "then run batch --gltf with --pc2 naming the merged cache (it resumes past every frame)");
  }

  // The session's flags, checked before the asset is loaded or the server asked, as play and
  // session create check them (until 2026-12-07 a typo in --backend or --encoding was named only
  // after the load, or masked by "cannot connect").
  v1::CreateSessionRequest sreq;
  {
    v1::Backend backend;
    if (!ParseBackend(args.Get("backend"), &backend)) return Usage(args, "--backend: auto, cpu or gpu");
    sreq.set_backend(backend);
    if (std::string error; !client::EncodingFromFlags(args, &sreq, &error)) return Usage(args, error);
  }
  {
    long long points = 0;
    if (!args.GetInt("point-set", &points, 0, 50'000'000)) return Usage(args, args.error());
    if (args.Has("quality") && points > 0) {
      return Usage(args, "batch --quality: measures a mesh's skin (not a --point-set)");
    }
  }

  auto asset = LoadAsset(pos[1]);
  if (!asset.ok()) return Fail(asset.status());
  if (auto st = ApplyPointSet(args, *asset, c); !st.ok()) return Fail(st);
  auto clip = ChooseClip(*asset, args.Get("clip"));
  if (!clip.ok()) return Fail(clip.status());
  // Checked here as the server will (its weights also name the joint at each frame's deepest fold
  // for --quality).
  const absl::StatusOr<Rig> built = BuildRig(asset->rig);
  if (!built.ok()) {
    return Fail(absl::Status(built.status().code(), absl::StrCat(pos[1], ": ", built.status().message())));
  }
  if (args.Has("quality") && asset->rig.rig.triangles.empty()) {
    return Usage(args, "batch --quality: measures a mesh's skin (not a --point-set)");
  }
  const uint32_t points = static_cast<uint32_t>(asset->rig.rig.vertex_count());
  const uint64_t total = ClipFrameCount(**clip, clip_fps);
  if (!gltf.empty() && total > client::kMaxGltfFrames) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--gltf: the clip has ", total, " frames at --clip-fps ", clip_fps,
                                                        ", more than the ", client::kMaxGltfFrames,
                                                        " a .glb of morph targets holds here; bake a lower --clip-fps")));
  }
  if (const uint64_t bytes = client::GltfClipBinaryBytes(points, asset->rig.rig.triangles.size(), total);
      !gltf.empty() && bytes > client::kMaxGlbBinaryBytes) {
    // Refused before the batch, not after hours of it.
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--gltf: ", total, " frames of ", points, " vertices need ", bytes / 1000000,
        " MB, more than a .glb holds (4 GiB); bake a lower --clip-fps, or write only --pc2")));
  }
  // This run's frames: the whole clip, or its shard's slice.
  const client::FrameRange range = shard ? client::ShardFrames(total, *shard) : client::FrameRange{0, total};
  if (auto st = c.WaitReady(); !st.ok()) return Fail(st);
  std::string fallback;  // what serves the session while its method prepares (swing-twist, pbs)
  {
    auto info = c.GetServerInfo();
    if (!info.ok()) return Fail(info.status());
    deformer.Clear();  // again, now with the server's parameter names for --param
    if (std::string error; !ParseDeformer(args, args.Get("method"), &deformer, &stages, &error, &*info)) {
      return Usage(args, error);
    }
    const MethodUse use = UseOf(*info, stages);
    if (!use.pose || use.cages) {
      return Usage(args, "--method: batch plays a skeleton clip: methods posed by the skeleton alone (lbs, dqs, blend, "
                         "implicit, elastic-implicit, swing-twist, pbs, or a pipeline of them)");
    }
    fallback = FallbackOf(*info, stages);
  }

  // What the session and the batch will be (rig, deformer, encoding, clip), before any upload:
  // a shard's manifest names the job by them.
  const std::string rig_bytes = v1::SerializeRigDeterministic(client::RigToProto(asset->rig));
  sreq.set_rig_id(v1::Sha256Hex(rig_bytes));
  *sreq.mutable_deformer() = deformer;
  v1::DeformClipRequest req;
  client::ClipToProto(**clip, *req.mutable_clip()->mutable_clip());
  req.mutable_clip()->set_frames_per_second(clip_fps);

  const std::string stem = std::filesystem::path(pos[1]).stem().string();
  // A shard writes its own part and a manifest; an existing manifest must be this job's.
  const std::string cache_path = shard && !pc2.empty() ? client::ShardPartPath(pc2, *shard) : pc2;
  std::string manifest_path;
  client::ShardManifest manifest;
  bool have_manifest = false;
  absl::Status other_job;  // the manifest there names another job (SameShardJob)
  // The job: the rig, deformer, backend, encoding and clip at its rate (not the frame range).
  const std::string job = v1::Sha256Hex(absl::StrCat("sinew batch job 1\n", Deterministic(sreq), "\n", Deterministic(req)));
  // The outputs' folders are made, as --obj's is (until 2026-12-03 only a shard's --pc2 folder
  // was; an unsharded batch into a new folder failed writing its job record).
  for (const std::string& out : {pc2, gltf}) {
    const auto parent = std::filesystem::path(out).parent_path();
    std::error_code ec;
    if (!out.empty() && !parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) return Fail(absl::FailedPreconditionError(absl::StrCat(parent.string(), ": ", ec.message())));
  }
  RemoveStaleOutputTemporaries({pc2, gltf}, obj_dir.empty() ? std::vector<std::string>{} : std::vector{obj_dir});
  if (shard) {
    manifest_path = client::ShardManifestPath(pc2, obj_dir, *shard);
    manifest.job = job;
    manifest.shard = *shard;
    manifest.total_frames = total;
    manifest.frames = range;
    manifest.points = points;
    manifest.stem = stem;
    if (resume) {
      auto existing = client::ReadShardManifest(manifest_path);
      if (existing.ok()) {
        other_job = client::SameShardJob(*existing, manifest, manifest_path);
        manifest.backend = existing->backend;
        have_manifest = true;
      } else if (!absl::IsNotFound(existing.status())) {
        return Fail(existing.status());
      }
    }
  }

  // Where to start: the frames already complete on disk.
  // A cache holds frames once one is complete: a run that failed before its first frame (the
  // server refused the session or the clip) leaves a header and its job's record, which the
  // corrected run replaces (until 2026-12-03 it was refused as another batch's). One that cannot
  // be read counts as holding frames.
  const auto holds_frames = [](const std::string& path) {
    if (!Exists(path)) return false;
    const auto info = client::InspectPc2(path);
    return !info.ok() || info->complete_frames > 0;
  };
  std::optional<client::Pc2Writer> cache;
  uint64_t first = range.end;
  if (!obj_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(obj_dir, ec);
    if (ec) return Fail(absl::InvalidArgumentError(absl::StrCat("--obj ", obj_dir, ": ", ec.message())));
  }
  // One run at a time on these outputs, locked before anything of them is read, removed or
  // written (a Kubernetes Indexed Job can run two pods for one index: until 2026-12-07 the second
  // could remove or cut the first's files under it). A shard's outputs are its own (its part of
  // the cache; with --obj alone its manifest and frames): with --obj alone its lock names the
  // shard, as its part does with --pc2 (until 2026-12-07 every shard locked DIR/STEM.lock, and
  // the shards of one clip could not run at once).
  std::optional<client::OutputLock> run_lock;
  if (!cache_path.empty() || !obj_dir.empty()) {
    const std::string obj_lock = shard ? absl::StrCat(stem, ".", client::ShardName(*shard), ".lock") : stem + ".lock";
    const std::string lock_path = !cache_path.empty() ? cache_path + ".lock"
                                                      : (std::filesystem::path(obj_dir) / obj_lock).string();
    auto locked = client::OutputLock::Acquire(lock_path);
    if (!locked.ok()) return Fail(locked.status());
    run_lock.emplace(std::move(*locked));
  }
  // OBJ frames of this stem the run would count as its own: an unsharded batch owns every frame
  // of its stem from the clip's first (those past a shorter clip's end too), a shard its range.
  std::string obj_found;
  if (!obj_dir.empty()) {
    auto found = client::FirstObjFrame(obj_dir, stem, range.begin,
                                       shard ? range.end : std::numeric_limits<uint64_t>::max());
    if (!found.ok()) return Fail(found.status());
    obj_found = *found;
  }
  // A shard's manifest of another job claims its files only where that job wrote frames: one that
  // failed before its first (another backend asked, the server refused the session, a preparation
  // failed or was interrupted) left none, and the corrected command writes there, as an unsharded
  // one does (until 2026-12-07 a shard was refused "started for another job" then; until the
  // review of 2026-12-07, once its session had existed).
  if (!other_job.ok()) {
    if ((!pc2.empty() && holds_frames(cache_path)) || !obj_found.empty()) return Fail(other_job);
    have_manifest = false;
    manifest.backend.clear();
  }
  if (resume && shard && !have_manifest && !pc2.empty() && holds_frames(cache_path)) {
    // As OBJ frames below: until 2026-12-07 such a part was resumed, and another job's frames
    // came first in the merged cache.
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        cache_path, ": this shard's part holds frames, but no manifest (", manifest_path,
        ") names this job: they may be another batch's; --no-resume starts this shard over, or write elsewhere")));
  }
  // Frames on disk that no record of this job names are refused, not replaced: they may be a
  // DCC's export or another batch's (until 2026-12-03 an unsharded run whose first frame was
  // missing, or a shard without its manifest, removed every such file, --no-resume or not).
  if (resume && shard && !have_manifest && !obj_found.empty()) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        obj_found, ": an OBJ frame in this shard's range, but no manifest (", manifest_path,
        ") names this job: it may be another batch's or an export's; --no-resume replaces this shard's frames, "
        "or write elsewhere")));
  }
  const bool obj_fresh = !obj_dir.empty() && (shard ? !have_manifest
                                                   : !(resume && Exists(
                                                                     client::ObjFramePath(obj_dir, stem, range.begin))));
  // An unsharded output's record: the job, then (once a session ran) the backend its frames came
  // from, "" while none did.
  struct Record {
    std::string path;
    std::string backend;
  };
  std::vector<Record> records;
  std::vector<std::string> fresh_records;  // written once their outputs are emptied
  if (!shard) {
    // An unsharded batch's outputs name the job they hold (OUT.pc2.job, OBJ_DIR/STEM.job; a
    // shard's manifest does it for its part), so that a run resumes only its own job's frames:
    // another method, rig, clip or rate into the same files is refused instead of appended.
    struct Output {
      std::string record;
      bool has_frames;
      std::string what;  // a file holding them
    };
    std::vector<Output> outputs;
    if (!pc2.empty()) outputs.push_back({client::Pc2JobPath(pc2), holds_frames(pc2), pc2});
    if (!obj_dir.empty()) outputs.push_back({client::ObjJobPath(obj_dir, stem), !obj_found.empty(), obj_found});
    for (const Output& o : outputs) {
      if (!(resume && o.has_frames)) {
        fresh_records.push_back(o.record);
        continue;
      }
      std::ifstream in(o.record);
      std::string held, backend_line;
      std::getline(in, held);
      std::getline(in, backend_line);
      if (held.empty()) {
        return Fail(absl::FailedPreconditionError(absl::StrCat(
            o.record, " is missing: ", o.what, " may hold another batch's frames, or an export's; --no-resume "
            "replaces them, or write elsewhere")));
      }
      if (held != job) {
        return Fail(absl::FailedPreconditionError(absl::StrCat(
            o.record, ": these files hold another batch's frames (a different rig, method, parameters, backend, "
                      "encoding, clip or rate); --no-resume starts over, or write elsewhere")));
      }
      records.push_back({o.record, absl::StartsWith(backend_line, "backend ") ? backend_line.substr(8) : ""});
    }
  }
  // Starting an output over removes what it held before a record names this job, so that no
  // old frame is taken for this job's: until 2026-12-03 a --no-resume run kept the other job's
  // OBJ frames past the ones it wrote (and a later resume counted them as done), and wrote the
  // record before it emptied the cache.
  if (obj_fresh) {
    if (auto st = client::RemoveObjFrames(obj_dir, stem, range.begin,
                                          shard ? range.end : std::numeric_limits<uint64_t>::max());
        !st.ok()) {
      return Fail(st);
    }
  }
  if (!pc2.empty() && !(resume && holds_frames(cache_path))) {
    std::error_code ec;
    std::filesystem::remove(cache_path, ec);
    if (ec) return Fail(absl::FailedPreconditionError(absl::StrCat(cache_path, ": ", ec.message())));
  }
  for (const std::string& record : fresh_records) {
    if (auto st = WriteFileAtomically(record, job + "\n"); !st.ok()) return Fail(st);
    records.push_back({record, ""});
  }
  if (shard && !have_manifest) {
    // Written before any frame, so that every part on disk has one. Its backend is known once
    // the session exists (rewritten then); "none" until then, and for a shard with no frames.
    manifest.backend = "none";
    if (auto st = client::WriteShardManifest(manifest_path, manifest); !st.ok()) return Fail(st);
  }
  if (!pc2.empty()) {
    auto w = client::Pc2Writer::Open(cache_path, points, 0.0f, 1.0f, resume && holds_frames(cache_path));
    if (!w.ok()) return Fail(w.status());
    cache.emplace(std::move(*w));
    first = std::min<uint64_t>(first, range.begin + cache->frames());
  }
  uint64_t obj_have = range.begin;  // the OBJ frames before it are this job's, on disk
  if (!obj_dir.empty()) {
    while (!obj_fresh && obj_have < range.end && Exists(client::ObjFramePath(obj_dir, stem, obj_have))) {
      ++obj_have;
    }
    first = std::min(first, obj_have);
  }
  if (cache && cache->frames() > range.size()) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        cache_path, ": holds ", cache->frames(), " frames, more than the ", shard ? "shard's " : "clip's ", range.size())));
  }
  const std::string shard_text =
      shard ? absl::StrCat("; shard ", shard->index, " of ", shard->count, ": ",
                           range.size() == 0 ? std::string("no frames")
                                             : absl::StrCat("frames ", range.begin, " to ", range.end - 1))
            : std::string();
  std::fprintf(stderr, "batch %s, clip \"%s\": %llu frames at %g frames/s, %u vertices%s; %s\n",
               pos[1].c_str(), (*clip)->name.c_str(), (unsigned long long)total, clip_fps, points, shard_text.c_str(),
               first > range.begin ? absl::StrCat("resuming at frame ", first).c_str() : "starting");
  if (first < range.end) {
    auto up = c.UploadSerializedRig(rig_bytes);
    if (!up.ok()) return Fail(up.status());
    sreq.set_rig_id(up->rig_id());
    client::ClosedOnInterrupt interrupt_closes(c);  // Ctrl-C (also during the create), then resume
    auto session = c.CreateSession(sreq);
    if (!session.ok()) return Fail(session.status());
    interrupt_closes.Set(session->session_id());
    // Closed however the run ends (until 2026-12-03 a record or manifest that could not be
    // written left it open on the server until its idle TTL, holding a session of the quota).
    absl::Cleanup close_session = [&] { (void)c.CloseSession(session->session_id()); };
    // Every frame of a cache from one backend: a GPU's floats need not equal a CPU's. Until
    // 2026-12-03 only shards checked: an unsharded --backend auto run resumed on another server
    // (or after a fallback to the CPU) appended the other backend's frames silently.
    const std::string on = session->backend() == v1::BACKEND_GPU ? "gpu" : "cpu";
    for (Record& r : records) {
      if (!r.backend.empty() && r.backend != on) {
        return Fail(absl::FailedPreconditionError(absl::StrCat(
            r.path, ": this batch's frames so far ran on the ", r.backend, ", this server gave the ", on,
            "; give --backend ", r.backend, ", or --no-resume to start over")));
      }
      if (r.backend.empty()) {
        r.backend = on;
        if (auto st = WriteFileAtomically(r.path, absl::StrCat(job, "\nbackend ", on, "\n")); !st.ok()) return Fail(st);
      }
    }
    if (shard) {
      // Frames of one backend only: a shard with none so far (`first` its first frame) takes
      // this server's, whatever its manifest's session ran on.
      if (manifest.backend != "none" && manifest.backend != on && first > range.begin) {
        return Fail(absl::FailedPreconditionError(absl::StrCat(
            manifest_path, ": this shard's frames so far ran on the ", manifest.backend, ", this server gave the ", on,
            "; give --backend ", manifest.backend, ", or --no-resume to start the shard over")));
      }
      if (manifest.backend != on) {
        manifest.backend = on;
        if (auto st = client::WriteShardManifest(manifest_path, manifest); !st.ok()) return Fail(st);
      }
    }

    // Every frame written is the method's: a session served by its fallback while the method
    // prepares waits for it (until 2026-12-04 a swing-twist or pbs batch wrote the fallback's
    // frames, DQS's or LBS's, into its outputs without a word).
    if (!fallback.empty()) {
      auto failed = WaitForPreparations(c, *session, fallback, stem);
      if (!failed.ok()) return Fail(failed.status());
      if (failed->has_value()) {
        return Fail(absl::FailedPreconditionError(absl::StrCat(
            "--method ", args.Get("method"), ": its preparation \"", (*failed)->key(), "\" failed: ", (*failed)->error(),
            " (nothing was written; `sinew rig ID` lists it; the server keeps the failure, not retried, until "
            "CancelPreparation forgets it or the rig is deleted)")));
      }
    }
    req.set_session_id(session->session_id());
    req.set_first_frame(first);
    // A history-dependent method replays the frames before `first` on the server, unsent: it says
    // how far it got every 10 s (and a proxy's idle timeout sees traffic).
    req.set_replay_progress_ms(10000);
    const uint64_t left = range.end - first;
    req.set_max_frames(max_frames > 0 ? std::min<uint64_t>(left, max_frames) : shard ? left : 0);
    client::Progress progress(stem, range.size());  // this run's frames: the clip's, or its shard's
    progress.Resume(first - range.begin);
    std::vector<float> xyz;
    client::PositionDecoder decoder;
    uint64_t expected = first;
    bool sent_any = false;
    absl::Status st = c.DeformClip(req, [&](const v1::DeformClipResponse& r) -> absl::Status {
      if (r.replayed() > 0) {  // before any frame is sent: the progress line is not drawn yet
        std::fprintf(stderr, "%s: the server replayed %llu of the %llu frames before frame %llu (a history-dependent "
                     "method plays them again from rest)\n", stem.c_str(), (unsigned long long)r.replayed(),
                     (unsigned long long)first, (unsigned long long)first);
        return absl::OkStatus();
      }
      if (!sent_any) {
        sent_any = true;
        progress.Resume(first - range.begin);  // the rate from the first frame sent, not from the replay
      }
      if (r.frame() != expected) {
        return absl::DataLossError(absl::StrCat("server sent frame ", r.frame(), ", expected ", expected));
      }
      if (r.total_frames() != total) {
        return absl::DataLossError(absl::StrCat("server counts ", r.total_frames(), " frames in the clip, this client ",
                                                total, " (another version's sampling of the clip?)"));
      }
      // A frame made by the fallback after all (the preparation cancelled meanwhile) is not the
      // method's; METHOD_UNSPECIFIED: a pipeline, or a server from before DeformClipResponse.method.
      if (stages.size() == 1 && r.method() != v1::METHOD_UNSPECIFIED && r.method() != stages[0]) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the server sent clip frame ", r.frame(), " from ", client::MethodName(r.method()), ", not from --method ",
            args.Get("method"),
            " (its preparation was cancelled or failed; `sinew rig` lists it); nothing of it was written"));
      }
      if (auto s = decoder.Decode(r, xyz); !s.ok()) return s;
      // Named by its clip frame (a shard's cache counts its own), and refused before any output
      // has it: OBJ frames were written with "nan" in them until 2026-12-03.
      for (size_t i = 0; i < xyz.size(); ++i) {
        if (!std::isfinite(xyz[i])) {
          return absl::DataLossError(absl::StrCat("the server sent clip frame ", r.frame(), " with point ", i / 3,
                                                  " not finite; nothing of it was written"));
        }
      }
      if (cache && r.frame() >= range.begin + cache->frames()) {
        if (auto s = cache->Append(xyz); !s.ok()) return s;
      }
      if (!obj_dir.empty()) {
        const std::string path = client::ObjFramePath(obj_dir, stem, r.frame());
        if (r.frame() >= obj_have) {
          if (auto s = client::WriteObjFrame(path, xyz, asset->rig.rig.triangles); !s.ok()) return s;
        }
      }
      progress.Update(++expected - range.begin);
      return absl::OkStatus();
    });
    progress.Finish();
    std::move(close_session).Invoke();
    const uint64_t asked_end = req.max_frames() > 0 ? first + req.max_frames() : range.end;
    if (st.ok() && expected < asked_end) {
      // The stream ended OK short of the frames asked: not a --max-frames stop.
      st = absl::DataLossError(absl::StrCat("the server ended the clip's stream after frame ", expected,
                                            " of the ", asked_end, " asked"));
    }
    if (!st.ok()) {
      if (cache) (void)cache->Close();
      std::fprintf(stderr, "sinew: batch stopped before frame %llu of %llu (the frames before it are written); run "
                   "the same command again to resume\n", (unsigned long long)expected, (unsigned long long)total);
      return Fail(st);
    }
    if (expected < range.end) {
      if (cache) {
        if (auto s = cache->Close(); !s.ok()) return Fail(s);
      }
      std::fprintf(stderr, "sinew: wrote frames %llu to %llu of %llu (--max-frames %llu); run the same command "
                   "again to continue%s\n", (unsigned long long)first, (unsigned long long)expected - 1,
                   (unsigned long long)total, max_frames,
                   gltf.empty() ? "" : " (the .glb is written once the last frame is in)");
      return 0;
    }
  }
  if (cache) {
    if (auto s = cache->Close(); !s.ok()) return Fail(s);
    if (!part_cache) std::printf("%s: %llu frames x %u points\n", cache_path.c_str(), (unsigned long long)range.size(), points);
  }
  if (!gltf.empty()) {
    // Written from the complete point cache on disk, whichever runs baked its frames.
    auto baked = client::ReadPc2(pc2);
    if (!baked.ok()) return Fail(baked.status());
    client::GltfClip out;
    out.name = stem;
    out.method = args.Get("method");
    out.clip_name = (*clip)->name;
    out.source = std::filesystem::path(pos[1]).filename().string();
    out.frames_per_second = clip_fps;
    out.rest = asset->rig.rig.positions;
    out.triangles = asset->rig.rig.triangles;
    for (const auto& f : baked->frames) out.frames.emplace_back(f);
    if (args.Has("quality")) {
      // The measure the server's FrameOutputs.quality reports (core/geometry/mesh_quality.h), run
      // here because DeformClip streams positions only.
      std::fprintf(stderr, "measuring the quality of %zu frames\n", baked->frames.size());
      ThreadPool pool(std::max(1u, std::thread::hardware_concurrency()));
      const MeshQualityMeasure measure(asset->rig.rig.positions, asset->rig.rig.triangles, {}, &pool);
      for (const auto& f : baked->frames) {
        const MeshQuality q = measure.Measure(f, &pool);
        const int32_t joint = q.new_deepest_vertex < 0 ? -1 : HeaviestJoint(built->weights, size_t(q.new_deepest_vertex));
        out.quality.push_back({q.inside_vertices, q.touching_vertices, q.max_depth, q.volume_ratio,
                               q.edge_stretch_min, q.edge_stretch_max, q.rest_inside_vertices,
                               q.new_inside_vertices, q.new_max_depth, q.new_deepest_vertex,
                               joint < 0 ? std::string() : built->skeleton.names[size_t(joint)],
                               q.exposed_vertices});
      }
    }
    if (auto s = client::WriteGltfClip(gltf, out); !s.ok()) return Fail(s);
    if (part_cache) {
      std::error_code ec;  // a part left behind is only disk space: the .glb is written
      std::filesystem::remove(pc2, ec);
      std::filesystem::remove(client::Pc2JobPath(pc2), ec);
    }
    std::printf("%s: %llu frames x %u vertices as morph targets, %.1f MB%s\n", gltf.c_str(), (unsigned long long)total,
                points, double(FileSize(gltf)) / 1e6, out.quality.empty() ? "" : ", with each frame's quality");
  }
  if (!obj_dir.empty()) {
    std::printf("%s: %llu OBJ frames (%s)\n", obj_dir.c_str(), (unsigned long long)range.size(),
                client::ObjFramePath(obj_dir, stem, range.begin).c_str());
  }
  if (shard) {
    std::fprintf(stderr, "sinew: shard %llu of %llu complete; when every shard is, join them with: sinew merge-shards%s%s%s%s\n",
                 (unsigned long long)shard->index, (unsigned long long)shard->count, pc2.empty() ? "" : " --pc2 ",
                 pc2.c_str(), obj_dir.empty() ? "" : " --obj ", obj_dir.c_str());
  }
  return 0;
}

// Joins the parts of a sharded batch (MergeShards) into the cache one run would have written.
int MergeShardsCommand(client::Args& args) {
  if (args.positional().size() != 1) return Usage(args, "merge-shards takes no operands: give --pc2 FILE and/or --obj DIR");
  client::MergeOptions o;
  o.pc2 = args.Get("pc2");
  o.obj_dir = args.Get("obj");
  if (o.pc2.empty() && o.obj_dir.empty()) return Usage(args, "merge-shards: give --pc2 FILE and/or --obj DIR");
  if (const std::string error = FolderGivenAsFile(args, "pc2"); !error.empty()) return Usage(args, error);
  RemoveStaleOutputTemporaries({o.pc2}, o.obj_dir.empty() ? std::vector<std::string>{} : std::vector{o.obj_dir});
  if (args.Has("shards")) {
    long long n = 0;
    if (!args.GetInt("shards", &n, 1, client::kMaxShards)) return Usage(args, args.error());
    o.shards = static_cast<uint64_t>(n);
  }
  auto merged = client::MergeShards(o);
  if (!merged.ok()) return Fail(merged.status());
  if (!o.pc2.empty()) {
    std::printf("%s: %llu frames x %u points from %llu shards\n", o.pc2.c_str(), (unsigned long long)merged->frames,
                merged->points, (unsigned long long)merged->shards);
  }
  if (!o.obj_dir.empty()) {
    std::printf("%s: all %llu OBJ frames present\n", o.obj_dir.c_str(), (unsigned long long)merged->frames);
  }
  return 0;
}

// The flags a command reads, beyond those every command takes (the connection's, --help and
// --json, which the commands that print only text or only JSON ignore, as --help says). A flag
// given to a command that does not read it is refused, naming it: until 2026-12-03 `sinew play
// char.fbx --pc2 out.pc2` exited 0 having written nothing, and `sinew batch --frames 100`
// baked the whole clip.
std::string FlagNotForCommand(const client::Args& args) {
  static const std::set<std::string> kEveryCommand = {"target", "token", "tls", "tls-ca", "tls-cert", "tls-key",
                                                      "tls-server-name", "affinity", "timeout", "connect-timeout", "help", "json"};
  static const std::set<std::string> kDeformer = {"method", "param", "skinning", "blend-weight", "operator",
                                                  "joint-operator", "encoding", "max-error", "key-interval",
                                                  "backend"};
  static const std::set<std::string> kLimb = {"vertices", "bones", "influences"};
  static const std::set<std::string> kAsset = {"clip", "clip-fps", "point-set"};
  static const std::set<std::string> kPlay = {"rig", "frames", "fps", "unary", "quality", "snapshot",
                                              "snapshot-frames", "snapshot-size", "snapshot-view", "snapshot-diff"};
  static const std::set<std::string> kBatch = {"quality", "pc2", "obj", "gltf", "max-frames", "no-resume", "shard",
                                               "shard-from-env"};
  const auto& pos = args.positional();
  const std::string& cmd = pos[0];
  std::string what = cmd;
  std::vector<const std::set<std::string>*> reads;
  if (cmd == "upload") {
    reads = {&kLimb};
  } else if (cmd == "session" && pos.size() > 1 && pos[1] == "create") {
    what = "session create";
    static const std::set<std::string> kRig = {"rig"};
    reads = {&kDeformer, &kRig};
  } else if (cmd == "play") {
    // The procedural limb without an asset file; an asset's clip with one.
    const bool file = pos.size() > 1;
    for (const std::string& flag : args.Given()) {
      if (flag == "point-set" && !file) return "--point-set: makes an asset's character into points: play FILE";
      if (!file && kAsset.count(flag) > 0) return absl::StrCat("--", flag, ": reads an asset's clip: play FILE");
      if (file && kLimb.count(flag) > 0) return absl::StrCat("--", flag, ": shapes the procedural limb, not FILE's rig");
    }
    what = "play";
    reads = {&kDeformer, &kPlay, &kAsset, &kLimb};
  } else if (cmd == "batch") {
    reads = {&kDeformer, &kAsset, &kBatch};
  } else if (cmd == "merge-shards") {
    static const std::set<std::string> kMerge = {"pc2", "obj", "shards"};
    reads = {&kMerge};
  } else if (cmd == "session" && pos.size() > 1) {
    what = "session " + pos[1];
  }
  for (const std::string& flag : args.Given()) {
    if (kEveryCommand.count(flag) > 0) continue;
    if (std::any_of(reads.begin(), reads.end(), [&](const auto* set) { return set->count(flag) > 0; })) continue;
    return absl::StrCat("--", flag, ": not a flag of ", what, " (see the flags' help for the commands that read it)");
  }
  return "";
}

}  // namespace

int Main(int argc, char** argv);

// The command's exit status, or 1 when its standard output could not be written (a full disk,
// a closed pipe, /dev/full): a JSON report cut short is a failure, not a 0.
int main(int argc, char** argv) {
  const int status = Main(argc, argv);
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "sinew: writing standard output failed: %s\n", std::strerror(errno));
    client::ExitNow(status != 0 ? status : 1);
  }
  client::ExitNow(status);
}

int Main(int argc, char** argv) {
  client::InstallInterruptHandler();  // before any thread starts: see clients/lib/interrupt.h
  client::QuietGrpcLog();
  client::Args args;
  args.Flag("target", "HOST:PORT", "127.0.0.1:50051", "server address");
  client::AddConnectionFlags(args);
  args
      .Flag("help", "", "", "print this text")
      .Flag("json", "", "", "print JSON instead of text: info, upload, rigs, session create and close, play (one object per method; its other lines go to stderr); rig, session get and list always print JSON; the other commands print text")
      .Flag("rig", "ID", "", "rig id (session create, play)")
      .Flag("method", "M", "lbs", "deformation method, one of `sinew info`'s methods (e.g. lbs, dqs, cage-mvc, implicit, blend, swing-twist), or a pipeline of them joined by '+' (cage-mvc+lbs, dqs+implicit); play: a comma-separated list")
      .Flag("encoding", "E", "f32", std::string("session create, play, batch: ") + client::kEncodingHelp)
      .Flag("max-error", "E", "1e-4", "--encoding delta: the largest distance of a decoded vertex from the exact one, as a fraction of the rig's bounding-box diagonal, [1e-7, 1e-2]")
      .Flag("key-interval", "N", "30", "--encoding delta: a key frame every N frames of a stream")
      .Flag("backend", "B", "auto", "session create, play, batch: backend preference auto, cpu or gpu")
      .Flag("vertices", "N", "20000", "procedural limb: vertex count (100 per ring)")
      .Flag("bones", "N", "3", "procedural limb: joints in the chain")
      .Flag("influences", "K", "2", "procedural limb: influences per vertex")
      .Flag("frames", "N", "0", "play: frames to send, looping the clip; 0 = one pass of an asset's clip, 240 for the limb")
      .Flag("fps", "F", "0", "play: frames per second to send at; 0 = as fast as answered")
      .Flag("unary", "", "", "play: one Deform call per frame instead of a StreamDeform stream")
      .Flag("clip", "NAME|INDEX", "", "play/batch FILE: which animation clip (default: the first)")
      .Flag("skinning", "lbs|dqs", "lbs", "play --method supercages: the skeletal skinning it couples with the cage")
      .Flag("param", "NAME=VALUE,...", "", "the method's parameters by name, as `sinew info` lists them (e.g. sigma=0.3,default_operator=bulge; not lists); in a pipeline STAGE.NAME=VALUE, STAGE its method or index (e.g. implicit.sigma=0.3); play with a list of methods: each goes to the methods that take it, and one that none takes is an error before anything plays")
      .Flag("blend-weight", "B", "", "--method blend: one LBS/DQS blend weight for every vertex, 0 = LBS … 1 = DQS (default: the rig's per-vertex \"dqs_blend\" attribute)")
      .Flag("operator", "OP", "contact", "implicit methods: joint operator union, clean-union, contact or bulge")
      .Flag("joint-operator", "J=OP,...", "", "implicit methods: operator of single joints (the child joint), e.g. 5=bulge")
      .Flag("clip-fps", "F", "30", "play/batch FILE: frames per second at which the clip is sampled, 1/60 to 1e6 (a frame's step, 1/F, is at most 60 s, as the server takes it); play holds at most 1 000 000 sampled frames")
      .Flag("quality", "", "", "play: ask the server for each frame's geometric quality report (vertices inside the skin and their depth, and which of them were not inside at rest; volume, edge stretch; FrameOutputs.quality) and print a summary; batch --gltf: measure each baked frame the same way (here, on the client) and store the reports in the .glb; not for point sets")
      .Flag("point-set", "N", "0", "play/batch FILE: deform N points sampled on the character's surface instead of its mesh, with a sphere-mesh made from its skeleton (for --method baseline; lbs and dqs get Gaussian weights on the same points); 0 = the mesh")
      .Flag("snapshot", "FILE.png", "", "play: also draw the deformed mesh as a PNG: a row per --method, a column per --snapshot-frames frame, one orthographic camera fitted to all of them (software rasterizer, flat shading)")
      .Flag("snapshot-frames", "F,...", "", "play --snapshot: the frames to draw (indices of the frames sent); default 4 spread over the run")
      .Flag("snapshot-size", "WxH", "320x400", "play --snapshot: pixels per cell, its label included")
      .Flag("snapshot-view", "VIEW,UP", "auto", "play --snapshot: camera axes, e.g. +x,+z (on the +x side looking back along x, z up); auto: the rest mesh's thinnest axis as view and longest as up")
      .Flag("snapshot-diff", "F", "0", "play --snapshot: tint the rows after the first red where they are far from the first row's frame (full red at F of the bounding box's diagonal, e.g. 0.02); 0: off")
      .Flag("pc2", "FILE", "", "batch: write frames to this .pc2 point cache (resumes if it exists)")
      .Flag("obj", "DIR", "", "batch: also write one OBJ file per frame into DIR")
      .Flag("gltf", "FILE", "", "batch: write the baked clip as a glTF 2.0 binary (.glb): the rest mesh, each frame a morph target, a STEP weights animation that plays them at --clip-fps (three.js, Blender, clients/web/); written when the last frame is in, from --pc2 or from FILE.part.pc2 beside it")
      .Flag("max-frames", "N", "0", "batch: write at most N frames in this run, then exit 0 (run again to continue); 0 = to the end")
      .Flag("no-resume", "", "", "batch: start over instead of resuming existing output")
      .Flag("shard", "I/N", "", "batch: deform only shard I (0-based) of N contiguous slices of the clip's frames, into --pc2's FILE.shard-I-of-N (+ .manifest) and --obj's DIR; join them with merge-shards")
      .Flag("shard-from-env", "N", "", "batch: as --shard I/N with I read from $JOB_COMPLETION_INDEX (what a Kubernetes Indexed Job sets in each pod)")
      .Flag("shards", "N", "", "merge-shards: how many shards the batch ran in (default: from the manifests' names)");
  if (!args.Parse(argc, argv, 1)) return Usage(args, args.error());
  const auto& pos = args.positional();
  if (args.Has("help") || (!pos.empty() && pos[0] == "help")) return Usage(args, "");
  if (pos.empty()) return Usage(args, "no command given");
  const std::string cmd = pos[0];
  if (const std::string unused = FlagNotForCommand(args); !unused.empty()) return Usage(args, unused);
  LimbOptions limb;
  if (!LimbFromArgs(args, &limb)) return Usage(args, args.error());

  if (cmd == "import") {
    if (pos.size() != 2) return Usage(args, "import takes one asset file");
    auto asset = LoadAsset(pos[1]);
    if (!asset.ok()) return Fail(asset.status());
    auto built = BuildRig(asset->rig);
    std::printf("%s: %zu vertices, %zu triangles, %zu joints (%zu bones), %zu meshes, %zu clips\n",
                pos[1].c_str(), asset->rig.rig.vertex_count(), asset->rig.rig.triangle_count(),
                asset->rig.rig.joint_count(), asset->bones, asset->meshes.size(), asset->clips.size());
    for (const auto& m : asset->meshes) {
      std::printf("  mesh %-24s %7u vertices %7u triangles %s\n", m.name.c_str(), m.vertex_count,
                  m.triangle_count, m.skinned ? "skinned" : "rigid");
    }
    for (const auto& clip : asset->clips) {
      size_t animated = 0;
      for (const auto& t : clip.tracks) animated += !t.empty();
      std::printf("  clip %-24s %8.3f s, %zu joints animated\n", clip.name.c_str(), clip.duration, animated);
    }
    if (!built.ok()) {
      return Fail(absl::Status(built.status().code(), absl::StrCat(pos[1], ": ", built.status().message())));
    }
    return 0;
  }
  if (cmd == "merge-shards") return MergeShardsCommand(args);  // local files only
  // The command and its operands are checked before connecting: a typo is a usage error, not
  // a 10 s wait for a server.
  static const char* const kServerCommands[] = {"info", "upload", "rigs", "rig", "delete-rig", "session", "play", "batch"};
  if (std::find(std::begin(kServerCommands), std::end(kServerCommands), cmd) == std::end(kServerCommands)) {
    return Usage(args, "unknown command '" + cmd + "'");
  }
  if ((cmd == "rig" || cmd == "delete-rig") && pos.size() != 2) return Usage(args, cmd + " takes one rig id");
  // Commands without operands (or play with one) refuse more: `sinew upload FILE` would upload
  // the procedural limb, and `sinew play a b` play only a.
  if ((cmd == "info" || cmd == "upload" || cmd == "rigs") && pos.size() > 1) {
    return Usage(args, cmd + " takes no operands ('" + pos[1] + "' given; play FILE plays an asset's rig)");
  }
  if (cmd == "play" && pos.size() > 2) return Usage(args, "play takes at most one asset file ('" + pos[2] + "' given too)");
  if (cmd == "session" && pos.size() > 1 && (pos[1] == "create" || pos[1] == "list") && pos.size() > 2) {
    return Usage(args, "session " + pos[1] + " takes no operands ('" + pos[2] + "' given)");
  }
  if (cmd == "session") {
    const std::string sub = pos.size() > 1 ? pos[1] : "";
    if (!(sub == "create" || sub == "list" || ((sub == "get" || sub == "close") && pos.size() == 3))) {
      return Usage(args, "session: create | get ID | list | close ID");
    }
  }
  const absl::StatusOr<client::ClientOptions> connection = client::ConnectionFromArgs(args);
  if (!connection.ok()) return Usage(args, std::string(connection.status().message()));
  client::Client c(args.Get("target"), *connection);
  // Commands that read local files first (play FILE, batch) connect after reading them, so
  // that a bad file is reported as such even when no server is reachable.
  // play and session create check their flags first too (until 2026-12-07 a typo there met a 10 s
  // wait for an unreachable server, and was never named).
  const bool local_first = cmd == "batch" || cmd == "play" || (cmd == "session" && pos.size() > 1 && pos[1] == "create");
  if (!local_first) {
    if (auto st = c.WaitReady(); !st.ok()) return Fail(st);
  }
  const bool json = args.Has("json");

  if (cmd == "info") {
    auto info = c.GetServerInfo();
    if (!info.ok()) return Fail(info.status());
    if (json) {
      std::printf("%s\n", Json(*info).c_str());
      return 0;
    }
    std::printf("sinew-server %s (%s) at %s\n", info->version().c_str(), info->api_version().c_str(),
                c.target().c_str());
    for (const auto& m : info->methods()) {
      std::printf("  method %-4s %s\n", m.name().c_str(), m.description().c_str());
      std::string backends;
      for (int b : m.backends()) absl::StrAppend(&backends, backends.empty() ? "" : ",", b == v1::BACKEND_GPU ? "gpu" : "cpu");
      std::printf("         inputs %s; backends %s; %s; in a pipeline: %s%s%s\n", absl::StrJoin(m.inputs(), ",").c_str(),
                  backends.c_str(), m.stateful() ? "stateful" : "stateless", m.follows().c_str(),
                  m.fallback().empty() ? "" : "; served by ", m.fallback().empty() ? "" : (m.fallback() + " while it prepares").c_str());
      for (const auto& p : m.params()) {
        std::printf("         %s.%s (%s%s%s) %s\n", m.params_field().c_str(), p.name().c_str(), p.type().c_str(),
                    p.default_value().empty() ? "" : ", default ", p.default_value().c_str(), p.description().c_str());
      }
    }
    for (const auto& b : info->backends()) {
      std::printf("  backend %s: %s (%s)\n", v1::Backend_Name(b.backend()).c_str(),
                  b.available() ? "available" : "unavailable", b.description().c_str());
    }
    for (const auto& d : info->devices()) {
      std::printf("  gpu %u %s: %.0f of %.0f MiB used, %.0f %% busy, %u rigs, %u sessions, %u frames queued, %u running\n",
                  d.index(), d.name().c_str(), d.used_bytes() / 1048576.0, d.limit_bytes() / 1048576.0,
                  100 * d.utilisation(), d.rigs(), d.sessions(), d.queued_frames(), d.running_frames());
      if (!d.failed().empty()) std::printf("    FAILED until the server restarts: %s\n", d.failed().c_str());
    }
    const auto& l = info->limits();
    std::printf("  limits: %u vertices/rig, %llu rig bytes, %u sessions, idle TTL %u s, %u workers\n",
                l.max_vertices_per_rig(), (unsigned long long)l.max_rig_bytes(), l.max_sessions(),
                l.session_idle_ttl_seconds(), l.worker_threads());
    std::printf("  now: %u rigs, %u sessions\n", info->rigs(), info->sessions());
    return 0;
  }
  if (cmd == "upload") {
    double secs;
    auto up = UploadLimb(c, limb, &secs);
    if (!up.ok()) return Fail(up.status());
    if (json) std::printf("%s\n", Json(*up).c_str());
    else std::printf("%s\n", up->rig_id().c_str());
    std::fprintf(stderr, "%s: %u vertices, %u joints, %s in %.1f ms\n", up->info().name().c_str(),
                 up->info().vertex_count(), up->info().joint_count(),
                 up->already_resident() ? "already resident" : "uploaded", secs * 1e3);
    return 0;
  }
  if (cmd == "rigs") {
    auto r = c.ListRigs();
    if (!r.ok()) return Fail(r.status());
    if (json) std::printf("%s\n", Json(*r).c_str());
    else for (const auto& i : r->rigs()) {
      std::printf("%s  %-24s %8u vertices %4u joints %4u sessions %10llu bytes\n", i.rig_id().c_str(),
                  i.name().c_str(), i.vertex_count(), i.joint_count(), i.session_count(),
                  (unsigned long long)i.resident_bytes());
    }
    return 0;
  }
  if (cmd == "rig" || cmd == "delete-rig") {
    if (pos.size() != 2) return Usage(args, cmd + " takes one rig id");
    if (cmd == "delete-rig") {
      auto st = c.DeleteRig(pos[1]);
      return st.ok() ? 0 : Fail(st);
    }
    auto r = c.GetRig(pos[1]);
    if (!r.ok()) return Fail(r.status());
    std::printf("%s\n", Json(*r).c_str());
    return 0;
  }
  if (cmd == "session") {
    const std::string sub = pos.size() > 1 ? pos[1] : "";
    if (sub == "create") {
      v1::CreateSessionRequest req;
      req.set_rig_id(args.Get("rig"));
      std::vector<v1::Method> stages;
      {  // what needs no server, before waiting for one
        v1::CreateSessionRequest scratch;
        std::vector<v1::Method> scratch_stages;
        if (std::string error; !ParseDeformer(args, args.Get("method"), scratch.mutable_deformer(), &scratch_stages, &error)) {
          return Usage(args, error);
        }
        if (const std::string unused = UnusedMethodFlag(args, {scratch_stages}); !unused.empty()) return Usage(args, unused);
        if (std::string error; !client::EncodingFromFlags(args, &scratch, &error)) return Usage(args, error);
        if (v1::Backend b; !ParseBackend(args.Get("backend"), &b)) return Usage(args, "--backend: auto, cpu or gpu");
      }
      if (auto st = c.WaitReady(); !st.ok()) return Fail(st);
      auto info = c.GetServerInfo();  // the methods' parameters, for --param
      if (!info.ok()) return Fail(info.status());
      if (std::string error; !ParseDeformer(args, args.Get("method"), req.mutable_deformer(), &stages, &error, &*info)) {
        return Usage(args, error);
      }
      if (const std::string unused = UnusedMethodFlag(args, {stages}); !unused.empty()) return Usage(args, unused);
      if (std::string error; !client::EncodingFromFlags(args, &req, &error)) return Usage(args, error);
      v1::Backend backend;
      if (!ParseBackend(args.Get("backend"), &backend)) return Usage(args, "--backend: auto, cpu or gpu");
      req.set_backend(backend);
      auto s = c.CreateSession(req, PrepareProgress());
      if (!s.ok()) return Fail(s.status());
      if (json) std::printf("%s\n", Json(*s).c_str());
      else std::printf("%s\n", s->session_id().c_str());
      return 0;
    }
    if (sub == "list") {
      auto l = c.ListSessions();
      if (!l.ok()) return Fail(l.status());
      std::printf("%s\n", Json(*l).c_str());
      return 0;
    }
    if ((sub == "get" || sub == "close") && pos.size() == 3) {
      if (sub == "close") {
        auto f = c.CloseSession(pos[2]);
        if (!f.ok()) return Fail(f.status());
        if (json) {  // the call's response, as the other commands print theirs
          v1::CloseSessionResponse r;
          r.set_frames(*f);
          std::printf("%s\n", Json(r).c_str());
        } else {
          std::printf("closed %s after %llu frames\n", pos[2].c_str(), (unsigned long long)*f);
        }
        return 0;
      }
      auto s = c.GetSession(pos[2]);
      if (!s.ok()) return Fail(s.status());
      std::printf("%s\n", Json(*s).c_str());
      return 0;
    }
    return Usage(args, "session: create | get ID | list | close ID");
  }
  if (cmd == "play") return Play(c, args, limb);
  if (cmd == "batch") return Batch(c, args);
  return Usage(args, "unknown command '" + cmd + "'");
}
