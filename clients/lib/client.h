// C++ client library for the Sinew service (sinew.v1): connection, chunked and deduplicated
// rig upload, sessions, unary and streamed frames, and conversions from core types.
#pragma once

#include <cstdint>
#include <functional>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "core/clip/clip.h"
#include "core/rig/pose.h"
#include "core/rig/rig.h"
#include "sinew/v1/position_codec.h"
#include "sinew/v1/sinew.grpc.pb.h"

namespace sinew::client {

// gRPC status -> absl::Status (same codes, same message).
absl::Status FromGrpc(const grpc::Status& status);

// Bytes sent so far, total bytes.
using UploadProgress = std::function<void(uint64_t sent, uint64_t total)>;

// A synchronous bidirectional frame stream. Write and Read may be used from two threads (one
// writer, one reader) or alternately from one. Close reads what is left itself: it must follow
// the reader's end (its Read returned false, or that thread reads no more). After Close, Write
// and Read return false and a second Close returns the same status.
//
// A stateful (history-dependent) session — elastic-implicit, supercages, pbs with jiggle,
// swing-twist with unwrap_twist, a pipeline with such a stage — applies frames strictly in
// increasing order of their numbers, so its history takes one writer at a time: while a stream
// carries its frames, send none of its frames through Client::Deform (from another thread, or
// through a RecoveringSession) or another stream. A number sent so could reach the server before
// the stream's earlier frames, which it then refuses FAILED_PRECONDITION. This library does not
// track which sessions a stream carries (the Python client's Session refuses such a frame itself);
// stateless sessions take unary frames beside a stream.
class Client;

class FrameStream {
 public:
  // `token`: sent as "authorization: Bearer TOKEN" when not empty.
  // `deadline`: the whole stream's (none when absent).
  FrameStream(v1::Sinew::Stub& stub, const Client& client,
              std::optional<std::chrono::system_clock::time_point> deadline = std::nullopt);
  ~FrameStream();
  bool Write(const v1::DeformRequest& request);
  bool Read(v1::DeformResponse* response);
  // Half-closes: no more frames (Read still returns the answers to those sent).
  void WritesDone();
  // Half-closes, drains responses not yet read (counted in *unread) and returns the final
  // status. Once the reader has stopped (see above); again: the same status, nothing unread.
  absl::Status Close(size_t* unread = nullptr);
  void Cancel() { context_.TryCancel(); }

 private:
  // The client's TLS settings, for the hints of Client::Explain (copied: a stream may outlive
  // its client).
  bool tls_ = false, client_certificate_ = false;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::DeformRequest, v1::DeformResponse>> stream_;  // null: status_ says why
  absl::Status status_;  // the authorization's, then (Close) the call's final status
  std::atomic<bool> closed_{false};  // Finish has run (read by Write and Read, on either thread)
  bool writes_done_ = false;
};

// How a client reaches a server that authenticates (sinew-server --token-file) or encrypts
// (--tls-cert, --tls-client-ca). The defaults: plaintext, no token (loopback development).
struct ClientOptions {
  std::string token;        // bearer token, sent with every call
  bool tls = false;         // TLS (implied by any of the files below)
  std::string tls_ca;       // PEM file of the CA that signed the server's certificate; empty: the system's roots
  std::string tls_cert;     // mutual TLS: this client's certificate chain (PEM) ...
  std::string tls_key;      // ... and its private key (PEM)
  // The name to check the server's certificate against; empty: the target's host. TLS only:
  // without it the client's status() is INVALID_ARGUMENT.
  std::string server_name;
  // Sent as "x-sinew-affinity" with every call, so that a balancer hashing it (deploy/haproxy.cfg)
  // keeps this client's calls on one server. Empty: none.
  std::string affinity;
  // Each unary call's deadline in seconds (every call but UploadRig, StreamDeform and DeformClip);
  // past it the call fails with DEADLINE_EXCEEDED, and the server stops a long frame at its next
  // iteration (the elastic implicit method's relaxation rounds). 0: none.
  double timeout_seconds = 0;
  // While a call is open, the connection is pinged after this many seconds without traffic, and
  // the call fails UNAVAILABLE when the ping goes unanswered as long again: a server host that
  // vanished without closing the connection (a preempted node, a partition) ends a DeformClip or
  // a call without a deadline instead of hanging it. The server accepts pings every 10 s or more.
  // 0: off.
  double keepalive_seconds = 30;
  // How long WaitReady() waits for the server to accept a connection (a server still starting),
  // in seconds; the command-line programs wait so before their first call. 0: one attempt.
  double connect_timeout_seconds = 10;
};

class Client {
 public:
  // Connects lazily to `target` (HOST:PORT) over plaintext, with unlimited receive size.
  explicit Client(const std::string& target);
  // The same with a token and/or TLS. A file that cannot be read leaves the client unusable:
  // status() says why, and every call fails with it.
  Client(const std::string& target, const ClientOptions& options);
  const absl::Status& status() const { return status_; }
  // Adds the bearer token and the affinity (if any) to a context for a call on stub(); returns
  // status() (the call must not be made when it is not OK: every method of the client fails with it).
  // Also waits, before this client's first call, for its channel's first connection (through
  // one failed attempt: see AwaitFirstConnection).
  [[nodiscard]] absl::Status Authorize(grpc::ClientContext& ctx) const;
  // Waits until the channel is ready, or fails UNAVAILABLE after `timeout` and one more attempt
  // of at most a second ("cannot connect to HOST:PORT within T s: " and gRPC's reason for the
  // last failed attempt). A timeout of 0 is that one attempt. Fails at the first failed attempt
  // where waiting cannot help: the server's certificate not trusted or not for the name asked,
  // a TLS client at a plaintext server ("cannot connect to HOST:PORT: " the reason and a hint).
  // A connection closed unanswered gets a hint too (plaintext at a TLS server, a client
  // certificate missing or not trusted), after the whole wait: a server that stopped closes so.
  absl::Status WaitReady(std::chrono::milliseconds timeout);
  // The same for ClientOptions::connect_timeout_seconds.
  absl::Status WaitReady();

