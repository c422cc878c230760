// sinew-server: the Sinew deformation service. See --help.
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/swingtwist/blas.h"
#include "gpu/runtime/device_api.h"
#include "server/server.h"
#include "server/version.h"

namespace {

using sinew::server::ServerOptions;

struct Flag {
  const char* name;
  const char* value_name;
  std::string help;
  std::function<bool(const std::string&)> set;
};

template <class T>
std::function<bool(const std::string&)> Number(T& out) {
  return [&out](const std::string& v) {
    if constexpr (std::is_floating_point_v<T>) {
      double d;
      // Finite and at most 1e9 (31 years): the server turns durations into int64 milliseconds.
      if (!absl::SimpleAtod(v, &d) || !(d >= 0 && d <= 1e9)) return false;
      out = static_cast<T>(d);
    } else {
      uint64_t u;
      if (!absl::SimpleAtoi(v, &u)) return false;
      out = static_cast<T>(u);
      if (static_cast<uint64_t>(out) != u) return false;
    }
    return true;
  };
}

std::string HostOf(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  return colon == std::string::npos ? host_port : host_port.substr(0, colon);
}

void Usage(const std::vector<Flag>& flags, std::FILE* out) {
  std::fprintf(out,
               "sinew-server %s: keeps rigs resident and deforms posed frames for remote clients "
               "(gRPC API sinew.v1).\n\nUsage: sinew-server [flags]\n\nFlags (--name=VALUE or "
               "--name VALUE):\n",
               sinew::server::kVersion);
  for (const Flag& f : flags) {
    std::fprintf(out, "  --%s %s\n      %s\n", f.name, f.value_name, f.help.c_str());
  }
  std::fprintf(out,
               "  --help\n      Print this and exit.\n"
               "  --version\n      Print the version and what the GPU backend was built with (CUDA version and\n"
               "      device code, or that it was built without CUDA), and exit.\n\n"
               "Once ready it prints `grpc listening on HOST:PORT` and, unless metrics are off,\n"
               "`metrics listening on HOST:PORT` on stdout. SIGTERM or SIGINT: stop accepting,\n"
               "answer the frames already received, finish open streams with UNAVAILABLE, exit 0.\n");
}

}  // namespace

