// Prometheus metrics of the service, served over HTTP (/metrics) on their own port.
//
//   sinew_frames_total{method,backend}            frames deformed (one that then cannot be sent,
//                                                 quantised or placed, counts in errors too)
//   sinew_frame_latency_seconds{method,backend}   time from request decoded to frame ready
//   sinew_frame_errors_total{code}                frames that failed, by gRPC status code
//   sinew_rpc_errors_total{rpc,code}              failed RPCs, by method and status code
//   sinew_sessions / sinew_rigs                   open sessions / resident rigs
//   sinew_resident_bytes{kind="rig"|"session"|"shared_memory"}  memory held for rigs, session
//                                                 state and clients' registered regions
//   sinew_upload_bytes_total                      rig bytes received
//   sinew_streams                                 open StreamDeform calls
//   sinew_batches                                 open DeformClip calls
//   sinew_frames_waiting / sinew_frames_skipped_total  StreamDeform read-ahead, latest_pose_wins
//   sinew_frames_shed_total                       frames answered "overloaded" (--max-queue-ms)
//   sinew_frames_inline_total                     frames run on the gRPC thread that read them
//   sinew_gpu_memory_bytes{device,kind=used|limit|total}, sinew_gpu_utilisation{device},
//   sinew_gpu_resident{device,kind=rigs|sessions}  GPU devices
#pragma once

#include <array>
#include <vector>

#include <memory>
#include <string>

#include <grpcpp/support/status.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/status/statusor.h"
#include "core/deformer/deformer.h"
#include "gpu/backend.h"
#include "sinew/v1/sinew.pb.h"

namespace sinew::server {

class Metrics {
 public:
  Metrics();
  ~Metrics();

  // Starts the HTTP exposer on HOST:PORT (port 0 picks one); returns the bound port.
  absl::StatusOr<int> Serve(const std::string& host_port);

  // `method` null: a pipeline (label method="pipeline").
  void Frame(const MethodInfo* method, v1::Backend backend, double seconds);
  void FrameError(grpc::StatusCode code);
  // GPU device gauges: memory (used, limit, total), utilisation, rigs, sessions.
  void Device(const gpu::DeviceInfo& device);
  void RpcError(const char* rpc, grpc::StatusCode code);
  // --state-dir: each history kept at the last stop, once: set again at this start (`restored`),
  // or not (`dropped`: refused, unreadable, overtaken by a frame, no backend of its kind, its
  // method not serving within --session-idle-ttl, its session closed meanwhile or its record set
  // aside; the server's stderr says why). One left on disk for a later start is counted then.
  void KeptState(bool restored);

  prometheus::Gauge& sessions() { return *sessions_; }
  prometheus::Gauge& rigs() { return *rigs_; }
  prometheus::Gauge& rig_bytes() { return *rig_bytes_; }
  prometheus::Gauge& session_bytes() { return *session_bytes_; }
  prometheus::Gauge& shared_memory_bytes() { return *shared_memory_bytes_; }
  prometheus::Gauge& streams() { return *streams_; }
  prometheus::Gauge& batches() { return *batches_; }
  prometheus::Counter& upload_bytes() { return *upload_bytes_; }
  // StreamDeform: frames read ahead and waiting for the one before them; frames skipped
  // (latest_pose_wins).
  prometheus::Gauge& frames_waiting() { return *frames_waiting_; }
  prometheus::Counter& frames_skipped() { return *frames_skipped_; }
  // Admission control: frames answered "overloaded" after waiting longer than --max-queue-ms
  // (for a worker, or for a worker and the GPU).
  prometheus::Counter& frames_shed() { return *frames_shed_; }
  // Deform and StreamDeform frames run on the gRPC thread that read them (--inline-frame-us).
  prometheus::Counter& frames_inline() { return *frames_inline_; }

 private:
  static constexpr int kBackends = 3;  // indexed by v1::Backend value

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  // Indexed by the method's position in Methods() (pipelines last), then by v1::Backend.
  std::vector<std::array<prometheus::Counter*, kBackends>> frames_;
  std::vector<std::array<prometheus::Histogram*, kBackends>> latency_;
  prometheus::Family<prometheus::Counter>* frame_errors_;
  prometheus::Family<prometheus::Counter>* rpc_errors_;
  prometheus::Counter* kept_states_restored_;
  prometheus::Counter* kept_states_dropped_;
  prometheus::Gauge* sessions_;
  prometheus::Gauge* rigs_;
  prometheus::Gauge* rig_bytes_;
  prometheus::Gauge* session_bytes_;
  prometheus::Gauge* shared_memory_bytes_;
  prometheus::Gauge* streams_;
  prometheus::Gauge* batches_;
  prometheus::Counter* upload_bytes_;
  prometheus::Gauge* frames_waiting_;
  prometheus::Counter* frames_skipped_;
  prometheus::Counter* frames_shed_;
  prometheus::Counter* frames_inline_;
  prometheus::Family<prometheus::Gauge>* gpu_memory_;
  prometheus::Family<prometheus::Gauge>* gpu_utilisation_;
  prometheus::Family<prometheus::Gauge>* gpu_residents_;
  prometheus::Family<prometheus::Gauge>* gpu_frames_;
};

// "INVALID_ARGUMENT" etc.
const char* StatusCodeName(grpc::StatusCode code);

}  // namespace sinew::server