  absl::StatusOr<v1::ServerInfo> GetServerInfo();

  // A call's status (FromGrpc), and for a call that could not connect for a reason of the
  // client's options (the server's certificate not trusted or not for the name asked, TLS at a
  // plaintext server, a connection closed unanswered as a TLS server closes plaintext ones) the
  // reason followed by a hint naming the ClientOptions field and flag to change. Every method
  // here returns its call's status so; for calls made on stub().
  absl::Status Explain(const grpc::Status& status) const;

  // Uploads `rig` unless the server already holds it (asked first by content hash: a second
  // upload of the same rig costs one small round trip). Chunks of `chunk_bytes`.
  absl::StatusOr<v1::UploadRigResponse> UploadRig(const v1::Rig& rig,
                                                  const UploadProgress& progress = {},
                                                  size_t chunk_bytes = size_t{1} << 20);
  // The same for a rig already serialized (e.g. read from a file); its id is the bytes' SHA-256,
  // so use v1::SerializeRigDeterministic for ids that match UploadRig's.
  absl::StatusOr<v1::UploadRigResponse> UploadSerializedRig(const std::string& bytes,
                                                            const UploadProgress& progress = {},
                                                            size_t chunk_bytes = size_t{1} << 20);
  absl::StatusOr<v1::RigInfo> GetRig(const std::string& rig_id);
  absl::StatusOr<v1::ListRigsResponse> ListRigs();
  absl::Status DeleteRig(const std::string& rig_id);
  // Stops a running preparation of the rig, or forgets a failed one (see the RPC).
  absl::StatusOr<v1::Preparation> CancelPreparation(const std::string& rig_id, const std::string& key);

  absl::StatusOr<v1::Session> CreateSession(const v1::CreateSessionRequest& request);
  // The same, reporting the rig's preparations (cage coordinates, ...) through `progress`
  // (0..1 and the preparation's key) every quarter second once creation takes over a second.
  absl::StatusOr<v1::Session> CreateSession(
      const v1::CreateSessionRequest& request,
      const std::function<void(double progress, const std::string& what)>& progress);
  absl::StatusOr<v1::Session> GetSession(const std::string& session_id);
  absl::StatusOr<v1::ListSessionsResponse> ListSessions();
  // Frames deformed. Bounded by 10 s whatever ClientOptions::timeout_seconds (it runs on exits).
  absl::StatusOr<uint64_t> CloseSession(const std::string& session_id);
  // New parameters for the session's method from its next frame on (see the RPC).
  absl::StatusOr<v1::Session> UpdateSession(const std::string& session_id, const v1::DeformerConfig& deformer);
  // A snapshot of the session's state, and its restore into a session on the same rig and deformer.
  absl::StatusOr<v1::SessionState> GetSessionState(const std::string& session_id);
  absl::StatusOr<v1::Session> SetSessionState(const std::string& session_id, const v1::SessionState& state);

  // One frame. A stateful session's frames have one writer at a time: none through here while
  // a stream carries them (see FrameStream).
  absl::StatusOr<v1::DeformResponse> Deform(const v1::DeformRequest& request);
  // Runs a batch: `on_frame` sees every frame in order; returning an error from it cancels
  // the batch and that error is returned.
  absl::Status DeformClip(const v1::DeformClipRequest& request,
                          const std::function<absl::Status(const v1::DeformClipResponse&)>& on_frame);
  // A StreamDeform call; past `deadline` (when given) it ends DEADLINE_EXCEEDED, whatever the
  // server does (a client's keepalive catches a dead connection, not a server that stopped answering).
  std::unique_ptr<FrameStream> OpenStream(std::optional<std::chrono::system_clock::time_point> deadline = std::nullopt);

