// sinew: command-line client of the Sinew service. See `sinew help`.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "clients/lib/args.h"
#include "clients/lib/client.h"
#include "clients/lib/stats.h"
#include "core/procedural/limb.h"

namespace {

using namespace sinew;
using Clock = std::chrono::steady_clock;

const char* kUsage = R"(sinew: command-line client of a Sinew deformation server.

Usage: sinew [--target HOST:PORT] COMMAND [flags]

Commands:
  info                       server version, methods, backends, limits
  upload                     upload a rig (the built-in procedural limb) and print its id
  rigs                       list resident rigs
  rig ID                     one rig's details (joints, sizes)
  delete-rig ID              remove a rig no session uses
  session create             open a session: --rig ID [--method M] [--encoding E] [--backend B]
  session get ID | session list | session close ID
  play                       upload the procedural limb (or use --rig ID), open a session per
                             method, stream its clip through the server and report frames,
                             frames/s and latency percentiles
  help                       this text

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

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

bool ParseMethod(const std::string& s, v1::Method* m) {
  if (s == "lbs") *m = v1::METHOD_LBS;
  else if (s == "dqs") *m = v1::METHOD_DQS;
  else return false;
  return true;
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

int Play(client::Client& c, client::Args& args, const LimbOptions& limb) {
  long long frames;
  double fps;
  if (!args.GetInt("frames", &frames, 1, 100'000'000) || !args.GetDouble("fps", &fps, 0, 1e6)) {
    return Usage(args, args.error());
  }
  std::vector<v1::Method> methods;
  for (const auto& name : absl::StrSplit(args.Get("method"), ',')) {
    v1::Method m;
    if (!ParseMethod(std::string(name), &m)) return Usage(args, "--method: lbs or dqs, comma separated");
    methods.push_back(m);
  }
  const bool procedural = args.Get("rig").empty();
  std::string rig_id = args.Get("rig");
  uint32_t joints = 0;
  if (procedural) {
    double secs;
    auto up = UploadLimb(c, limb, &secs);
    if (!up.ok()) return Fail(up.status());
    rig_id = up->rig_id();
    joints = up->info().joint_count();
    std::printf("rig %s: %u vertices, %u triangles, %u joints, %s in %.1f ms (id %.12s)\n",
                up->info().name().c_str(), up->info().vertex_count(), up->info().triangle_count(),
                joints, up->already_resident() ? "already resident" : "uploaded", secs * 1e3,
                rig_id.c_str());
  } else {
    auto info = c.GetRig(rig_id);
    if (!info.ok()) return Fail(info.status());
    joints = info->joint_count();
  }
  // The clip: the limb's bend-and-twist cycle, 120 frames per cycle.
  Skeleton skeleton;
  {
    RigInput in = MakeLimb(limb);
    skeleton = in.rig.skeleton;
    if (!procedural && skeleton.size() != joints) {
      std::fprintf(stderr, "sinew: play --rig poses the procedural limb's %zu joints; rig has %u\n",
                   skeleton.size(), joints);
      return 1;
    }
    if (auto built = BuildRig(std::move(in)); built.ok()) skeleton = built->skeleton;
  }
  constexpr int kCycle = 120;
  std::vector<v1::DeformRequest> clip(kCycle);
  for (int f = 0; f < kCycle; ++f) {
    client::PoseToProto(LimbPose(skeleton, double(f) / kCycle), *clip[f].mutable_pose());
  }

  const bool json = args.Has("json");
  int status = 0;
  for (v1::Method method : methods) {
    v1::CreateSessionRequest req;
    req.set_rig_id(rig_id);
    req.mutable_deformer()->set_method(method);
    auto session = c.CreateSession(req);
    if (!session.ok()) return Fail(session.status());
    const char* name = method == v1::METHOD_LBS ? "lbs" : "dqs";
    for (auto& r : clip) r.set_session_id(session->session_id());

    client::LatencyStats lat;
    std::vector<float> peak;  // positions at the clip's peak (t = 0.5)
    v1::DeformResponse resp;
    std::unique_ptr<client::FrameStream> stream;
    if (!args.Has("unary")) stream = c.OpenStream();
    const auto start = Clock::now();
    uint64_t errors = 0, bytes = 0;
    for (long long f = 0; f < frames; ++f) {
      const auto scheduled = fps > 0 ? start + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(f / fps))
                                     : Clock::now();
      if (fps > 0) std::this_thread::sleep_until(scheduled);
      v1::DeformRequest& r = clip[f % kCycle];
      r.set_frame(static_cast<uint64_t>(f));
      if (stream) {
        if (!stream->Write(r) || !stream->Read(&resp)) {
          return Fail(stream->Close());
        }
      } else {
        auto u = c.Deform(r);
        if (!u.ok()) return Fail(u.status());
        resp = std::move(*u);
      }
      lat.Add(std::chrono::duration<double, std::milli>(Clock::now() - scheduled).count());
      if (resp.has_error() || resp.frame() != static_cast<uint64_t>(f)) ++errors;
      bytes += resp.positions().size();
      if (f % kCycle == kCycle / 2 && peak.empty()) {
        if (auto st = client::DecodePositions(resp, peak); !st.ok()) return Fail(st);
      }
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    if (stream) {
      if (auto st = stream->Close(); !st.ok()) return Fail(st);
    }
    auto closed = c.CloseSession(session->session_id());
    if (!closed.ok()) return Fail(closed.status());
    const double p50 = lat.Percentile(50), p99 = lat.Percentile(99), mx = lat.Max();
    std::string quality;
    if (procedural && !peak.empty()) {
      const double x_wrist = limb.length * (limb.bones - 1) / limb.bones;
      const double x_elbow = limb.length * std::max<uint32_t>(1, limb.bones / 2) / limb.bones;
      quality = absl::StrFormat(
          "; at peak (bend %.0f deg, twist %.0f deg): wrist radius %.3f, elbow radius %.3f "
          "(rest %.3f)",
          LimbMotion{}.bend_degrees, LimbMotion{}.twist_degrees,
          LimbRingRadius(limb, peak, x_wrist), LimbRingRadius(limb, peak, x_elbow), limb.radius);
    }
    if (json) {
      std::printf(
          "{\"method\":\"%s\",\"frames\":%lld,\"vertices\":%u,\"seconds\":%.4f,\"frames_per_s\":%.2f,"
          "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"errors\":%llu,\"bytes\":%llu}\n",
          name, frames, resp.vertex_count(), secs, frames / secs, p50, p99, mx,
          (unsigned long long)errors, (unsigned long long)bytes);
    } else {
      std::printf("%s: %lld frames x %u vertices in %.2f s over %s: %.1f frames/s, latency p50 %.2f ms, "
                  "p99 %.2f ms, max %.2f ms, %llu errors%s\n",
                  name, frames, resp.vertex_count(), secs, stream ? "StreamDeform" : "Deform",
                  frames / secs, p50, p99, mx, (unsigned long long)errors, quality.c_str());
    }
    if (errors) status = 1;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  client::Args args;
  args.Flag("target", "HOST:PORT", "127.0.0.1:50051", "server address")
      .Flag("json", "", "", "print JSON instead of text")
      .Flag("rig", "ID", "", "rig id (session create, play)")
      .Flag("method", "M", "lbs", "deformation method: lbs or dqs (play: comma-separated list)")
      .Flag("encoding", "E", "f32", "output encoding: f32 or f16")
      .Flag("backend", "B", "auto", "backend preference: auto, cpu or gpu")
      .Flag("vertices", "N", "20000", "procedural limb: vertex count (100 per ring)")
      .Flag("bones", "N", "3", "procedural limb: joints in the chain")
      .Flag("influences", "K", "2", "procedural limb: influences per vertex")
      .Flag("frames", "N", "240", "play: frames to send (the clip loops every 120)")
      .Flag("fps", "F", "0", "play: frames per second to send at; 0 = as fast as answered")
      .Flag("unary", "", "", "play: one Deform call per frame instead of a StreamDeform stream");
  if (!args.Parse(argc, argv, 1)) return Usage(args, args.error());
  const auto& pos = args.positional();
  if (pos.empty() || pos[0] == "help") return Usage(args, pos.empty() ? "no command given" : "");
  const std::string cmd = pos[0];
  LimbOptions limb;
  if (!LimbFromArgs(args, &limb)) return Usage(args, args.error());

  client::Client c(args.Get("target"));
  if (auto st = c.WaitReady(std::chrono::seconds(10)); !st.ok()) return Fail(st);
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
    for (const auto& m : info->methods()) std::printf("  method %-4s %s\n", m.name().c_str(), m.description().c_str());
    for (const auto& b : info->backends()) {
      std::printf("  backend %s: %s (%s)\n", v1::Backend_Name(b.backend()).c_str(),
                  b.available() ? "available" : "unavailable", b.description().c_str());
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
      v1::Method m;
      if (!ParseMethod(args.Get("method"), &m)) return Usage(args, "--method: lbs or dqs");
      req.mutable_deformer()->set_method(m);
      const std::string e = args.Get("encoding"), b = args.Get("backend");
      if (e != "f32" && e != "f16") return Usage(args, "--encoding: f32 or f16");
      req.set_encoding(e == "f16" ? v1::OUTPUT_ENCODING_FLOAT16 : v1::OUTPUT_ENCODING_FLOAT32);
      if (b == "auto") req.set_backend(v1::BACKEND_AUTO);
      else if (b == "cpu") req.set_backend(v1::BACKEND_CPU);
      else if (b == "gpu") req.set_backend(v1::BACKEND_GPU);
      else return Usage(args, "--backend: auto, cpu or gpu");
      auto s = c.CreateSession(req);
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
        std::printf("closed %s after %llu frames\n", pos[2].c_str(), (unsigned long long)*f);
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
  return Usage(args, "unknown command '" + cmd + "'");
}
