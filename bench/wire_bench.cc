// sinew-bench-wire: the wire's position encodings (sinew.v1.OutputEncoding) on a real clip.
//
// Default: assimp-testmodels' BCN_Epileptic, its first clip sampled at 30 frames/s, DQS.
// * Codec, in-process on the frames core deformed: bytes a frame ÷ float32's, the largest vertex
//   error ÷ the bounding-box diagonal, encode and decode µs a frame (one thread), and decode
//   throughput in float32 bytes made per second.
// * Service: an in-process SinewServer on loopback (2 workers) and a StreamDeform stream per
//   encoding, one frame in flight, the client decoding every frame (client::PositionDecoder):
//   frames/s and ÷ float32's; beside it a raw gRPC echo stream whose answers are that encoding's
//   mean frame size, in the same run, the two taking turns in 5 rounds (the best round of each):
//   service ÷ echo, and decode ÷ wire (the client's decode time ÷ the echo's time a frame: below
//   1, the decode keeps up with the wire).
// Prints the load average before and after.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/echo_service.h"
#include "clients/import/asset_import.h"
#include "clients/lib/client.h"
#include "core/deformer/deformer.h"
#include "core/util/half.h"
#include "server/server.h"
#include "sinew/v1/position_codec.h"

namespace {

using namespace sinew;
using Clock = std::chrono::steady_clock;

struct Encoding {
  const char* name;
  v1::OutputEncoding wire;
  double max_error = 0;  // DELTA
};

struct CodecResult {
  double bytes = 0;       // mean a frame
  double max_error = 0;   // ÷ diagonal
  double encode_us = 0, decode_us = 0;
};

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double MaxDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i + 2 < a.size(); i += 3) {
    worst = std::max(worst, std::hypot(double(a[i]) - b[i], double(a[i + 1]) - b[i + 1], double(a[i + 2]) - b[i + 2]));
  }
  return worst;
}

constexpr int kRounds = 5;  // service and echo take turns (main)

// Encodes and decodes the clip `passes` times (a fresh stream each pass).
CodecResult Codec(const Encoding& e, const std::vector<std::vector<float>>& frames, const Rig& rig, int passes) {
  CodecResult r;
  const size_t floats = frames[0].size();
  std::vector<std::string> encoded(frames.size());
  std::vector<wire::Quantization> qs(frames.size());
  const wire::Quantization grid = wire::DeltaGrid(rig.bbox_min.data(), rig.bbox_max.data(), e.max_error);
  double encode_s = 0, decode_s = 0;
  std::vector<float> out(floats);
  for (int pass = 0; pass < passes; ++pass) {
    wire::DeltaEncoder delta(grid, 30);
    auto t0 = Clock::now();
    for (size_t f = 0; f < frames.size(); ++f) {
      std::string& b = encoded[f];
      switch (e.wire) {
        case v1::OUTPUT_ENCODING_FLOAT32:
          b.resize(floats * 4);
          std::memcpy(b.data(), frames[f].data(), b.size());
          break;
        case v1::OUTPUT_ENCODING_FLOAT16:
          b.resize(floats * 2);
          FloatsToHalves(frames[f].data(), reinterpret_cast<uint16_t*>(b.data()), floats);
          break;
        case v1::OUTPUT_ENCODING_QUANTIZED16:
          if (!wire::EncodeQuantized16(frames[f], qs[f], b).ok()) std::abort();
          break;
        default:
          if (!delta.Encode(frames[f], false, qs[f], b).ok()) std::abort();
      }
    }
    encode_s += Seconds(t0);
    wire::DeltaDecoder decoder;
    auto decode = [&](size_t f) {
      const std::string& b = encoded[f];
      switch (e.wire) {
        case v1::OUTPUT_ENCODING_FLOAT32:
          std::memcpy(out.data(), b.data(), b.size());
          break;
        case v1::OUTPUT_ENCODING_FLOAT16:
          HalvesToFloats(reinterpret_cast<const uint16_t*>(b.data()), out.data(), floats);
          break;
        case v1::OUTPUT_ENCODING_QUANTIZED16:
          if (!wire::DecodeQuantized16(b, qs[f], out).ok()) std::abort();
          break;
        default:
          if (!decoder.Decode(b, qs[f], out).ok()) std::abort();
      }
    };
    t0 = Clock::now();
    for (size_t f = 0; f < frames.size(); ++f) decode(f);
    decode_s += Seconds(t0);
    // The error, from a decode of its own outside the timing (until 2026-12-03 it was measured
    // inside the first pass's: a double hypot a vertex, comparable to float16's whole decode).
    if (pass == 0) {
      decoder.Reset();
      for (size_t f = 0; f < frames.size(); ++f) {
        decode(f);
        r.max_error = std::max(r.max_error, MaxDistance(out, frames[f]) / rig.bbox_diagonal());
      }
    }
  }
  for (const std::string& b : encoded) r.bytes += double(b.size());
  r.bytes /= double(frames.size());
  const double n = double(passes) * double(frames.size());
  r.encode_us = 1e6 * encode_s / n;
  r.decode_us = 1e6 * decode_s / n;
  return r;
}

