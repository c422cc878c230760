// The raw gRPC echo stream the service benchmarks measure against (bench/echo.proto): a server
// that answers each request with its frame number and a fixed payload, and a client that times
// one frame in flight. Its frame rate is the transport floor for a payload of that size.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "bench/echo.grpc.pb.h"

namespace sinew::bench {

// Answers every request with its frame number and a fixed payload of `response_bytes`.
class EchoService final : public Echo::CallbackService {
 public:
  explicit EchoService(size_t response_bytes) : payload_(response_bytes, '\0') {}

  grpc::ServerBidiReactor<EchoMessage, EchoMessage>* Stream(
      grpc::CallbackServerContext*) override {
    return new Reactor(payload_);
  }

 private:
  class Reactor final : public grpc::ServerBidiReactor<EchoMessage, EchoMessage> {
   public:
    // The response is built once per stream; each frame only changes its frame number.
    explicit Reactor(const std::string& payload) {
      response_.set_payload(payload);
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      response_.set_frame(request_.frame());
      StartWrite(&response_);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::CANCELLED, "echo: the client stopped reading"));
        return;
      }
      StartRead(&request_);
    }
    void OnDone() override { delete this; }

   private:
    EchoMessage request_;
    EchoMessage response_;
  };

  const std::string payload_;
};

// Calls round_trip(f) for warmup + frames frames and returns the frame rate of the last `frames`.
template <class RoundTrip>
absl::StatusOr<double> FramesPerSecond(int warmup, int frames, RoundTrip&& round_trip) {
  std::chrono::steady_clock::time_point start;
  for (int f = 0; f < warmup + frames; ++f) {
    if (f == warmup) start = std::chrono::steady_clock::now();
    if (absl::Status st = round_trip(uint64_t(f)); !st.ok()) return st;
  }
  return frames / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Starts `service` on a loopback port chosen by the system (*port; null server on failure).
inline std::unique_ptr<grpc::Server> StartEcho(EchoService& service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  return server && *port != 0 ? std::move(server) : nullptr;
}

// Frames per second of an echo stream at `target`: requests of request_bytes, answers of
// response_bytes (the server's configured payload), one in flight.
inline absl::StatusOr<double> EchoFramesPerSecond(const std::string& target, size_t request_bytes,
                                                  size_t response_bytes, int warmup, int frames) {
  auto stub = Echo::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->Stream(&context);
  EchoMessage request, response;
  request.set_payload(std::string(request_bytes, '\0'));
  auto fps = FramesPerSecond(warmup, frames, [&](uint64_t f) -> absl::Status {
    request.set_frame(f);
    if (!stream->Write(request) || !stream->Read(&response)) return absl::UnavailableError("echo: stream broken");
    if (response.frame() != f || response.payload().size() != response_bytes) {
      return absl::InternalError("echo: wrong response");
    }
    return absl::OkStatus();
  });
  stream->WritesDone();
  const grpc::Status end = stream->Finish();
  if (!fps.ok()) return fps.status();
  if (!end.ok()) return absl::UnavailableError("echo: " + end.error_message());
  return fps;
}

}  // namespace sinew::bench
