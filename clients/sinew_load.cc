// sinew-load: load generator. N concurrent StreamDeform sessions at a target frame rate for a
// duration; reports achieved frames/s, latency percentiles and errors as a table and as JSON.
//
// Latency is measured from each frame's *scheduled* send time, not from when it was actually
// sent, so a server that falls behind shows its queueing delay (no coordinated omission), to its
// answer's arrival (before this client decodes it), over the frames answered without error.
//
// The first Ctrl-C (SIGINT, SIGTERM, SIGHUP) stops sending: the frames in flight are answered,
// the report is written over what ran and the sessions are closed; exit status 128 + signal (1
// when an output could not be written). A second one closes the sessions and exits at once,
// without a report.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <latch>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <grpcpp/support/status.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/export/load_report.h"
#include "clients/lib/args.h"
#include "clients/lib/connection.h"
#include "clients/lib/interrupt.h"
#include "clients/lib/methods.h"
#include "clients/lib/client.h"
#include "clients/lib/stats.h"
#include "core/procedural/limb.h"
#include "core/util/atomic_file.h"

namespace {

using namespace sinew;
using Clock = std::chrono::steady_clock;

// The first interrupt's signal (0: none): sending stops and the report covers what ran.
std::atomic<int> interrupted{0};

// How long after the run's end a stream may take to answer the frames it sent before giving up
// (DEADLINE_EXCEEDED, counted as an error): a server that keeps the connection but stopped
// answering (a deadlock, a stuck device) hung sinew-load forever until 2026-12-03.
constexpr auto kAnswerGrace = std::chrono::seconds(60);

struct SessionResult {
  client::LatencyStats latency;  // frames answered without error, and not_sent frames' waits (a lower bound)
  uint64_t ok = 0;
  uint64_t errors = 0;
  uint64_t bytes = 0;  // positions received in frames answered without error
  uint64_t skipped = 0;  // --latest-pose-wins: frames the server skipped for a newer one
  uint64_t shed = 0;     // frames the server answered "overloaded" (its --max-queue-ms)
  // Paced, one frame at a time: frames due before the end that the session never sent because
  // the server's answers came too late (their wait until the end is in `latency`).
  uint64_t not_sent = 0;
  std::string first_error;
};

// --report: each session keeps a uniform sample of its answered frames' times and latencies, of
// at most this many in all (32 MiB; every frame of a run up to that size). Until 2026-12-02 every
// frame was kept: 8 bytes each, 2 GB for a day at 3 000 frames/s.
constexpr size_t kReportSamples = size_t{1} << 22;

int Usage(const client::Args& args, const std::string& error) {
  std::FILE* out = error.empty() ? stdout : stderr;
  if (!error.empty()) std::fprintf(stderr, "sinew-load: %s\n\n", error.c_str());
  std::fprintf(out,
               "sinew-load: drive a Sinew server with N concurrent streaming sessions.\n\n"
               "Usage: sinew-load [flags]\n\nUploads the procedural limb, opens --sessions "
               "sessions on it and streams its clip through each\nat --fps for --duration "
               "seconds, then prints a table (and JSON with --json).\n\nFlags:\n%s",
               args.Help().c_str());
  return error.empty() ? 0 : 2;
}

}  // namespace

// Sleeps until `t`, or until the first Ctrl-C (checked every 20 ms): false when interrupted.
static bool SleepUntil(Clock::time_point t) {
  while (!interrupted) {
    const auto now = Clock::now();
    if (now >= t) return true;
    std::this_thread::sleep_for(std::min<Clock::duration>(t - now, std::chrono::milliseconds(20)));
  }
  return false;
}

namespace {
int Run(int argc, char** argv);
}  // namespace

// The run's exit status, or 1 when standard output could not be written (a full disk, a closed
// pipe, /dev/full), as sinew's: a report cut short is a failure (until 2026-12-07 it exited 0).
int main(int argc, char** argv) {
  const int status = Run(argc, argv);
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "sinew-load: writing standard output failed: %s\n", std::strerror(errno));
    client::ExitNow(status != 0 ? status : 1);
  }
  client::ExitNow(status);  // see ExitNow
}

