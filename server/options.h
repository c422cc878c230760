// Settings of one sinew-server; every field has a command-line flag (see main.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sinew::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";         // gRPC HOST:PORT; port 0 picks a free one
  std::string metrics_listen = "127.0.0.1:9464";  // Prometheus HOST:PORT; empty disables
  size_t max_vertices = 10'000'000;               // per rig
  uint64_t max_rig_bytes = uint64_t{1} << 30;     // serialized size of one uploaded rig
  // What the uploads in progress announce together (their buffers); 0: twice max_rig_bytes.
  uint64_t max_upload_bytes = 0;
  uint64_t max_store_bytes = uint64_t{8} << 30;   // all resident rigs together
  // The methods' per-rig preparations together: past it, those no open session uses go, least
  // recently asked for first (Service::TrimPreparations).
  uint64_t max_prepared_bytes = uint64_t{8} << 30;
  size_t max_sessions = 1000;
  // Preparations running or waiting in the background for sessions that serve a fallback
  // meanwhile (swing-twist, pbs): a create that would queue one more is refused
  // RESOURCE_EXHAUSTED. 0: no limit.
  size_t max_background_preparations = 64;
  uint32_t session_idle_ttl_seconds = 300;
  size_t worker_threads = 0;  // 0: one per hardware thread
  // A Deform or StreamDeform frame of a CPU session whose last frame took less than this runs on
  // the gRPC thread that read it, not on the worker pool: a hand-off to a worker costs tens of
  // microseconds on a VM (measured: 20k-vertex LBS stream 0.58 -> 0.67 of raw gRPC echo). 0: always
  // the pool.
  uint32_t inline_frame_us = 200;
  // Admission control: a Deform or StreamDeform frame that waited longer than this for a worker is
  // answered UNAVAILABLE ("overloaded") without being deformed, so that an overloaded server's
  // latency stays bounded instead of queueing for seconds. 0: frames wait as long as it takes.
  uint32_t max_queue_ms = 250;
  uint64_t max_message_bytes = uint64_t{64} << 20;  // largest single request message
  double drain_timeout_seconds = 10;  // SIGTERM: time given to open streams to finish
  // HTTP/2 keepalive: a connection without traffic for this long is pinged, and dropped when the
  // ping is not answered within as long again, which ends its calls. A client that vanished
  // without closing (a machine asleep, a cable out, a process stopped) then no longer holds a
  // batch, a stream or the sessions and quotas they keep. 0: no pings.
  uint32_t keepalive_seconds = 60;
  // An UploadRig call that receives nothing (no header, no chunk) for this long is cancelled, and
  // what it announced goes back to --max-upload-bytes: a client that keeps its connection alive
  // but stopped sending (keepalive does not end it) would otherwise hold its share of the upload
  // budget for good, and two such refuse every upload. 0: never.
  uint32_t upload_idle_seconds = 60;
  // GPU backend: "auto" (use CUDA devices when present), "off", or "emulate" (a CPU emulation
  // of one device, for tests and demos on machines without a GPU).
  std::string gpu = "auto";
  uint64_t gpu_memory_limit_bytes = 0;  // per device; 0: 90 % of its memory
  // How long a frame waits for others to share its launch. 0: launch at once; frames that arrive
  // while a batch is on the device still share the next one. Measured on an H100 (20k-vertex
  // LBS, sinew-load): 200 µs cost one session 2.3x its frame rate and lost at 16 and 256 sessions.
  uint32_t gpu_batch_window_us = 0;
  // Character-independent precomputations (implicit skinning's composition operators) are kept
  // here across restarts; empty: in memory only. main() defaults it to the user's cache folder.
  std::string cache_dir;
  // The most bytes of per-rig preparations kept under cache_dir/prepared/; past it the least
  // recently used are removed (server/cache_folder.h). 0: no limit.
  uint64_t max_cache_bytes = uint64_t{2} << 30;
  // Same-host shared memory (RegisterSharedMemory): the most bytes of client regions mapped at
  // once; 0 turns it off. Off by default: a client that may register a region makes the server
  // write into a shared-memory object of its choosing (names are limited to "/sinew-...").
  uint64_t max_shared_memory_bytes = 0;
  // Rigs acknowledged by UploadRig are kept here and reloaded at start (server/state_dir.h);
  // empty: in memory only.
  std::string state_dir;
  // Authentication (server/auth.h): "TOKEN TENANT" lines; empty: no authentication, one tenant.
  std::string token_file;
  // TLS on the gRPC port: the server's certificate chain and key (PEM); with a client CA, clients
  // must present a certificate it signed (mutual TLS). Empty: plaintext.
  std::string tls_cert, tls_key, tls_client_ca;
};

}  // namespace sinew::server
