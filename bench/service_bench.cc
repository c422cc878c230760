// sinew-bench-service: what the Sinew service adds on top of gRPC itself.
//
// One process runs a SinewServer and a bare gRPC echo server (bench/echo.proto, callback API),
// both on loopback. A synchronous client streams frames to each, first with one frame in flight
// (write, then read the answer), then with two (pipelined), and times a fixed number of frames
// after a warm-up:
//   * echo: requests as large as a DeformRequest, each answered with a payload as large as a
//     DeformResponse's positions: the transport floor for one frame;
//   * StreamDeform with an LBS and a DQS session on a 20000-vertex procedural limb.
// The ratio StreamDeform / echo (frames/s) is the share of the transport-only frame rate that
// the service keeps; the server's own compute time per frame (DeformResponse.compute_ns) shows
// how much of the gap is deformation.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/echo_service.h"
#include "clients/lib/client.h"
#include "clients/lib/recovering_session.h"
#include "core/procedural/limb.h"
#include "server/server.h"
#include "bench/load_average.h"

namespace {

using namespace sinew;

constexpr size_t kVertices = 20'000;
constexpr uint32_t kBones = 3;
constexpr uint32_t kInfluences = 2;
constexpr int kWarmup = 100;
constexpr int kRounds = 5;
// The fewest frames a round times: with fewer, the clock's start and stop and the frames written
// ahead of it (two in flight) are a visible share of the round (--frames 5, one frame a round,
// read 124 000 frames/s until 2026-12-07).
constexpr int kMinRoundFrames = 50;

struct Result {
  double frames_per_s = 0;
  double compute_us = -1;  // server compute per frame; negative when not reported (echo)
};

absl::StatusOr<Result> RunEcho(const std::string& target, size_t request_bytes, size_t response_bytes, int frames,
                               int depth) {
  auto fps = bench::EchoFramesPerSecond(target, request_bytes, response_bytes, kWarmup, frames, depth);
  if (!fps.ok()) return fps.status();
  return Result{*fps};
}

absl::StatusOr<Result> RunStreamDeform(client::Client& c, const v1::DeformRequest& prototype,
                                       uint32_t vertex_count, int frames, int depth) {
  auto stream = c.OpenStream();
  v1::DeformRequest request = prototype;
  v1::DeformResponse response;
  uint64_t compute_ns = 0;
  auto fps = bench::PipelinedFramesPerSecond(
      kWarmup, frames, depth,
      [&](uint64_t f) -> absl::Status {
        request.set_frame(f);
        if (!stream->Write(request)) return absl::UnavailableError("StreamDeform: stream broken");
        return absl::OkStatus();
      },
      [&](uint64_t f) -> absl::Status {
        if (!stream->Read(&response)) return absl::UnavailableError("StreamDeform: stream broken");
        if (response.has_error()) return absl::InternalError(response.error().message());
        if (response.frame() != f || response.positions().size() != size_t{vertex_count} * 12) {
          return absl::InternalError("StreamDeform: wrong response");
        }
        if (f >= kWarmup) compute_ns += response.compute_ns();
        return absl::OkStatus();
      });
  const absl::Status end = stream->Close();
  if (!fps.ok()) return fps.status();
  if (!end.ok()) return end;
  return Result{*fps, compute_ns / 1e3 / frames};
}

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "sinew-bench-service: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// --frames N, --inline-frame-us N (or =N), --gpu; anything else is an error.
bool ParseArgs(int argc, char** argv, int* frames, int* inline_us, bool* gpu) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i], value;
    if (arg == "--gpu") {
      *gpu = true;
      continue;
    }
    int* target = nullptr;
    for (auto [name, out] : {std::pair<std::string_view, int*>{"--frames", frames}, {"--inline-frame-us", inline_us}}) {
      if (arg == name && i + 1 < argc) {
        value = argv[++i];
        target = out;
      } else if (arg.starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=') {
        value = arg.substr(name.size() + 1);
        target = out;
      }
    }
    if (target == nullptr) return false;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *target);
    if (ec != std::errc() || end != value.data() + value.size() || *target < 0) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const sinew::bench::LoadAverageReport load_average;  // printed before and after the run
  int frames = 2000;
  bool gpu = false;
  server::ServerOptions options;
  int inline_us = static_cast<int>(options.inline_frame_us);
  if (!ParseArgs(argc, argv, &frames, &inline_us, &gpu)) {
    std::fprintf(stderr,
                 "usage: sinew-bench-service [--frames N] [--inline-frame-us US] [--gpu]\n"
                 "  --frames N            frames timed per path, in %d rounds (N >= %d, default 2000)\n"
                 "  --inline-frame-us US  the server's --inline-frame-us (default %d; 0: every frame on the workers)\n"
                 "  --gpu                 the sessions on the GPU backend\n",
                 kRounds, kRounds * kMinRoundFrames, inline_us);
    return 2;
  }
  if (frames < kRounds * kMinRoundFrames) {
    std::fprintf(stderr,
                 "sinew-bench-service: --frames %d is %d a round; at least %d are needed (%d in each of %d rounds): "
                 "fewer time mostly the clock's start and the frames already in flight\n",
                 frames, frames / kRounds, kRounds * kMinRoundFrames, kMinRoundFrames, kRounds);
    return 2;
  }

  options.inline_frame_us = static_cast<uint32_t>(inline_us);
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "";
  options.worker_threads = 2;
  options.gpu = gpu ? "auto" : "off";
  options.max_shared_memory_bytes = uint64_t{64} << 20;
  server::SinewServer sinew_server(options);
  if (absl::Status st = sinew_server.Start(); !st.ok()) return Fail("server", st);

  // Rig, sessions and the request every frame sends.
  client::Client c(absl::StrCat("127.0.0.1:", sinew_server.grpc_port()));
  if (absl::Status st = c.WaitReady(std::chrono::seconds(10)); !st.ok()) return Fail("connect", st);
  RigInput input = MakeLimb(client::LimbWithVertices(kVertices, kBones, kInfluences));
  auto upload = c.UploadRig(client::RigToProto(input));
  if (!upload.ok()) return Fail("upload", upload.status());
  auto rig = BuildRig(std::move(input));
  if (!rig.ok()) return Fail("rig", rig.status());
  v1::Session sessions[2];
  const v1::Method methods[2] = {v1::METHOD_LBS, v1::METHOD_DQS};
  for (int i = 0; i < 2; ++i) {
    v1::CreateSessionRequest req;
    req.set_rig_id(upload->rig_id());
    req.mutable_deformer()->set_method(methods[i]);
    req.set_backend(gpu ? v1::BACKEND_GPU : v1::BACKEND_CPU);
    auto session = c.CreateSession(req);
    if (!session.ok()) return Fail("session", session.status());
    sessions[i] = *session;
  }
  v1::DeformRequest prototype;
  client::PoseToProto(LimbPose(rig->skeleton, 0.5), *prototype.mutable_pose());
  prototype.set_session_id(sessions[0].session_id());
  const uint32_t vertex_count = sessions[0].vertex_count();
  const size_t request_bytes = prototype.ByteSizeLong();
  const size_t response_bytes = size_t{vertex_count} * 12;

  bench::EchoService echo_service(response_bytes);
  int echo_port = 0;
  const std::unique_ptr<grpc::Server> echo_server = bench::StartEcho(echo_service, &echo_port);
  if (!echo_server) return Fail("echo server", absl::UnavailableError("no port"));

  // Each path with one frame in flight (write, then read the answer), then with two (the next
  // frame written before the answer to the previous one is read: the server computes one frame
  // while gRPC sends the other; the echo server reads ahead the same way).
  const char* names[3] = {"echo (raw gRPC)", "StreamDeform LBS", "StreamDeform DQS"};
  constexpr int kDepths[2] = {1, 2};
  // The paths take turns in kRounds rounds of frames / kRounds each, and each keeps its best
  // round: a shared machine's slow spells then hit every path alike instead of one.
  Result results[2][3];
  const int round_frames = frames / kRounds;  // at least kMinRoundFrames
  for (int round = 0; round < kRounds; ++round) {
    for (int d = 0; d < 2; ++d) {
      auto echo = RunEcho(absl::StrCat("127.0.0.1:", echo_port), request_bytes, response_bytes, round_frames,
                          kDepths[d]);
      if (!echo.ok()) return Fail(names[0], echo.status());
      if (echo->frames_per_s > results[d][0].frames_per_s) results[d][0] = *echo;
      for (int i = 0; i < 2; ++i) {
        prototype.set_session_id(sessions[i].session_id());
        auto r = RunStreamDeform(c, prototype, vertex_count, round_frames, kDepths[d]);
        if (!r.ok()) return Fail(names[i + 1], r.status());
        if (r->frames_per_s > results[d][i + 1].frames_per_s) results[d][i + 1] = *r;
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (auto closed = c.CloseSession(sessions[i].session_id()); !closed.ok()) {
      return Fail("close session", closed.status());
    }
  }
  echo_server->Shutdown();

  // Same-host shared memory against bytes in the response: a 1M-vertex LBS session, float32, one
  // frame in flight, the client copying each frame's positions into its own buffer either way
  // (from the response, or from the region: two slots used in turn). The two take turns in
  // kRounds rounds, each on a fresh stream after its own warm-up, and each keeps its best round
  // (until 2026-12-07 each ran once, bytes first, so a slow spell fell on one of them alone).
  RigInput big_input = MakeLimb(client::LimbWithVertices(1'000'000, 4, 4));
  auto big_up = c.UploadRig(client::RigToProto(big_input));
  if (!big_up.ok()) return Fail("upload 1M", big_up.status());
  auto big_rig = BuildRig(std::move(big_input));
  if (!big_rig.ok()) return Fail("rig 1M", big_rig.status());
  v1::CreateSessionRequest big_req;
  big_req.set_rig_id(big_up->rig_id());
  big_req.mutable_deformer()->set_method(v1::METHOD_LBS);
  big_req.set_backend(gpu ? v1::BACKEND_GPU : v1::BACKEND_CPU);
  auto big = c.CreateSession(big_req);
  if (!big.ok()) return Fail("session 1M", big.status());
  const size_t big_bytes = size_t{big->vertex_count()} * 12;
  auto shm = client::SharedMemory::Create(c, 2 * big_bytes);
  if (!shm.ok()) return Fail("shared memory", shm.status());
  std::vector<char> mine(big_bytes);
  constexpr int kBigWarmup = 10;
  double shm_fps[2] = {0, 0}, compute[2] = {0, 0};  // the best round's frames/s; its compute us a frame
  const int big_round_frames = std::max(10, frames / 20 / kRounds);
  for (int round = 0; round < kRounds; ++round) {
    for (int mode = 0; mode < 2; ++mode) {
      auto stream = c.OpenStream();
      v1::DeformRequest request;
      request.set_session_id(big->session_id());
      client::PoseToProto(LimbPose(big_rig->skeleton, 0.5), *request.mutable_pose());
      v1::DeformResponse response;
      double compute_us = 0;
      auto fps = bench::FramesPerSecond(kBigWarmup, big_round_frames, [&](uint64_t f) -> absl::Status {
        request.set_frame(f);
        if (mode == 1) {
          request.mutable_outputs()->mutable_shared_memory()->set_region_id((*shm)->region_id());
          request.mutable_outputs()->mutable_shared_memory()->set_offset((f % 2) * big_bytes);
        }
        if (!stream->Write(request) || !stream->Read(&response)) return absl::UnavailableError("stream broken");
        if (response.has_error()) return absl::InternalError(response.error().message());
        std::string_view bytes = response.positions();
        if (mode == 1) {
          auto at = (*shm)->Positions(response);
          if (!at.ok()) return at.status();
          bytes = *at;
        }
        if (bytes.size() != big_bytes) return absl::InternalError("wrong frame size");
        if (f >= kBigWarmup) compute_us += response.compute_ns() * 1e-3;
        std::memcpy(mine.data(), bytes.data(), big_bytes);
        return absl::OkStatus();
      });
      if (!fps.ok()) return Fail("1M frames", fps.status());
      if (auto st = stream->Close(); !st.ok()) return Fail("1M stream", st);
      if (*fps > shm_fps[mode]) {
        shm_fps[mode] = *fps;
        compute[mode] = compute_us / big_round_frames;
      }
    }
  }
  shm->reset();

  // What RecoveringSession's checkpoints cost a history-dependent session: unary frames of an
  // elastic implicit session (a 4k-vertex limb bending back and forth, 10° a frame) through
  // RecoveringSession with checkpoint_every 0 (off), 30 and 1, a fresh session each, in turns
  // over kRounds rounds, the best round of each; and one GetSessionState on its own.
  RigInput eis_input = MakeLimb(client::LimbWithVertices(4'000, kBones, kInfluences));
  const v1::Rig eis_rig = client::RigToProto(eis_input);
  auto eis_built = BuildRig(std::move(eis_input));
  if (!eis_built.ok()) return Fail("rig 4k", eis_built.status());
  v1::CreateSessionRequest eis_req;
  eis_req.mutable_deformer()->set_method(v1::METHOD_ELASTIC_IMPLICIT);
  eis_req.set_backend(gpu ? v1::BACKEND_GPU : v1::BACKEND_CPU);
  constexpr int kEvery[3] = {0, 30, 1};
  const int eis_frames = std::max(12, frames / 20);
  double eis_fps[3] = {0, 0, 0};
  double state_us = 0;
  size_t state_bytes = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (int m = 0; m < 3; ++m) {
      auto s = client::RecoveringSession::Open(c, eis_rig, eis_req, {.checkpoint_every = kEvery[m]});
      if (!s.ok()) return Fail("elastic session", s.status());
      auto fps = bench::FramesPerSecond(2, eis_frames, [&](uint64_t f) -> absl::Status {
        const double bend = 10.0 * double(f % 12 < 6 ? f % 12 : 12 - f % 12);
        v1::DeformRequest request;
        request.set_frame(f);
        client::PoseToProto(LimbPose(eis_built->skeleton, 0.5, LimbMotion{.bend_degrees = bend}), *request.mutable_pose());
        return (*s)->Deform(std::move(request)).status();
      });
      if (!fps.ok()) return Fail("elastic frames", fps.status());
      eis_fps[m] = std::max(eis_fps[m], *fps);
      if (m == 2) {
        const auto t0 = std::chrono::steady_clock::now();
        auto state = c.GetSessionState((*s)->session_id());
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        if (!state.ok()) return Fail("GetSessionState", state.status());
        state_bytes = state->ByteSizeLong();
        state_us = round == 0 ? us : std::min(state_us, us);
      }
      if (auto closed = c.CloseSession((*s)->session_id()); !closed.ok()) return Fail("close", closed.status());
    }
  }
  sinew_server.Shutdown();

  std::printf("sinew-bench-service: %u vertices (%u bones, %u influences), backend %s, "
              "%d server workers, --inline-frame-us %u\n",
              vertex_count, kBones, kInfluences, v1::Backend_Name(sessions[0].backend()).c_str(),
              int(options.worker_threads), options.inline_frame_us);
  std::printf("%d frames in %d rounds, each after %d warm-up, the best round of each path; request %zu B, response "
              "payload %zu B\n",
              frames, kRounds, kWarmup, request_bytes, response_bytes);
  for (int d = 0; d < 2; ++d) {
    std::printf("\n%d frame%s in flight\n", kDepths[d], kDepths[d] == 1 ? "" : "s");
    std::printf("%-18s %10s %10s %12s %13s\n", "path", "frames/s", "us/frame", "compute us", "service/echo");
    for (int i = 0; i < 3; ++i) {
      const Result& r = results[d][i];
      std::printf("%-18s %10.1f %10.1f ", names[i], r.frames_per_s, 1e6 / r.frames_per_s);
      if (r.compute_us < 0) {
        std::printf("%12s ", "-");
      } else {
        std::printf("%12.1f ", r.compute_us);
      }
      std::printf("%13.2f\n", r.frames_per_s / results[d][0].frames_per_s);
    }
  }
  std::printf("\n1M vertices, LBS, float32 (%.0f MB a frame), one frame in flight, the client copying each frame out "
              "(%d frames a round, the best of %d rounds, taking turns):\n",
              big_bytes / 1e6, big_round_frames, kRounds);
  std::printf("%-26s %10.1f frames/s (server compute %.0f us a frame)\n%-26s %10.1f frames/s (server compute %.0f us a frame)\n%-26s %10.2f\n",
              "positions in the response", shm_fps[0], compute[0], "positions in shared memory", shm_fps[1],
              compute[1], "shared memory / bytes", shm_fps[1] / shm_fps[0]);
  std::printf("\nRecoveringSession checkpoints, elastic implicit, 4k-vertex limb, unary frames (%d a round, the best "
              "of %d rounds):\n",
              eis_frames, kRounds);
  for (int m = 0; m < 3; ++m) {
    std::printf("checkpoint_every %-9d %10.1f frames/s %10.3f of off\n", kEvery[m], eis_fps[m], eis_fps[m] / eis_fps[0]);
  }
  std::printf("one GetSessionState: %zu bytes, %.0f us (the best of %d)\n", state_bytes, state_us, kRounds);
  return 0;
}
