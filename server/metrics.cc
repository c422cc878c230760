#include "server/metrics.h"

#include <cstdio>
#include <exception>

#include "absl/strings/str_cat.h"
#include "core/swingtwist/blas.h"

namespace sinew::server {

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK: return "OK";
    case grpc::CANCELLED: return "CANCELLED";
    case grpc::UNKNOWN: return "UNKNOWN";
    case grpc::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND: return "NOT_FOUND";
    case grpc::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::ABORTED: return "ABORTED";
    case grpc::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::INTERNAL: return "INTERNAL";
    case grpc::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::DATA_LOSS: return "DATA_LOSS";
    case grpc::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& frames = prometheus::BuildCounter()
                     .Name("sinew_frames_total")
                     .Help("Frames deformed, by method and backend")
                     .Register(*registry_);
  auto& latency = prometheus::BuildHistogram()
                      .Name("sinew_frame_latency_seconds")
                      .Help("Time to deform one frame on the server, by method and backend")
                      .Register(*registry_);
  // To 60 s: elastic implicit and pbs frames can take seconds (until 2026-12-07 the last bound was
  // 1 s, and every such frame's quantile read 1 s).
  const prometheus::Histogram::BucketBoundaries buckets = {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
                                                           25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0,
                                                           10.0, 30.0, 60.0};
  frames_.resize(Methods().size() + 1);
  latency_.resize(Methods().size() + 1);
  for (size_t mi = 0; mi <= Methods().size(); ++mi) {
    const std::string method(mi < Methods().size() ? Methods()[mi].name : "pipeline");
    for (auto [b, name] : {std::pair{v1::BACKEND_CPU, "cpu"}, std::pair{v1::BACKEND_GPU, "gpu"}}) {
      const std::map<std::string, std::string> labels = {{"method", method}, {"backend", name}};
      frames_[mi][b] = &frames.Add(labels);
      latency_[mi][b] = &latency.Add(labels, buckets);
    }
  }
  frame_errors_ = &prometheus::BuildCounter()
                       .Name("sinew_frame_errors_total")
                       .Help("Frames that failed, by gRPC status code")
                       .Register(*registry_);
  rpc_errors_ = &prometheus::BuildCounter()
                     .Name("sinew_rpc_errors_total")
                     .Help("RPCs that ended with an error, by RPC and gRPC status code")
                     .Register(*registry_);
  sessions_ = &prometheus::BuildGauge().Name("sinew_sessions").Help("Open sessions")
                   .Register(*registry_).Add({});
  rigs_ = &prometheus::BuildGauge().Name("sinew_rigs").Help("Resident rigs").Register(*registry_).Add({});
  auto& resident = prometheus::BuildGauge()
                       .Name("sinew_resident_bytes")
                       .Help("Bytes held in memory for rigs and per-session state")
                       .Register(*registry_);
  rig_bytes_ = &resident.Add({{"kind", "rig"}});
  session_bytes_ = &resident.Add({{"kind", "session"}});
  shared_memory_bytes_ = &resident.Add({{"kind", "shared_memory"}});
  streams_ = &prometheus::BuildGauge().Name("sinew_streams").Help("Open StreamDeform calls")
                  .Register(*registry_).Add({});
  batches_ = &prometheus::BuildGauge().Name("sinew_batches").Help("Open DeformClip calls (batches)")
                  .Register(*registry_).Add({});
  upload_bytes_ = &prometheus::BuildCounter().Name("sinew_upload_bytes_total")
                       .Help("Rig bytes received by UploadRig").Register(*registry_).Add({});
  frames_waiting_ = &prometheus::BuildGauge().Name("sinew_frames_waiting")
                         .Help("StreamDeform frames read ahead, waiting for the frame before them")
                         .Register(*registry_).Add({});
  frames_skipped_ = &prometheus::BuildCounter().Name("sinew_frames_skipped_total")
                         .Help("StreamDeform frames replaced by a newer pose before they started (latest_pose_wins)")
                         .Register(*registry_).Add({});
  frames_shed_ = &prometheus::BuildCounter().Name("sinew_frames_shed_total")
                      .Help("Frames answered UNAVAILABLE (overloaded) after waiting longer than --max-queue-ms for a worker or the GPU")
                      .Register(*registry_).Add({});
  frames_inline_ = &prometheus::BuildCounter().Name("sinew_frames_inline_total")
                        .Help("Deform and StreamDeform frames run on the gRPC thread that read them, not handed to a worker (--inline-frame-us)")
                        .Register(*registry_).Add({});
  auto& kept = prometheus::BuildCounter().Name("sinew_kept_states_total")
                   .Help("--state-dir: stateful sessions' histories kept at the last stop, set again at this start "
                         "(restored) or not (dropped: the session went on from rest; stderr says why)")
                   .Register(*registry_);
  kept_states_restored_ = &kept.Add({{"outcome", "restored"}});
  kept_states_dropped_ = &kept.Add({{"outcome", "dropped"}});
  gpu_memory_ = &prometheus::BuildGauge().Name("sinew_gpu_memory_bytes")
                     .Help("GPU memory: used by Sinew, its limit, the device's total").Register(*registry_);
  gpu_utilisation_ = &prometheus::BuildGauge().Name("sinew_gpu_utilisation")
                          .Help("Fraction of the last second the device had a batch in flight").Register(*registry_);
  gpu_residents_ = &prometheus::BuildGauge().Name("sinew_gpu_resident")
                        .Help("Rigs and sessions resident on each GPU").Register(*registry_);
  gpu_frames_ = &prometheus::BuildGauge().Name("sinew_gpu_frames")
                     .Help("Frames on each GPU not yet answered: queued for a batch, or running in one (sampled every second)")
                     .Register(*registry_);
}

