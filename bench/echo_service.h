// The raw gRPC echo stream the service benchmarks measure against (bench/echo.proto): a server
// that answers each request with its frame number and a fixed payload, and a client that times
// one or more frames in flight. Its frame rate is the transport floor for a payload of that size.
#pragma once

#include <chrono>
#include <deque>
#include <mutex>
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
  // Reads ahead while it writes (one read and one write outstanding, as gRPC allows), so a client
  // with several frames in flight is answered back to back: at most kMaxQueued frames wait.
  class Reactor final : public grpc::ServerBidiReactor<EchoMessage, EchoMessage> {
   public:
    // The response is built once per stream; each frame only changes its frame number.
    explicit Reactor(const std::string& payload) {
      response_.set_payload(payload);
      reading_ = true;
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      std::unique_lock lock(mu_);
      reading_ = false;
      if (!ok) {
        half_closed_ = true;
      } else {
        queued_.push_back(request_.frame());
      }
      Step(lock);
    }
    void OnWriteDone(bool ok) override {
      std::unique_lock lock(mu_);
      writing_ = false;
      if (!ok) failed_ = true;
      Step(lock);
    }
    void OnDone() override { delete this; }

   private:
    static constexpr size_t kMaxQueued = 8;

    // Starts what can start (mu_ held; released before the gRPC calls).
    void Step(std::unique_lock<std::mutex>& lock) {
      bool read = false, write = false, finish = false;
      if (!failed_ && !writing_ && !queued_.empty()) {
        response_.set_frame(queued_.front());
        queued_.pop_front();
        writing_ = write = true;
      }
      if (!failed_ && !reading_ && !half_closed_ && queued_.size() < kMaxQueued) reading_ = read = true;
      if (!finished_ && !writing_ && !reading_ && (failed_ || (half_closed_ && queued_.empty()))) {
        finished_ = finish = true;
      }
      lock.unlock();
      if (write) StartWrite(&response_);
      if (read) StartRead(&request_);
      if (finish) {
        Finish(failed_ ? grpc::Status(grpc::CANCELLED, "echo: the client stopped reading") : grpc::Status::OK);
      }
    }

    std::mutex mu_;
    EchoMessage request_;
    EchoMessage response_;
    std::deque<uint64_t> queued_;  // frames read, not yet answered
    bool reading_ = false, writing_ = false, half_closed_ = false, failed_ = false, finished_ = false;
  };

  const std::string payload_;
};

// Times warmup + frames frames with `depth` of them in flight: write(f) sends frame f, read(f)
// receives and checks frame f's answer; frame f is written before frame f - depth + 1 is read.
// Returns the frame rate of the last `frames`: the clock starts at the top of the iteration
// that reads the first of them, before that iteration's writes, and stops after the last read.
// (Until 2026-12-07 it started after those writes, so one frame in flight had its first timed
// frame on the wire before the clock ran, and a round of a few frames read far above the true
// rate: `sinew-bench-service --frames 5` printed 124 000 StreamDeform frames/s for a 20k-vertex
// LBS.) With depth > 1 the depth - 1 frames written ahead during the warm-up are still timed
// only by their reads, an error of about (depth - 1) / frames: callers time tens of frames or
// more (sinew-bench-service refuses fewer than 50 a round).
template <class Write, class Read>
absl::StatusOr<double> PipelinedFramesPerSecond(int warmup, int frames, int depth, Write&& write, Read&& read) {
  const int total = warmup + frames;
  std::chrono::steady_clock::time_point start;
  int written = 0;
  for (int f = 0; f < total; ++f) {
    if (f == warmup) start = std::chrono::steady_clock::now();
    while (written < total && written < f + depth) {
      if (absl::Status st = write(uint64_t(written)); !st.ok()) return st;
      ++written;
    }
    if (absl::Status st = read(uint64_t(f)); !st.ok()) return st;
  }
  return frames / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Calls round_trip(f) for warmup + frames frames, one in flight.
template <class RoundTrip>
absl::StatusOr<double> FramesPerSecond(int warmup, int frames, RoundTrip&& round_trip) {
  return PipelinedFramesPerSecond(
      warmup, frames, 1, [](uint64_t) { return absl::OkStatus(); }, round_trip);
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
// response_bytes (the server's configured payload), `depth` frames in flight.
inline absl::StatusOr<double> EchoFramesPerSecond(const std::string& target, size_t request_bytes,
                                                  size_t response_bytes, int warmup, int frames, int depth = 1) {
  auto stub = Echo::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->Stream(&context);
  EchoMessage request, response;
  request.set_payload(std::string(request_bytes, '\0'));
  auto fps = PipelinedFramesPerSecond(
      warmup, frames, depth,
      [&](uint64_t f) -> absl::Status {
        request.set_frame(f);
        if (!stream->Write(request)) return absl::UnavailableError("echo: stream broken");
        return absl::OkStatus();
      },
      [&](uint64_t f) -> absl::Status {
        if (!stream->Read(&response)) return absl::UnavailableError("echo: stream broken");
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