  v1::Sinew::Stub& stub() { return *stub_; }
  const std::string& target() const { return target_; }

 private:
  void AwaitFirstConnection(std::chrono::system_clock::time_point call_deadline) const;
  // One GetServerInfo call of at most a second (and not past `deadline`), without a token: true
  // when the server answered (an UNAUTHENTICATED answer too), else `why` holds the failure. While
  // the channel is in TRANSIENT_FAILURE it fails at once with gRPC's reason for the last failed
  // attempt (a channel's state has none); where the channel has not tried yet it is one attempt.
  bool Probe(std::chrono::system_clock::time_point deadline, grpc::Status& why) const;
  // Authorize, and the deadline of ClientOptions::timeout_seconds.
  [[nodiscard]] absl::Status Unary(grpc::ClientContext& ctx) const;

  std::string affinity_;
  std::string token_;
  double timeout_seconds_ = 0;
  double connect_timeout_seconds_ = 10;
  absl::Status status_;
  std::string target_;
  friend class FrameStream;  // copies the two below
  bool tls_ = false;                 // the channel's credentials are TLS ones
  bool client_certificate_ = false;  // and present a certificate of the client's
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Sinew::Stub> stub_;
  // AwaitFirstConnection has run (once per client).
  mutable std::atomic<bool> first_connection_done_{false};
  mutable std::mutex first_connection_mu_;
};

// Core -> wire. Weights are sent in compressed rows.
v1::Rig RigToProto(const RigInput& rig);
void PoseToProto(const Pose& pose, v1::Pose& out);
void ClipToProto(const Clip& clip, v1::Clip& out);
// The stream requests that play `clip` at `clip_fps`, its first `frames`: request f holds the
// pose sampled at f / clip_fps, `cage_clip`'s offsets of cage 0 at that time when given, and
// time_step 1 / clip_fps (within the server's [1e-6, 60] s), so that a method with dynamics (pbs's
// jiggle) steps by the clip's time, as a DeformClip batch of the clip does (until 2026-12-07
// `sinew play` sent none, and pbs stepped by its own 10 ms whatever the clip's rate).
std::vector<v1::DeformRequest> ClipRequests(const Clip& clip, const CageClip* cage_clip, const Skeleton& skeleton,
                                            double clip_fps, size_t frames);
// Positions of a response as float32 x,y,z, from any encoding but a DELTA frame other than a key
// frame (that one needs its stream's earlier frames: PositionDecoder). A streamed frame's error
// is returned as its status; a skipped frame (latest_pose_wins) is FAILED_PRECONDITION.
absl::Status DecodePositions(const v1::DeformResponse& response, std::vector<float>& out);
absl::Status DecodePositions(const v1::DeformClipResponse& response, std::vector<float>& out);

class Client;

// Same-host frames through shared memory (RegisterSharedMemory; the server must run with
// --shared-memory-bytes): creates a POSIX shared-memory object of `bytes`, has the server map it,
// and unregisters and unlinks it when destroyed. Frames name it in FrameOutputs.shared_memory
// (region_id(), an offset) and their positions arrive here instead of in the response.
class SharedMemory {
 public:
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Create(Client& client, uint64_t bytes);
  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  const std::string& region_id() const { return region_id_; }
  const char* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  // The bytes a response placed here (DeformResponse.shared_positions), checked against the region.
  absl::StatusOr<std::string_view> Positions(const v1::DeformResponse& response) const;

 private:
  SharedMemory(Client& client, std::string name, char* data, uint64_t bytes)
      : client_(client), name_(std::move(name)), data_(data), bytes_(bytes) {}
  Client& client_;
  std::string name_, region_id_;
  char* data_;
  uint64_t bytes_;
};

// Positions of one stream's responses (a StreamDeform stream of one session, or a DeformClip
// batch), every encoding: keeps what OUTPUT_ENCODING_DELTA's frames are decoded against. Give it
// every frame of the stream in order; after an error (a frame missed, bytes damaged) ask the
// server for a key frame (DeformRequest.key_frame) and go on. Frames that carry an error leave it
// as it was.
class PositionDecoder {
 public:
  absl::Status Decode(const v1::DeformResponse& response, std::vector<float>& out);
  // The same for frames whose positions may be in `shm` (DeformResponse.shared_positions).
  absl::Status Decode(const v1::DeformResponse& response, const SharedMemory& shm, std::vector<float>& out);
  absl::Status Decode(const v1::DeformClipResponse& response, std::vector<float>& out);
  void Reset() { delta_.Reset(); }

 private:
  wire::DeltaDecoder delta_;
};

}  // namespace sinew::client

#include "core/procedural/limb.h"

namespace sinew::client {
// The procedural limb with about `vertices` vertices (100 per cross-section ring).
LimbOptions LimbWithVertices(size_t vertices, uint32_t bones, uint32_t influences);
}  // namespace sinew::client