namespace {
int Run(int argc, char** argv) {
  client::InstallInterruptHandler();  // before any thread starts: see clients/lib/interrupt.h
  client::QuietGrpcLog();
  client::StopOnFirstInterrupt([](int sig) { interrupted = sig; });
  client::Args args;
  args.Flag("target", "HOST:PORT", "127.0.0.1:50051", "server address");
  client::AddConnectionFlags(args);
  args
      .Flag("sessions", "N", "50", "concurrent sessions, one stream each")
      .Flag("fps", "F", "60", "frames per second per session; 0 = as fast as answered")
      .Flag("duration", "SECONDS", "10", "how long to send")
      .Flag("vertices", "N", "20000", "procedural limb vertex count")
      .Flag("bones", "N", "3", "procedural limb joints")
      .Flag("influences", "K", "2", "procedural limb influences per vertex")
      .Flag("method", "M", "lbs", "a method posed by the skeleton alone: lbs, dqs, blend, implicit, elastic-implicit, "
            "swing-twist or pbs (methods whose preparation runs in the background are waited for, so that frames "
            "measure the method and not its fallback)")
      .Flag("jiggle", "", "", "pbs: paint the limb's far third to jiggle (rig attribute pbs_jiggle) and turn "
            "jiggle on: stateful sessions, frames stepped by 1 / --fps (10 ms at --fps 0)")
      .Flag("encoding", "E", "f32", client::kEncodingHelp)
      .Flag("max-error", "E", "1e-4", "--encoding delta: the bound as a fraction of the rig's diagonal")
      .Flag("key-interval", "N", "30", "--encoding delta: a key frame every N frames")
      .Flag("backend", "B", "auto", "auto, cpu or gpu")
      .Flag("latest-pose-wins", "", "", "sessions with latest_pose_wins, and each stream sends its frames on schedule "
            "without waiting for answers (needs --fps > 0): a server that cannot keep up skips stale frames "
            "(counted) instead of queueing them")
      .Flag("json", "PATH", "", "also write the report as JSON to PATH ('-': stdout, which then holds the JSON line alone; the table goes to stderr)")
      .Flag("report", "PATH", "", "also write the report as a self-contained HTML page (inline SVG, no script): the figures, "
            "latency p50/p90/p99/max and answered frames/s over time, and the latency histogram. It keeps 8 bytes per "
            "answered frame up to 4 194 304 frames (32 MiB, about twice that while the page is written; 4 096 a session "
            "past 1 024 sessions), past that a uniform random sample of that many, which the page says; the figures "
            "count every frame")
      .Flag("help", "", "", "print this");
  if (!args.Parse(argc, argv, 1)) return Usage(args, args.error());
  if (args.Has("help")) return Usage(args, "");
  if (!args.positional().empty()) return Usage(args, "unexpected argument " + args.positional()[0]);
  long long sessions, vertices, bones, influences;
  double fps, duration;
  if (!args.GetInt("sessions", &sessions, 1, 100000) || !args.GetDouble("fps", &fps, 0, 1e6) ||
      !args.GetDouble("duration", &duration, 0.1, 86400) ||
      !args.GetInt("vertices", &vertices, 300, 50'000'000) || !args.GetInt("bones", &bones, 1, 1000) ||
      !args.GetInt("influences", &influences, 1, 64)) {
    return Usage(args, args.error());
  }
  // Below that, a frame's scheduled time overflows the clock (until 2026-12-03 --fps 1e-12 sent
  // flat out and reported latencies of 9e12 ms).
  if (fps > 0 && fps < 1e-3) return Usage(args, "--fps: 0 (as fast as answered) or at least 0.001");
  const std::string method = args.Get("method"), encoding = args.Get("encoding");
  v1::Method wire = v1::METHOD_UNSPECIFIED;
  // Not the cage methods (no cages on the limb) nor baseline (it needs a sphere mesh the limb has none of).
  if (!client::MethodFromName(method, &wire) || wire == v1::METHOD_CAGE_MVC || wire == v1::METHOD_CAGE_GREEN ||
      wire == v1::METHOD_SUPERCAGES || wire == v1::METHOD_BASELINE) {
    return Usage(args, "--method: a method posed by the skeleton alone (lbs, dqs, blend, implicit, elastic-implicit, "
                       "swing-twist, pbs)");
  }
  const bool jiggle = args.Has("jiggle");
  const bool latest = args.Has("latest-pose-wins");
  if (latest && !(fps > 0)) return Usage(args, "--latest-pose-wins: needs --fps > 0 (frames are sent on schedule)");
  if (jiggle && wire != v1::METHOD_PBS) return Usage(args, "--jiggle: only with --method pbs");
  v1::CreateSessionRequest session_request;
  if (std::string error; !client::EncodingFromFlags(args, &session_request, &error)) return Usage(args, error);
  session_request.set_latest_pose_wins(latest);
  const std::string backend = args.Get("backend");
  if (backend != "auto" && backend != "cpu" && backend != "gpu") return Usage(args, "--backend: auto, cpu or gpu");
  // Where the results go, checked before the run (a long run's results were lost to a typo).
  std::string json_path, report_path;
  if (!args.GetOutputPath("json", &json_path, true) || !args.GetOutputPath("report", &report_path)) {
    return Usage(args, args.error());
  }

  const absl::StatusOr<client::ClientOptions> connection = client::ConnectionFromArgs(args);
  if (!connection.ok()) return Usage(args, std::string(connection.status().message()));
  client::Client c(args.Get("target"), *connection);
  if (auto st = c.WaitReady(); !st.ok()) {
    std::fprintf(stderr, "sinew-load: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  const LimbOptions limb = client::LimbWithVertices(size_t(vertices), uint32_t(bones), uint32_t(influences));
  RigInput input = MakeLimb(limb);
  if (jiggle) {
    std::vector<float> alpha(input.rig.positions.size() / 3);
    for (size_t v = 0; v < alpha.size(); ++v) alpha[v] = input.rig.positions[3 * v] > limb.length * 2 / 3 ? 1.f : 0.f;
    input.rig.attributes.push_back({"pbs_jiggle", 1, std::move(alpha)});
  }
  auto upload = c.UploadRig(client::RigToProto(input));
  if (!upload.ok()) {
    std::fprintf(stderr, "sinew-load: upload: %s\n", upload.status().ToString().c_str());
    return 1;
  }
  auto built = BuildRig(std::move(input));
  if (!built.ok()) return 1;
  constexpr int kCycle = 120;
  std::vector<v1::Pose> clip(kCycle);
  for (int f = 0; f < kCycle; ++f) client::PoseToProto(LimbPose(built->skeleton, double(f) / kCycle), clip[f]);

  std::vector<std::string> ids;
  // Ctrl-C closes them too (the streams' close_with_stream covers a killed process only once
  // its streams are open).
  std::vector<std::unique_ptr<client::ClosedOnInterrupt>> interrupt_closes;
  // Closes this run's sessions (they would count against --max-sessions until they idle out);
  // 1, for the error exits.
  // A server that does not answer is not waited for once a session (10 s each: a thousand were
  // almost three hours); those left idle out (--session-idle-ttl).
  auto close_all = [&] {
    for (size_t k = 0; k < ids.size(); ++k) {
      const absl::Status st = c.CloseSession(ids[k]).status();
      if (absl::IsDeadlineExceeded(st) || absl::IsUnavailable(st)) {
        if (k + 1 < ids.size()) {
          std::fprintf(stderr, "sinew-load: closing the sessions: %s; the other %zu are left to the server's idle TTL\n",
                       st.ToString().c_str(), ids.size() - k - 1);
        }
        break;
      }
    }
    return 1;
  };
  long long on_gpu = 0;  // sessions the server placed on a GPU (under auto, those without room go to the CPU)
  std::vector<std::string> preparations;  // the keys this run's sessions wait for (all alike)
  for (long long i = 0; i < sessions && !interrupted; ++i) {
    v1::CreateSessionRequest req = session_request;
    req.set_rig_id(upload->rig_id());
    req.mutable_deformer()->set_method(wire);
    if (jiggle) req.mutable_deformer()->mutable_pbs()->set_jiggle(true);
    req.set_backend(backend == "gpu" ? v1::BACKEND_GPU : backend == "cpu" ? v1::BACKEND_CPU : v1::BACKEND_AUTO);
    interrupt_closes.push_back(std::make_unique<client::ClosedOnInterrupt>(c));  // also during the create
    auto s = c.CreateSession(req);
    if (!s.ok()) {
      std::fprintf(stderr, "sinew-load: session %lld: %s\n", i, s.status().ToString().c_str());
      return close_all();
    }
    ids.push_back(s->session_id());
    interrupt_closes.back()->Set(s->session_id());
    if (i == 0) preparations.assign(s->preparations().begin(), s->preparations().end());
    on_gpu += s->backend() == v1::BACKEND_GPU;
  }

  // A method whose preparation runs in the background serves its fallback meanwhile: wait for
  // this run's (SessionInfo.preparations; until 2026-12-03 any unfinished one on the rig, so an
  // lbs run waited for an implicit run's fields on the same limb). A failed one is done; its
  // sessions then answer with the fallback, which the frames count as errors below. Leaving
  // early closes the sessions (close_all).
  for (auto deadline = Clock::now() + std::chrono::minutes(10); !preparations.empty() && !interrupted;) {
    auto info = c.GetRig(upload->rig_id());
    if (!info.ok()) {
      std::fprintf(stderr, "sinew-load: %s\n", info.status().ToString().c_str());
      return close_all();
    }
    const v1::Preparation* running = nullptr;
    for (const v1::Preparation& p : info->preparations()) {
      if (!p.done() && std::find(preparations.begin(), preparations.end(), p.key()) != preparations.end()) running = &p;
    }
    if (running == nullptr) break;
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "sinew-load: preparation %s not done after 10 minutes\n", running->key().c_str());
      return close_all();
    }
    std::fprintf(stderr, "sinew-load: waiting for %s (%.0f %%)\n", running->key().c_str(), 100 * running->progress());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }

  const bool want_report = !report_path.empty();
  std::vector<SessionResult> results(ids.size());
  std::vector<client::SampleReservoir> samples;
  samples.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    samples.emplace_back(want_report ? std::max<size_t>(kReportSamples / ids.size(), 4096) : 0, 0x9e3779b97f4a7c15ull * (i + 1));
  }
  // The common start, set once every session's thread runs: until 2026-12-04 it was 100 ms after
  // the first thread was made, and with a thousand sessions the threads made after it started
  // late, their first frames' latency counting from a send time that had passed.
  Clock::time_point start, end;
  std::latch running(static_cast<std::ptrdiff_t>(ids.size())), go(1);
  std::vector<std::thread> threads;
  std::string no_thread;  // why a session's thread could not start (the process's thread limit)
  std::atomic<bool> abandoned{false};  // a thread could not start: the others open nothing
  // Session i's thread: its stream, its frames, its answers into results[i].
  const auto session_thread = [&](size_t i) {
    running.count_down();
    go.wait();  // start and end are set
    if (abandoned.load()) return;
    SessionResult& r = results[i];
    client::SampleReservoir& sampled = samples[i];
    auto stream = c.OpenStream(std::chrono::system_clock::now() +
                               std::chrono::duration_cast<std::chrono::system_clock::duration>(end - Clock::now()) +
                               kAnswerGrace);
    // Every session starts at `start`, unpaced ones too: the run's rate is over [start, the
    // last answer], and frames sent before it were counted in no time (until 2026-12-03).
    std::this_thread::sleep_until(start);
    v1::DeformRequest req;
    req.set_session_id(ids[i]);
    req.set_close_with_stream(true);  // a killed load generator leaves no sessions behind
    v1::DeformResponse resp;
    client::PositionDecoder decoder;  // each frame is decoded, as a client would
    std::vector<float> xyz;
    // One answered frame: its latency from its scheduled send time, its bytes and checks.
    // A frame shed by the server's admission control is counted apart, without a latency (it
    // was not deformed).
    auto answered = [&](const v1::DeformResponse& resp, uint64_t f, Clock::time_point scheduled) {
      if (resp.has_error() && resp.frame() == f && resp.error().code() == int(grpc::StatusCode::UNAVAILABLE) &&
          resp.error().message().starts_with("overloaded")) {
        ++r.shed;
        return;
      }
      // Timed on arrival: the decode below is this client's work, not the server's (until
      // 2026-12-03 it was in the latency, charging a delta or float16 decode to the server).
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - scheduled).count();
      const absl::Status decoded = resp.has_error() ? absl::OkStatus() : decoder.Decode(resp, xyz);
      if (resp.has_error() || resp.frame() != f || resp.method() != wire || !decoded.ok()) {
        ++r.errors;
        if (r.first_error.empty()) {
          r.first_error = resp.has_error()       ? resp.error().message()
                          : resp.frame() != f    ? "frame number not echoed"
                          : !decoded.ok()        ? "positions: " + decoded.ToString()
                                                 : "a frame produced by " + v1::Method_Name(resp.method());
        }
      } else {
        // Only frames answered without error: a server failing fast made the percentiles look
        // better until 2026-12-03.
        ++r.ok;
        r.latency.Add(ms);
        if (want_report) sampled.Add({float(std::chrono::duration<double>(scheduled - start).count()), float(ms)});
        r.bytes += resp.positions().size();
      }
    };
    // Spread session phases over one frame period so that they do not all send at once.
    const double phase = fps > 0 ? double(i) / ids.size() / fps : 0;
    auto schedule = [&](uint64_t f) {
      return fps > 0 ? start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(phase + f / fps))
                     : Clock::now();
    };
    // Behind schedule at the end: the frames from f due before it were never sent. They are the
    // ones that would have waited longest, so each counts in the latencies with its wait so far,
    // a lower bound (until 2026-12-07 they were left out: an overloaded server's p99 and max read
    // low, a review's 1 000 frames scheduled and 474 counted), and in the report's charts (until
    // 2026-12-07 only in its table, whose p99 the charts then undercut).
    auto not_sent_from = [&](uint64_t f, Clock::time_point now) {
      for (uint64_t g = f; fps > 0 && schedule(g) < end; ++g) {
        const double waited = std::chrono::duration<double, std::milli>(now - schedule(g)).count();
        ++r.not_sent;
        r.latency.Add(waited);
        if (want_report) sampled.Add({float(std::chrono::duration<double>(schedule(g) - start).count()), float(waited)});
      }
    };
    if (latest) {
      // Frames go out on schedule whatever the answers; a reader takes the answers, in order,
      // each frame once: skipped, or deformed (its latency from its scheduled send time). The
      // scheduled times wait in a ring; a writer kRing frames ahead of the answers waits for
      // them (the frames it then sends late keep their scheduled times, so the wait shows in
      // their latency) instead of writing over a time not yet read (until 2026-12-03 it did,
      // and a lapped frame's latency was measured from a later frame's schedule).
      constexpr size_t kRing = 1 << 14;
      std::vector<std::atomic<int64_t>> sent(kRing);
      std::atomic<uint64_t> read{0};
      std::atomic<bool> reader_done{false};
      std::thread reader;
      try {
        reader = std::thread([&] {
          v1::DeformResponse got;
          for (uint64_t f = 0; stream->Read(&got); read.store(++f)) {
            if (got.skipped()) {
              ++r.skipped;
              continue;
            }
            answered(got, f, Clock::time_point(Clock::duration(sent[f % kRing].load())));
          }
          reader_done.store(true);
        });
      } catch (const std::system_error& e) {  // past the process's thread limit: this session sends nothing
        ++r.errors;
        r.first_error = absl::StrCat("its reader thread: ", e.what());
        stream->WritesDone();
        (void)stream->Close();
        return;
      }
      uint64_t written = 0;
      // Behind schedule at the end (the writer starved of CPU, or waiting on the ring): the frames
      // from `unsent` due before it were never sent, counted as in the other mode once the reader,
      // which writes the same figures, has ended (until 2026-12-07 they were dropped here).
      std::optional<std::pair<uint64_t, Clock::time_point>> unsent;
      for (uint64_t f = 0;; ++f) {
        const auto scheduled = schedule(f);
        if (scheduled >= end || interrupted) break;
        if (const auto now = Clock::now(); now >= end) {
          unsent.emplace(f, now);
          break;
        }
        if (!SleepUntil(scheduled)) break;
        while (f >= read.load() + kRing && !reader_done.load() && !interrupted) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (reader_done.load() || interrupted) break;
        sent[f % kRing].store(scheduled.time_since_epoch().count());
        req.set_frame(f);
        if (jiggle) req.set_time_step(1 / fps);
        *req.mutable_pose() = clip[f % kCycle];
        if (!stream->Write(req)) break;
        written = f + 1;
      }
      stream->WritesDone();
      reader.join();
      if (unsent) not_sent_from(unsent->first, unsent->second);
      // Every frame written is answered, skipped or deformed, on a stream that ends well; the
      // others count as errors, as in the other mode.
      if (const uint64_t answers = read.load(); answers < written) {
        r.errors += written - answers;
        if (r.first_error.empty()) {
          r.first_error = absl::StrCat("the stream ended with ", written - answers, " frames unanswered");
        }
      }
    } else {
      for (uint64_t f = 0;; ++f) {
        const auto scheduled = schedule(f);
        if (scheduled >= end || interrupted) break;
        if (const auto now = Clock::now(); now >= end) {
          not_sent_from(f, now);
          break;
        }
        if (fps > 0 && !SleepUntil(scheduled)) break;
        req.set_frame(f);
        if (jiggle && fps > 0) req.set_time_step(1 / fps);
        *req.mutable_pose() = clip[f % kCycle];
        if (!stream->Write(req) || !stream->Read(&resp)) {
          ++r.errors;
          const absl::Status st = stream->Close();
          if (r.first_error.empty()) {  // the first is kept (until 2026-12-03 overwritten, with "OK" too)
            r.first_error = st.ok() ? "the stream ended before frame " + std::to_string(f) + " was answered"
                                    : st.ToString();
          }
          return;
        }
        answered(resp, f, scheduled);
      }
    }
    if (auto st = stream->Close(); !st.ok()) {
      ++r.errors;
      if (r.first_error.empty()) r.first_error = st.ToString();
    }
  };
  for (size_t i = 0; i < ids.size() && no_thread.empty(); ++i) {
    try {
      threads.emplace_back(session_thread, i);
    } catch (const std::system_error& e) {
      no_thread = absl::StrCat("session ", i, "'s thread: ", e.what());
    }
  }
  if (!no_thread.empty()) {
    // One thread a session (two with --latest-pose-wins): past the process's limit the run
    // cannot go on. The threads made are let go with nothing to send and the sessions closed
    // (until 2026-12-07 the uncaught error aborted the program and left them open).
    std::fprintf(stderr, "sinew-load: %s; %zu sessions need %zu threads: run fewer, or several sinew-load processes\n",
                 no_thread.c_str(), ids.size(), latest ? 2 * ids.size() : ids.size());
    abandoned.store(true);
    start = end = Clock::now();
    go.count_down();
    for (auto& t : threads) t.join();
    return close_all();
  }
  running.wait();
  // 100 ms for the streams to open.
  start = Clock::now() + std::chrono::milliseconds(100);
  end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
  go.count_down();
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();

  client::LatencyStats all;
  uint64_t ok = 0, errors = 0, bytes = 0, skipped = 0, shed = 0, not_sent = 0;
  std::string first_error;
  client::LoadReport report;
  for (auto& r : results) {
    all.Merge(r.latency);
    ok += r.ok;
    errors += r.errors;
    bytes += r.bytes;
    skipped += r.skipped;
    shed += r.shed;
    not_sent += r.not_sent;
    if (first_error.empty()) first_error = r.first_error;
  }
  // Frames answered over the time from the start to the last answer (frames sent before the
  // end are answered after it; until 2026-12-03 this divided by at most --duration, which
  // overstated the rate by a frame's latency over the duration).
  // A paced run's sessions stop at the last frame scheduled before the end, about a frame period
  // short of it: its N frames span N - 1 periods, and over the time to the last answer alone the
  // rate read above its target (2.7 frames/s at --fps 2 for 2 s, until 2026-12-07). So the time is
  // at least the run's own length (not for a run cut short by Ctrl-C: to its last answer).
  const double span = fps > 0 && !interrupted ? std::max(elapsed, duration) : elapsed;
  const double achieved = span > 0 ? ok / span : 0;
  // The sessions that ran: fewer than --sessions when Ctrl-C came while they were being created.
  const long long ran = static_cast<long long>(ids.size());
  const double target = fps > 0 ? fps * ran : 0;
  const double p50 = all.Percentile(50), p90 = all.Percentile(90), p99 = all.Percentile(99),
               mx = all.Max();
  const std::string on = on_gpu == ran ? "gpu"
                         : on_gpu == 0 ? "cpu"
                                       : absl::StrFormat("mixed (%lld gpu, %lld cpu)", on_gpu, ran - on_gpu);
  report.title = absl::StrFormat(
      "sinew-load: %lld sessions x %s frames/s for %.1f s; rig %lld vertices, %s, %s, on %s; server %s", ran,
      fps > 0 ? absl::StrFormat("%g", fps).c_str() : "max", duration, vertices, method.c_str(), encoding.c_str(), on,
      c.target().c_str());
  if (interrupted) {
    absl::StrAppendFormat(&report.title, "; interrupted (%s) after %.1f s", sigabbrev_np(interrupted),
                          std::max(0.0, elapsed));
  }
  // With --json - stdout carries the JSON alone; the table goes to stderr.
  FILE* text_out = json_path == "-" ? stderr : stdout;
  std::fprintf(text_out, "%s\n", report.title.c_str());
  // The table's rows: metric, value, a note after it. The HTML report shows the same strings.
  struct Row {
    std::string name, value, note;
  };
  std::vector<Row> rows;
  if (target > 0) rows.push_back({"target frames/s", absl::StrFormat("%.1f", target), ""});
  rows.push_back({"achieved frames/s", absl::StrFormat("%.1f", achieved),
                  target > 0 ? absl::StrFormat("   (%.1f %% of target)", 100 * achieved / target) : ""});
  rows.push_back({"frames ok", absl::StrFormat("%llu", (unsigned long long)ok), ""});
  rows.push_back({"errors", absl::StrFormat("%llu", (unsigned long long)errors), ""});
  if (latest) rows.push_back({"frames skipped", absl::StrFormat("%llu", (unsigned long long)skipped), ""});
  rows.push_back({"frames shed", absl::StrFormat("%llu", (unsigned long long)shed), ""});
  if (fps > 0) {
    rows.push_back({"frames not sent", absl::StrFormat("%llu", (unsigned long long)not_sent),
                    not_sent > 0 ? "   (due before the end, the server too slow to take them; their wait is in the latency)"
                                 : ""});
  }
  rows.push_back({"latency p50 ms", absl::StrFormat("%.3f", p50), ""});
  rows.push_back({"latency p90 ms", absl::StrFormat("%.3f", p90), ""});
  rows.push_back({"latency p99 ms", absl::StrFormat("%.3f", p99), ""});
  rows.push_back({"latency max ms", absl::StrFormat("%.3f", mx), ""});
  const double frame_bytes = ok > 0 ? double(bytes) / double(ok) : 0;
  rows.push_back({"position bytes/frame", absl::StrFormat("%.0f", frame_bytes),
                  absl::StrFormat("   (%.3f of float32's)", frame_bytes / (12.0 * double(built->vertex_count())))});
  std::fprintf(text_out, "  %-22s %12s\n", "metric", "value");
  for (const Row& r : rows) {
    std::fprintf(text_out, "  %-22s %12s%s\n", r.name.c_str(), r.value.c_str(), r.note.c_str());
    report.figures.push_back({r.name, r.value + r.note});
  }
  if (!first_error.empty()) std::fprintf(text_out, "  first error: %s\n", first_error.c_str());

  const std::string json = absl::StrFormat(
      "{\"sessions\":%lld,\"fps_per_session\":%g,\"duration_s\":%g,\"vertices\":%lld,"
      "\"method\":\"%s\",\"encoding\":\"%s\",\"backend\":\"%s\",\"sessions_on_gpu\":%lld,\"target_frames_per_s\":%.1f,"
      "\"achieved_frames_per_s\":%.1f,\"elapsed_s\":%.4f,\"frames_ok\":%llu,\"errors\":%llu,"
      "\"latency_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},\"position_bytes_per_frame\":%.0f,\"frames_skipped\":%llu,"
      "\"frames_shed\":%llu,\"frames_not_sent\":%llu,\"interrupted\":%s}\n",
      ran, fps, duration, vertices, method, encoding, on.substr(0, on.find(' ')), on_gpu, target, achieved,
      std::max(0.0, elapsed),
      (unsigned long long)ok, (unsigned long long)errors, p50, p90, p99, mx, frame_bytes, (unsigned long long)skipped,
      (unsigned long long)shed, (unsigned long long)not_sent, interrupted ? "true" : "false");
  bool written = true;  // each output is tried whatever became of the other
  if (json_path == "-") {
    std::printf("%s", json.c_str());
  } else if (!json_path.empty()) {
    // Whole or not at all (scripts/soak.sh reads these files).
    if (auto st = WriteFileAtomically(json_path, json, {.durable = false}); !st.ok()) {
      std::fprintf(stderr, "sinew-load: --json: %s\n", std::string(st.message()).c_str());
      written = false;
    }
  }
  if (want_report) {
    client::MergeSamples(samples, report, 0x2545f4914f6cdd1dull);
    if (!first_error.empty()) report.figures.push_back({"first error", first_error});
    // The time that ran, when Ctrl-C cut it short: its windows, axis and rates (until 2026-12-03
    // --duration, so that a long run stopped early drew every answer into its first window).
    report.duration_s = interrupted ? std::min(duration, std::max(elapsed, 1e-3)) : duration;
    if (auto st = client::WriteLoadReport(report_path, report); !st.ok()) {
      std::fprintf(stderr, "sinew-load: --report: %s\n", std::string(st.message()).c_str());
      written = false;
    }
  }
  // The sessions are closed once the run is reported (the streams' close_with_stream has closed
  // them on a server that answers; one that stopped answering would hold the report back).
  close_all();
  // What was run is reported; the run was cut short. An output that could not be written is
  // the failure to report (until 2026-12-04 the signal's status hid it).
  if (interrupted) return written ? 128 + interrupted : 1;
  if (ok == 0) {  // every frame shed (or none sent): nothing was measured (until 2026-12-03: exit 0)
    std::fprintf(stderr, "sinew-load: no frame was answered without error (%llu shed): nothing was measured\n",
                 (unsigned long long)shed);
    return 1;
  }
  return errors == 0 && written ? 0 : 1;
}
}  // namespace
