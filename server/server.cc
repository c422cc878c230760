#include "server/server.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include <algorithm>
#include <chrono>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/implicit/operators.h"

namespace sinew::server {

SinewServer::SinewServer(ServerOptions options) : options_(std::move(options)) {
  if (options_.worker_threads == 0) {
    options_.worker_threads = std::max(1u, std::thread::hardware_concurrency());
  }
}

SinewServer::~SinewServer() { Shutdown(); }

absl::Status SinewServer::Start() {
  SetOperatorCacheDirectory(options_.cache_dir);
  // Temporary files of writers killed mid-write (operator grids, prepared weights, state): never
  // read, only taking room. Age decides, because other replicas may share these folders; only
  // the temporaries of the kinds of file written there are looked at.
  // --state-dir's are swept by StateDir::Open, once it holds the folder's lock.
  if (!options_.cache_dir.empty()) {
    SweepStaleTemporaries(options_.cache_dir, {".sinewop"});
    SweepStaleTemporaries(options_.cache_dir + "/prepared", {".bin"});
  }
  metrics_ = std::make_unique<Metrics>();
  if (!options_.metrics_listen.empty()) {
    auto port = metrics_->Serve(options_.metrics_listen);
    if (!port.ok()) return port.status();
    metrics_port_ = *port;
  }
  pool_ = std::make_unique<ThreadPool>(options_.worker_threads);
  std::string gpu_reason;
  if (options_.gpu == "auto" || options_.gpu == "emulate") {
    gpu::GpuOptions g;
    g.memory_limit_bytes = options_.gpu_memory_limit_bytes;
    g.batch_window = std::chrono::microseconds(options_.gpu_batch_window_us);
    if (options_.gpu == "emulate") g.emulate_devices = 1;
    auto backend = gpu::GpuBackend::Create(g);
    if (backend.ok()) {
      gpu_ = std::move(*backend);
    } else {
      gpu_reason = std::string(backend.status().message());
    }
  } else if (options_.gpu == "off") {
    gpu_reason = "GPU backend turned off (--gpu off)";
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--gpu: '", options_.gpu, "' is not auto, off or emulate"));
  }
  if (gpu_) {
    gpu_status_ = "gpu:";
    for (const auto& d : gpu_->Devices()) {
      absl::StrAppend(&gpu_status_, " [", d.index, "] ", d.name, " (", d.limit_bytes >> 20, " MiB usable)");
    }
  } else {
    gpu_status_ = absl::StrCat("gpu: off (", gpu_reason, ")");
  }
  service_ = std::make_unique<Service>(options_, *metrics_, *pool_, gpu_.get());
  if (!gpu_) service_->set_gpu_unavailable_reason(gpu_reason);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT (gRPC's default on Linux): a second server started on a busy port must fail,
  // not quietly receive a share of the first one's connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Clients ping a connection with a call open every 30 s or more (ClientOptions::keepalive_seconds,
  // the Python client alike) to find a server that vanished; gRPC's default answers pings more
  // often than every 5 minutes without data with GOAWAY, which would end a long silent call (a
  // stateful batch's replay).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  if (options_.keepalive_seconds > 0) {
    const int ms = static_cast<int>(std::min<uint64_t>(uint64_t{options_.keepalive_seconds} * 1000, INT32_MAX));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ms);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms);
    // Idle connections too, and pings without data frames between them: a client whose process
    // is stopped with a call open sends nothing at all.
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  if (auto st = service_->tokens().Load(options_.token_file); !st.ok()) return st;
  if (!options_.state_dir.empty()) {
    auto restored = service_->RestoreRigs(options_.state_dir);
    if (!restored.ok()) return restored.status();
    const size_t sessions = service_->RestoreSessions();
    std::fprintf(stderr, "sinew-server: --state-dir %s: %zu rigs loaded, %zu sessions opened again\n",
                 options_.state_dir.c_str(), *restored, sessions);
  }
  auto credentials = Credentials();
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(options_.listen, *credentials, &grpc_port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<uint64_t>(options_.max_message_bytes, std::numeric_limits<int>::max())));
  builder.SetMaxSendMessageSize(-1);
  server_ = builder.BuildAndStart();
  if (!server_ || grpc_port_ == 0) {
    server_.reset();
    const bool tls = !options_.tls_cert.empty();
    return absl::UnavailableError(absl::StrCat("grpc: cannot listen on ", options_.listen,
                                               " (in use by another process, or not an address of this host",
                                               tls ? ", or --tls-key is not the key of --tls-cert's certificate" : "",
                                               ")"));
  }
  server_->GetHealthCheckService()->SetServingStatus(true);
  housekeeping_ = std::thread([this] { HousekeepingLoop(); });
  return absl::OkStatus();
}