int main(int argc, char** argv) {
  // Signals are taken synchronously by main via sigwait; block them before any thread starts
  // so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // reloads --token-file
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ServerOptions o;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    o.cache_dir = std::string(xdg) + "/sinew";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    o.cache_dir = std::string(home) + "/.cache/sinew";
  }
  std::vector<Flag> flags = {
      {"listen", "HOST:PORT", "gRPC address; port 0 picks a free port. Default " + o.listen,
       [&](const std::string& v) { o.listen = v; return !v.empty(); }},
      {"metrics-listen", "HOST:PORT",
       "Prometheus /metrics HTTP address; port 0 picks a free port; empty turns metrics off. "
       "Default " + o.metrics_listen,
       [&](const std::string& v) { o.metrics_listen = v; return true; }},
      {"max-vertices", "N", absl::StrCat("Most vertices in one rig, 1 to 2^32 - 1. Default ", o.max_vertices),
       Number(o.max_vertices)},
      {"max-rig-bytes", "BYTES",
       absl::StrCat("Largest serialized rig accepted by UploadRig, 1 to 2^31 - 1 (protobuf's limit for one message). Default ", o.max_rig_bytes),
       Number(o.max_rig_bytes)},
      {"max-background-preparations", "N",
       absl::StrCat("Per-rig preparations that may run or wait in the background at once, for sessions that serve "
                    "their method's fallback meanwhile (swing-twist, pbs): a CreateSession that would queue one more "
                    "is refused with RESOURCE_EXHAUSTED, to be sent again once some are done (GetRig lists them; "
                    "CancelPreparation stops one). 0: no limit. Default ",
                    o.max_background_preparations),
       Number(o.max_background_preparations)},
      {"max-upload-bytes", "BYTES",
       "Bytes the UploadRig calls in progress may announce together (each buffers its rig until it is "
       "parsed): past it an upload is refused at its header with RESOURCE_EXHAUSTED, to be sent again once "
       "others are done. With --token-file a tenant's uploads hold at most half of it (or one rig of "
       "--max-rig-bytes, where that is more). At least --max-rig-bytes. Default 0: twice --max-rig-bytes",
       Number(o.max_upload_bytes)},
      {"max-store-bytes", "BYTES",
       absl::StrCat("Memory for all resident rigs' own data (mesh, skeleton, weights, cages; not "
                    "the methods' per-rig preparations, which RigInfo.resident_bytes adds and --max-prepared-bytes "
                    "bounds); unused "
                    "rigs are evicted least recently used first to make room. Default ", o.max_store_bytes),
       Number(o.max_store_bytes)},
      {"max-prepared-bytes", "BYTES",
       absl::StrCat("Memory for the methods' per-rig preparations (implicit skinning's fields, pbs's tets, "
                    "cage coordinates, ...; one per rig and parameter set asked for): past it, those no open "
                    "session uses are dropped, least recently asked for first (a session that asks again "
                    "prepares again, or reads it from --cache-dir). Default ", o.max_prepared_bytes),
       Number(o.max_prepared_bytes)},
      {"max-sessions", "N", absl::StrCat("Most open sessions. Default ", o.max_sessions),
       Number(o.max_sessions)},
      {"session-idle-ttl", "SECONDS",
       absl::StrCat("A session with no request for this long (and no DeformClip batch playing it) is closed, "
                    "and a shared-memory region no frame "
                    "has used for this long is unregistered. Default ",
                    o.session_idle_ttl_seconds),
       Number(o.session_idle_ttl_seconds)},
      {"worker-threads", "N",
       "Threads that deform frames (all sessions share them); also how many background preparations run at "
       "once. 0 = one per hardware thread (the host's, not a container's CPU limit: set it in containers). "
       "Default 0",
       Number(o.worker_threads)},
      {"inline-frame-us", "MICROSECONDS",
       absl::StrCat("A frame of a CPU session whose previous frame took less than this runs on the "
                    "gRPC thread that received it instead of being handed to a worker (saves a thread "
                    "hand-off, tens of microseconds); never an elastic implicit session's, whose frame "
                    "cost follows the pose's motion; 0 = always the workers. Default ",
                    o.inline_frame_us),
       Number(o.inline_frame_us)},
      {"max-queue-ms", "MILLISECONDS",
       absl::StrCat("Admission control: a Deform or StreamDeform frame that waited longer than this "
                    "for a worker (a GPU session's frame: for a worker and the device) is answered "
                    "UNAVAILABLE (\"overloaded\") without being deformed, keeping latency bounded when "
                    "clients ask for more than the server can do; 0 = wait as long as it takes. Batches "
                    "(DeformClip) are never shed, nor frames of stateful or device-state (implicit, "
                    "pbs) GPU sessions once they reach the device's queue. Default ",
                    o.max_queue_ms),
       Number(o.max_queue_ms)},
      {"max-message-bytes", "BYTES",
       absl::StrCat("Largest single request message (upload chunks, frames), 1 to 2^31 - 1 (gRPC's limit). Default ",
                    o.max_message_bytes),
       Number(o.max_message_bytes)},
      {"gpu", "auto|off|emulate",
       "GPU backend: auto uses CUDA devices when there are any (sessions with BACKEND_AUTO "
       "run their per-vertex stage there: every method, implicit skinning's tracking included), "
       "off never does, emulate runs one emulated device on the CPU (for tests and demos, not "
       "speed). Default auto",
       [&](const std::string& v) { o.gpu = v; return v == "auto" || v == "off" || v == "emulate"; }},
      {"gpu-memory-limit", "BYTES",
       "Device memory Sinew may use per GPU for rigs, their methods' device data and sessions (each with its "
       "room in the batch buffers); 0 = 90 % of "
       "the device. Device data no session holds is freed when a new session needs the room; past the "
       "limit, BACKEND_AUTO sessions run on the CPU and BACKEND_GPU ones are refused. Default 0",
       Number(o.gpu_memory_limit_bytes)},
      {"gpu-batch-window-us", "MICROSECONDS",
       absl::StrCat("How long a GPU frame waits for frames of other sessions to share its kernel "
                    "launch, at most 10000000 (keep it below --max-queue-ms: a frame that waits alone "
                    "for the window past that is shed); 0 launches at once, and frames that arrive "
                    "while a batch runs share the next. Default ", o.gpu_batch_window_us),
       Number(o.gpu_batch_window_us)},
      {"cache-dir", "DIR",
       "Folder for precomputations kept across restarts: implicit skinning's composition "
       "operators (about 18 MB, built in seconds when missing) and, under prepared/, each rig's "
       "swing-twist weights. Files are written whole (a unique temporary file, then a rename), so "
       "replicas may share the folder; temporaries older than an hour, left by a killed writer, are "
       "removed at start. Empty keeps everything in memory only. Default $XDG_CACHE_HOME/sinew, "
       "else $HOME/.cache/sinew"
       + (o.cache_dir.empty() ? std::string() : " (here " + o.cache_dir + ")"),
       [&](const std::string& v) { o.cache_dir = v; return true; }},
      {"max-cache-bytes", "BYTES",
       absl::StrCat("The most bytes of per-rig preparations kept under --cache-dir's prepared/ folder (each "
                    "rig's swing-twist weights, about 14 bytes a vertex): after each one written, the least "
                    "recently written or read are removed until the rest fit (replicas sharing the folder each "
                    "trim it; a removed file is computed again when asked for). The composition operators are "
                    "not counted. 0: no limit. Default ", o.max_cache_bytes),
       Number(o.max_cache_bytes)},
      {"shared-memory-bytes", "BYTES",
       "Same-host clients may register POSIX shared-memory objects named /sinew-... "
       "(RegisterSharedMemory) for frames to write their positions into; the most bytes mapped at "
       "once, in whole pages (a tenant's own share: its max_shared_memory_bytes quota). A region no frame has used for --session-idle-ttl is unregistered (a client that died "
       "without unregistering does not hold its bytes). 0 turns it off. Default 0",
       Number(o.max_shared_memory_bytes)},
      {"state-dir", "DIR",
       "Keep every uploaded rig here (written and synced before UploadRig answers OK, with the tenants "
       "holding it; DeleteRig removes it) and every open session (before CreateSession answers; "
       "UpdateSession's parameters too; closing or expiry removes it), and load them again at start under "
       "the same ids, so that a restart or a crash loses no acknowledged rig or session. A stopping server "
       "(SIGTERM, SIGINT; after the drain, not bounded by --drain-timeout) also keeps each stateful session's "
       "history (pbs jiggle, elastic implicit, supercages, swing-twist unwrap_twist, pipelines with such a "
       "stage), which the next start restores once, on the kind of backend it ran on (a session serving its "
       "method's fallback gets it when the method serves, unless a frame comes first); after a crash they "
       "start again from rest. DIR is locked while the server runs (DIR/lock): a second server given it "
       "fails to start, naming the first's pid. Default: none (memory only)",
       [&](const std::string& v) { o.state_dir = v; return !v.empty(); }},
      {"token-file", "FILE",
       "Bearer tokens, one \"TOKEN TENANT [QUOTA=N ...]\" per line (# comments; tokens of 16 characters "
       "or more; quotas max_rigs, max_rig_bytes, max_sessions, max_frames_per_second, "
       "max_shared_memory_bytes). "
       "Every call must then send metadata \"authorization: Bearer TOKEN\" (else UNAUTHENTICATED), and "
       "rigs, sessions and shared-memory regions belong to their tenant: another tenant gets NOT_FOUND. "
       "SIGHUP reads the file again (a bad file keeps the old tokens). A file every user of the host may "
       "read is warned of. Default: none (no authentication, "
       "one tenant; for loopback development)",
       [&](const std::string& v) { o.token_file = v; return !v.empty(); }},
      {"tls-cert", "FILE", "TLS on the gRPC port: the server's certificate chain (PEM), with --tls-key; read once, "
       "at start. Default: none (plaintext)",
       [&](const std::string& v) { o.tls_cert = v; return !v.empty(); }},
      {"tls-key", "FILE", "The private key (PEM) of --tls-cert", [&](const std::string& v) { o.tls_key = v; return !v.empty(); }},
      {"tls-client-ca", "FILE",
       "Mutual TLS: clients must present a certificate signed by this CA (PEM). Default: none (any client)",
       [&](const std::string& v) { o.tls_client_ca = v; return !v.empty(); }},
      {"keepalive-seconds", "SECONDS",
       absl::StrCat("A connection without traffic for this long is pinged (HTTP/2 keepalive) and dropped when "
                    "the ping is not answered within as long again, ending its calls: a client that vanished "
                    "without closing (asleep, unplugged, stopped) no longer holds a batch, a stream or their "
                    "sessions. 0: no pings. Default ",
                    o.keepalive_seconds),
       Number(o.keepalive_seconds)},
      {"upload-idle-timeout", "SECONDS",
       absl::StrCat("An UploadRig call that sends nothing (no header, no chunk) for this long is cancelled, and "
                    "the bytes it announced go back to --max-upload-bytes (a client that stalls while its "
                    "connection stays alive would otherwise hold them for good). 0: never. Default ",
                    o.upload_idle_seconds),
       Number(o.upload_idle_seconds)},
      {"drain-timeout", "SECONDS",
       absl::StrCat("On SIGTERM, how long open streams get to finish (calls still open then are "
                    "cancelled, which stops a long elastic implicit frame at its next relaxation "
                    "round); background preparations, cancelled, get what is left of it (at least "
                    "1 s), and the server exits without any still running then. Default ",
                    o.drain_timeout_seconds),
       Number(o.drain_timeout_seconds)},
  };

  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      Usage(flags, stdout);
      return 0;
    }
    if (arg == "--version") {
      std::printf("sinew-server %s\nGPU backend: %s\n", sinew::server::kVersion, sinew::gpu::CudaBuildInfo().c_str());
      return 0;
    }
    if (arg.rfind("--", 0) != 0) {
      std::fprintf(stderr, "sinew-server: unexpected argument '%s' (see --help)\n", arg.c_str());
      return 2;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags) {
      if (name == f.name) flag = &f;
    }
    if (!flag) {
      std::fprintf(stderr, "sinew-server: unknown flag --%s (see --help)\n", name.c_str());
      return 2;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "sinew-server: --%s needs a value %s\n", flag->name, flag->value_name);
        return 2;
      }
      value = argv[++i];
    }
    if (!flag->set(value)) {
      std::fprintf(stderr, "sinew-server: --%s: '%s' is not a valid %s\n", flag->name,
                   value.c_str(), flag->value_name);
      return 2;
    }
  }
  if (o.max_sessions == 0 || o.session_idle_ttl_seconds == 0 || o.max_vertices == 0) {
    std::fprintf(stderr, "sinew-server: --max-sessions, --session-idle-ttl and --max-vertices must be > 0\n");
    return 2;
  }
  // Sizes a server cannot serve with (until 2026-12-03 it started, and refused nearly every
  // request), and a pool no machine has threads for.
  if (o.max_message_bytes == 0 || o.max_store_bytes == 0 || o.max_rig_bytes == 0) {
    std::fprintf(stderr, "sinew-server: --max-message-bytes, --max-store-bytes and --max-rig-bytes must be > 0\n");
    return 2;
  }
  // Sizes past what the server can hold or report (until 2026-12-07 --max-rig-bytes 2^63 made
  // the default upload budget, twice it, wrap to 0; --max-vertices 2^32 was reported as 0,
  // "unlimited", to clients; a --max-message-bytes past 2^31 − 1 was cut to that by gRPC while
  // reported whole), and an upload budget no rig fits (every upload was refused with "send it
  // again once others are done", which never helped). A rig past 2^31 - 1 bytes is one message
  // protobuf does not parse: until 2026-12-07 accepted up to 2^62 and then refused as "not a
  // serialized sinew.v1.Rig".
  if (o.max_rig_bytes > uint64_t(std::numeric_limits<int>::max()) ||
      o.max_vertices > std::numeric_limits<uint32_t>::max() ||
      o.max_message_bytes > uint64_t(std::numeric_limits<int>::max())) {
    std::fprintf(stderr, "sinew-server: --max-rig-bytes at most 2^31 - 1 (protobuf's limit for one message), "
                 "--max-vertices at most 2^32 - 1, --max-message-bytes at most 2^31 - 1 (gRPC's limit)\n");
    return 2;
  }
  if (o.max_upload_bytes > 0 && o.max_upload_bytes < o.max_rig_bytes) {
    std::fprintf(stderr, "sinew-server: --max-upload-bytes %llu is below --max-rig-bytes %llu: a rig of that size could "
                 "never be uploaded (0: twice --max-rig-bytes)\n", (unsigned long long)o.max_upload_bytes,
                 (unsigned long long)o.max_rig_bytes);
    return 2;
  }
  // A GPU frame alone waits the whole window for company: windows of an hour were taken, and one
  // at or past --max-queue-ms sheds every such frame as "overloaded" without a word (until
  // 2026-12-07). Past 10 s refused; at or past --max-queue-ms said at start (a test of shedding
  // in the device's queue sets it so on purpose).
  if (o.gpu_batch_window_us > 10000000) {
    std::fprintf(stderr, "sinew-server: --gpu-batch-window-us %u: at most 10000000 (10 s)\n", o.gpu_batch_window_us);
    return 2;
  }
  if (o.max_queue_ms > 0 && uint64_t(o.gpu_batch_window_us) >= 1000 * uint64_t(o.max_queue_ms)) {
    std::fprintf(stderr, "sinew-server: warning: --gpu-batch-window-us %u is not below --max-queue-ms %u: a GPU frame "
                 "that waits alone for the window is shed as overloaded\n", o.gpu_batch_window_us, o.max_queue_ms);
  }
  // HOST:PORT, as --listen: the metrics server (CivetWeb) reads a bare port as every interface,
  // commas as several ports and an "s" suffix as TLS (until 2026-12-07 passed on as given: the
  // unauthenticated /metrics on every interface for "--metrics-listen 9464").
  if (!o.metrics_listen.empty()) {
    const size_t colon = o.metrics_listen.rfind(':');
    const std::string port = colon == std::string::npos ? "" : o.metrics_listen.substr(colon + 1);
    if (colon == 0 || colon == std::string::npos || port.empty() ||
        port.find_first_not_of("0123456789") != std::string::npos ||
        o.metrics_listen.find(',') != std::string::npos) {
      std::fprintf(stderr, "sinew-server: --metrics-listen '%s': give HOST:PORT (e.g. 127.0.0.1:9464, 0.0.0.0:9464 "
                   "for every interface), or empty to turn metrics off\n", o.metrics_listen.c_str());
      return 2;
    }
  }
  if (o.worker_threads > 4096) {
    std::fprintf(stderr, "sinew-server: --worker-threads %zu: at most 4096 (0: one per hardware thread)\n",
                 o.worker_threads);
    return 2;
  }
  if (const long page = sysconf(_SC_PAGESIZE); o.max_shared_memory_bytes > 0 && page > 0 &&
                                               o.max_shared_memory_bytes < uint64_t(page)) {
    std::fprintf(stderr, "sinew-server: --shared-memory-bytes %llu: below one page (%ld bytes) no region fits; 0 turns "
                 "shared memory off\n", (unsigned long long)o.max_shared_memory_bytes, page);
    return 2;
  }

  // The token file holds the tokens in clear: one other users of the host may read is said so,
  // at start and at each reload (not refused: a mounted secret may be so by its platform's default).
  const auto warn_if_others_read = [&o] {
    struct stat st {};
    if (o.token_file.empty() || stat(o.token_file.c_str(), &st) != 0 || (st.st_mode & S_IROTH) == 0) return;
    std::fprintf(stderr,
                 "sinew-server: warning: --token-file %s is readable by every user of this host (mode %04o); "
                 "chmod o-r it\n",
                 o.token_file.c_str(), static_cast<unsigned>(st.st_mode & 07777));
  };
  warn_if_others_read();
  sinew::server::SinewServer server(o);
  if (auto st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "sinew-server: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "sinew-server: %s\n", server.gpu_status().c_str());
  if (!o.token_file.empty()) std::fprintf(stderr, "sinew-server: --token-file: %zu tokens loaded\n", server.token_count());
  std::fprintf(stderr, "sinew-server: swing-twist's sparse factorizations use %s\n", sinew::SystemBlas().name.c_str());
  std::printf("grpc listening on %s:%d\n", HostOf(o.listen).c_str(), server.grpc_port());
  if (server.metrics_port() != 0) {
    std::printf("metrics listening on %s:%d\n", HostOf(o.metrics_listen).c_str(),
                server.metrics_port());
  }
  std::fflush(stdout);

  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    warn_if_others_read();
    if (auto st = server.ReloadTokens(); st.ok()) {
      std::fprintf(stderr, "sinew-server: SIGHUP: %zu tokens loaded\n", server.token_count());
    } else {
      std::fprintf(stderr, "sinew-server: SIGHUP: %s; the previous tokens stay\n", std::string(st.message()).c_str());
    }
  }
  std::fprintf(stderr, "sinew-server: %s received, draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server.Shutdown();
  std::fprintf(stderr, "sinew-server: stopped\n");
  std::fflush(nullptr);
  // Every call has been answered or ended and the workers are joined. Skip the destructors of
  // the metrics HTTP server and gRPC's global state, which poll for seconds before returning.
  std::_Exit(0);
}
