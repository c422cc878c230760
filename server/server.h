// A complete Sinew server: gRPC (with health checking and reflection), Prometheus exposer,
// worker pool and housekeeping. Used by sinew-server's main and, in-process, by benchmarks.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include "absl/status/status.h"
#include "core/parallel/thread_pool.h"
#include "server/metrics.h"
#include "server/options.h"
#include "gpu/backend.h"
#include "server/service.h"

namespace sinew::server {

class SinewServer {
 public:
  explicit SinewServer(ServerOptions options);
  ~SinewServer();  // Shutdown() if still running

  // Binds the ports and starts serving.
  absl::Status Start();
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }  // 0 when metrics are off
  // "gpu: <devices>" or "gpu: off (<reason>)".
  const std::string& gpu_status() const { return gpu_status_; }
  // Reads --token-file again (SIGHUP); on error the old tokens stay.
  absl::Status ReloadTokens();
  size_t token_count();
  const ServerOptions& options() const { return options_; }

  // Graceful stop: health goes NOT_SERVING, streams finish after answering the frames they
  // have received (up to drain_timeout_seconds), in-flight unary calls complete, then gRPC and
  // the workers stop. Background preparations are cancelled and waited for until the drain
  // deadline (at least a second); any still running then are logged and left to the
  // destructor, so that Shutdown's time is bounded (sinew-server exits after it).
  void Shutdown();

 private:
  // Plaintext, TLS or mutual TLS, from the options (INVALID_ARGUMENT names the flag).
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials() const;
  void HousekeepingLoop();

  ServerOptions options_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<gpu::GpuBackend> gpu_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int grpc_port_ = 0;
  std::string gpu_status_;
  int metrics_port_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread housekeeping_;
};

}  // namespace sinew::server