namespace {
// A PEM file holding a block whose label ends with `label` (CERTIFICATE; PRIVATE KEY, which
// covers RSA and EC keys): a certificate given as the key, or the reverse, is named here instead
// of failing gRPC's listen with no word of why.
absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag, absl::string_view label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  if (s.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not PEM"));
  }
  if (s.find(absl::StrCat(label, "-----")) == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " holds no \"", label, "\" block"));
  }
  return s;
}
}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> SinewServer::Credentials() const {
  if (options_.tls_cert.empty() && options_.tls_key.empty() && options_.tls_client_ca.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (options_.tls_cert.empty() || options_.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key: give both (and --tls-client-ca for mutual TLS)");
  }
  auto cert = ReadPem(options_.tls_cert, "--tls-cert", "CERTIFICATE");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(options_.tls_key, "--tls-key", "PRIVATE KEY");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!options_.tls_client_ca.empty()) {
    auto ca = ReadPem(options_.tls_client_ca, "--tls-client-ca", "CERTIFICATE");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::Status SinewServer::ReloadTokens() {
  std::lock_guard lock(mu_);
  if (!service_) return absl::FailedPreconditionError("not started");
  return service_->tokens().Reload();
}

size_t SinewServer::token_count() {
  std::lock_guard lock(mu_);
  return service_ ? service_->tokens().size() : 0;
}

void SinewServer::HousekeepingLoop() {
  // Expiry resolution: a quarter of the TTL, at most one second.
  const auto period = std::chrono::milliseconds(
      std::clamp<int64_t>(int64_t{options_.session_idle_ttl_seconds} * 250, 50, 1000));
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, period);
    if (stopping_) break;
    lock.unlock();
    service_->Housekeeping();
    lock.lock();
  }
}

void SinewServer::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || !server_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (housekeeping_.joinable()) housekeeping_.join();
  server_->GetHealthCheckService()->SetServingStatus(false);
  service_->BeginDrain();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(options_.drain_timeout_seconds * 1000));
  // Streams finish after their in-flight frame; unary calls and uploads run to completion.
  while (service_->active_calls() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Nothing of ours is in flight now (or the drain timed out). gRPC's Shutdown waits for its
  // deadline whenever a client connection is open, even an idle one, so keep it short; calls
  // still running at the deadline are cancelled.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(250));
  server_->Wait();
  service_->StopCreates();  // creates past the drain end first (their preparations are cancelled)
  pool_.reset();     // joins the workers after their queued tasks
  // No frame runs now: each stateful session's history, for the next start (--state-dir).
  if (!options_.state_dir.empty()) {
    std::fprintf(stderr, "sinew-server: --state-dir %s: kept the state of %zu stateful sessions\n",
                 options_.state_dir.c_str(), service_->KeepStates());
  }
  server_.reset();   // gRPC's server before the service registered with it
  // Background preparations, cancelled, stop at their next check; they get what is left of the
  // drain timeout (at least a second). One inside a long step (a sparse factorisation) past that
  // is left to the destructor: sinew-server exits without it, losing only its work.
  const auto background_deadline = std::max(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  if (const auto left = service_->StopBackground(background_deadline); !left.empty()) {
    std::fprintf(stderr, "sinew-server: not waiting for %zu preparation%s still running past the drain timeout (%s)\n",
                 left.size(), left.size() == 1 ? "" : "s", absl::StrJoin(left, "; ").c_str());
    return;
  }
  service_.reset();  // sessions and rigs, with their device memory, while the devices exist
  gpu_.reset();      // stops the device dispatchers
}

}  // namespace sinew::server