Metrics::~Metrics() = default;

void Metrics::Device(const gpu::DeviceInfo& d) {
  const std::string dev = std::to_string(d.index);
  gpu_memory_->Add({{"device", dev}, {"kind", "used"}}).Set(double(d.used_bytes));
  gpu_memory_->Add({{"device", dev}, {"kind", "limit"}}).Set(double(d.limit_bytes));
  gpu_memory_->Add({{"device", dev}, {"kind", "total"}}).Set(double(d.total_bytes));
  gpu_utilisation_->Add({{"device", dev}}).Set(d.utilisation);
  gpu_residents_->Add({{"device", dev}, {"kind", "rigs"}}).Set(d.rigs);
  gpu_residents_->Add({{"device", dev}, {"kind", "sessions"}}).Set(d.sessions);
  gpu_frames_->Add({{"device", dev}, {"kind", "queued"}}).Set(d.queued_frames);
  gpu_frames_->Add({{"device", dev}, {"kind", "running"}}).Set(d.running_frames);
}

absl::StatusOr<int> Metrics::Serve(const std::string& host_port) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(host_port);
  } catch (const std::exception& e) {
    // CivetWeb starts its threads with small stacks; OpenBLAS's pthreads build puts 60 KB of
    // thread-local storage in every thread, so they cannot start (pthread_create: EINVAL).
    const bool openblas_threads = SystemBlas().openblas_parallel > 0;
    return absl::UnavailableError(absl::StrCat(
        "metrics: cannot listen on ", host_port, ": ", e.what(),
        openblas_threads ? " (the BLAS loaded is OpenBLAS's multithreaded build, whose thread-local storage leaves the "
                           "metrics server's threads no room to start: make libblas.so.3 Debian's libopenblas0-serial or "
                           "the reference BLAS, e.g. `update-alternatives --config libblas.so.3-x86_64-linux-gnu`, or run "
                           "with --metrics-listen '')"
                         : ""));
  }
  exposer_->RegisterCollectable(registry_);
  const auto ports = exposer_->GetListeningPorts();
  if (ports.empty()) return absl::UnavailableError("metrics: exposer bound no port");
  return ports.front();
}

void Metrics::Frame(const MethodInfo* method, v1::Backend backend, double seconds) {
  const size_t mi = method ? static_cast<size_t>(method - Methods().data()) : Methods().size();
  if (mi >= frames_.size() || backend < 0 || backend >= kBackends || !frames_[mi][backend]) return;
  frames_[mi][backend]->Increment();
  latency_[mi][backend]->Observe(seconds);
}

void Metrics::FrameError(grpc::StatusCode code) {
  frame_errors_->Add({{"code", StatusCodeName(code)}}).Increment();
}

void Metrics::KeptState(bool restored) { (restored ? kept_states_restored_ : kept_states_dropped_)->Increment(); }

void Metrics::RpcError(const char* rpc, grpc::StatusCode code) {
  rpc_errors_->Add({{"rpc", rpc}, {"code", StatusCodeName(code)}}).Increment();
}

}  // namespace sinew::server