int Fail(const std::string& what, const absl::Status& st) {
  std::fprintf(stderr, "sinew-bench-wire: %s: %s\n", what.c_str(), st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string asset_path = std::string(SINEW_ASSIMP_MODELS) + "/X/BCN_Epileptic.X", method = "dqs";
  double fps = 30;
  int passes = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--asset" && i + 1 < argc) asset_path = argv[++i];
    else if (a == "--fps" && i + 1 < argc) fps = std::atof(argv[++i]);
    else if (a == "--passes" && i + 1 < argc) passes = std::atoi(argv[++i]);
    else if (a == "--method" && i + 1 < argc) method = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: sinew-bench-wire [--asset FILE] [--fps F] [--passes N] [--method lbs|dqs]\n"
                   "  FILE: a rigged, animated asset (default BCN_Epileptic.X); F: clip sampling (30);\n"
                   "  N: timed passes over the clip (20)\n");
      return 2;
    }
  }
  if (!(fps > 0 && fps <= 1000) || passes < 1 || (method != "lbs" && method != "dqs")) {
    std::fprintf(stderr, "sinew-bench-wire: --fps in (0, 1000], --passes >= 1, --method lbs or dqs\n");
    return 2;
  }
  if (!std::filesystem::exists(asset_path)) {
    std::printf("sinew-bench-wire: %s not found (scripts/install-deps.sh installs assimp-testmodels)\n",
                asset_path.c_str());
    return 0;
  }
  double load[3] = {-1, -1, -1};
  if (getloadavg(load, 3) < 0) load[0] = -1;

  auto asset = ImportAsset(asset_path);
  if (!asset.ok()) return Fail("import", asset.status());
  if (asset->clips.empty()) return Fail("import", absl::FailedPreconditionError("the asset has no clip"));
  auto built = BuildRig(asset->rig);
  if (!built.ok()) return Fail("rig", built.status());
  auto rig = std::make_shared<const Rig>(std::move(*built));
  const Clip& clip = asset->clips[0];
  const size_t count = ClipFrameCount(clip, fps);
  std::vector<Pose> poses(count);
  std::vector<std::vector<float>> frames(count, std::vector<float>(rig->positions.size()));
  auto deformer = CreateDeformer(rig, {method});
  if (!deformer.ok()) return Fail("deformer", deformer.status());
  for (size_t f = 0; f < count; ++f) {
    SampleClip(clip, rig->skeleton, double(f) / fps, poses[f]);
    if (auto st = (*deformer)->Deform({&poses[f], {}}, frames[f], nullptr); !st.ok()) return Fail("deform", st);
  }
  const double f32_bytes = 12.0 * double(rig->vertex_count());
  std::printf("sinew-bench-wire: %s, clip \"%s\" at %g frames/s (%zu frames), %zu vertices, %s; load average %.2f\n",
              std::filesystem::path(asset_path).filename().c_str(), clip.name.c_str(), fps, count, rig->vertex_count(),
              method.c_str(), load[0]);

  const Encoding encodings[] = {{"f32", v1::OUTPUT_ENCODING_FLOAT32},
                                {"f16", v1::OUTPUT_ENCODING_FLOAT16},
                                {"q16", v1::OUTPUT_ENCODING_QUANTIZED16},
                                {"delta 1e-4", v1::OUTPUT_ENCODING_DELTA, 1e-4},
                                {"delta 1e-5", v1::OUTPUT_ENCODING_DELTA, 1e-5}};
  constexpr size_t kEncodings = std::size(encodings);
  CodecResult codec[kEncodings];
  std::printf("\ncodec (one thread, %d passes over the clip; delta: a key frame every 30)\n", passes);
  std::printf("  %-11s %12s %10s %12s %10s %10s %14s\n", "encoding", "bytes/frame", "÷ float32", "max err/diag",
              "encode us", "decode us", "decode GB/s");
  for (size_t k = 0; k < kEncodings; ++k) {
    codec[k] = Codec(encodings[k], frames, *rig, passes);
    const CodecResult& r = codec[k];
    std::printf("  %-11s %12.0f %10.3f %12.2e %10.1f %10.1f %14.2f\n", encodings[k].name, r.bytes, r.bytes / f32_bytes,
                r.max_error, r.encode_us, r.decode_us, f32_bytes / (r.decode_us * 1e3));
  }

  server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "";
  options.worker_threads = 2;
  options.gpu = "off";
  server::SinewServer sinew_server(options);
  if (absl::Status st = sinew_server.Start(); !st.ok()) return Fail("server", st);
  client::Client c(absl::StrCat("127.0.0.1:", sinew_server.grpc_port()));
  if (absl::Status st = c.WaitReady(std::chrono::seconds(10)); !st.ok()) return Fail("connect", st);
  auto up = c.UploadRig(client::RigToProto(asset->rig));
  if (!up.ok()) return Fail("upload", up.status());
  std::vector<v1::DeformRequest> requests(count);
  for (size_t f = 0; f < count; ++f) client::PoseToProto(poses[f], *requests[f].mutable_pose());
  const size_t request_bytes = requests[0].ByteSizeLong() + 40;  // with a session id and frame number

  std::printf("\nservice (StreamDeform on loopback, one frame in flight, every frame decoded; echo: raw gRPC with the "
              "encoding's mean frame size; the two take turns in 5 rounds, the best of each)\n");
  std::printf("  %-11s %10s %10s %12s %14s %14s\n", "encoding", "frames/s", "÷ float32", "echo fr/s", "service/echo",
              "decode/wire");
  const int timed = passes * static_cast<int>(count);
  double f32_fps = 0;
  for (size_t k = 0; k < kEncodings; ++k) {
    const Encoding& e = encodings[k];
    v1::CreateSessionRequest sreq;
    sreq.set_rig_id(up->rig_id());
    sreq.mutable_deformer()->set_method(method == "lbs" ? v1::METHOD_LBS : v1::METHOD_DQS);
    sreq.set_encoding(e.wire);
    if (e.wire == v1::OUTPUT_ENCODING_DELTA) sreq.set_max_error(e.max_error);
    auto session = c.CreateSession(sreq);
    if (!session.ok()) return Fail("session", session.status());
    auto stream = c.OpenStream();
    client::PositionDecoder decoder;
    std::vector<float> xyz;
    bench::EchoService echo_service(static_cast<size_t>(codec[k].bytes));
    int echo_port = 0;
    auto echo_server = bench::StartEcho(echo_service, &echo_port);
    if (!echo_server) return Fail("echo server", absl::UnavailableError("no port"));
    // The service and the echo take turns in kRounds rounds, each after its warm-up, and each
    // keeps its best round: a load change on the shared machine then meets both paths alike.
    double best_service = 0, best_echo = 0;
    const int round_frames = std::max(1, timed / kRounds);
    for (int round = 0; round < kRounds; ++round) {
      auto fps_service = bench::FramesPerSecond(static_cast<int>(count), round_frames, [&](uint64_t f) -> absl::Status {
        v1::DeformRequest& r = requests[f % count];
        r.set_session_id(session->session_id());
        r.set_frame(f);
        v1::DeformResponse resp;
        if (!stream->Write(r) || !stream->Read(&resp)) return absl::UnavailableError("stream broken");
        return decoder.Decode(resp, xyz);
      });
      if (!fps_service.ok()) return Fail(e.name, fps_service.status());
      auto fps_echo = bench::EchoFramesPerSecond(absl::StrCat("127.0.0.1:", echo_port), request_bytes,
                                                 static_cast<size_t>(codec[k].bytes), static_cast<int>(count),
                                                 round_frames);
      if (!fps_echo.ok()) return Fail("echo", fps_echo.status());
      best_service = std::max(best_service, *fps_service);
      best_echo = std::max(best_echo, *fps_echo);
    }
    echo_server->Shutdown();
    if (auto st = stream->Close(); !st.ok()) return Fail(e.name, st);
    (void)c.CloseSession(session->session_id());
    if (k == 0) f32_fps = best_service;
    const double* fps_service = &best_service;
    const double* fps_echo = &best_echo;
    std::printf("  %-11s %10.1f %10.2f %12.1f %14.2f %14.3f\n", e.name, *fps_service, *fps_service / f32_fps, *fps_echo,
                *fps_service / *fps_echo, codec[k].decode_us * 1e-6 * *fps_echo);
  }
  sinew_server.Shutdown();
  if (getloadavg(load, 3) >= 0) std::printf("\nload average after: %.2f\n", load[0]);
  return 0;
}
