#include "clients/lib/client.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <algorithm>
#include <cstring>

#include <cstring>
#include <future>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/half.h"
#include "sinew/v1/rig_id.h"

namespace sinew::client {
namespace {

template <class T>
std::string Pack(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

namespace {
// What a failed connection attempt's reason (gRPC's, from OpenSSL) says that waiting will not
// change, as a hint naming the ClientOptions field and the programs' flag to change; empty where
// a later attempt may succeed (no server yet, one restarting). The TLS cases fail every attempt
// the same way until someone changes a certificate or a flag.
std::string WhyWaitingCannotHelp(absl::string_view reason, bool tls) {
  if (absl::StrContains(reason, "certificate verify failed")) {
    return "not retried: the server's certificate is not signed by a CA this client trusts: tls_ca, --tls-ca";
  }
  if (absl::StrContains(reason, "is not in peer certificate")) {
    return "not retried: the server's certificate is not for that name: server_name, --tls-server-name";
  }
  if (tls && absl::StrContains(reason, "wrong version number")) {
    return "not retried: the server does not speak TLS: connect without tls, --tls and the --tls-* files";
  }
  return "";
}

// A connection closed unanswered: what it can mean. A TLS server closes a plaintext client's so,
// and a server asking for client certificates one without a certificate it trusts; so does a
// server that stopped, so these are hints after the wait, not reasons to stop waiting. Only for
// a call that never connected ("failed to connect"): one the server closed mid-call is not this.
std::string ClosedUnansweredHint(absl::string_view reason, bool tls, bool client_certificate) {
  if (!absl::StrContains(reason, "failed to connect") || !absl::StrContains(reason, "Socket closed")) return "";
  if (!tls) return "a server that expects TLS closes plaintext connections so: tls, --tls";
  if (!client_certificate) {
    return "a server that asks for client certificates closes connections without one so: tls_cert and tls_key, "
           "--tls-cert and --tls-key";
  }
  return "a server that does not trust this client's certificate closes the connection so";
}

// A call's status, with the hint of one of the two above where it could not connect for a
// reason of the client's TLS settings (Client::Explain).
absl::Status Explained(const grpc::Status& status, bool tls, bool client_certificate) {
  absl::Status out = FromGrpc(status);
  if (out.code() != absl::StatusCode::kUnavailable) return out;
  std::string hint = WhyWaitingCannotHelp(status.error_message(), tls);
  if (hint.empty()) hint = ClosedUnansweredHint(status.error_message(), tls, client_certificate);
  if (hint.empty()) return out;
  return absl::UnavailableError(absl::StrCat(status.error_message(), " (", hint, ")"));
}
}  // namespace

FrameStream::FrameStream(v1::Sinew::Stub& stub, const Client& client,
                         std::optional<std::chrono::system_clock::time_point> deadline)
    : tls_(client.tls_), client_certificate_(client.client_certificate_) {
  if (deadline) context_.set_deadline(*deadline);  // first: the first connection's wait keeps to it
  status_ = client.Authorize(context_);
  if (status_.ok()) stream_ = stub.StreamDeform(&context_);
}

FrameStream::~FrameStream() {
  if (!closed_.load(std::memory_order_acquire) && stream_) {
    context_.TryCancel();
    stream_->Finish().IgnoreError();
  }
}

// After Close the call is finished: gRPC's stream must not be written or read again (until
// 2026-12-07 Write and Read used it all the same).
bool FrameStream::Write(const v1::DeformRequest& request) {
  return !closed_.load(std::memory_order_acquire) && stream_ && stream_->Write(request);
}
bool FrameStream::Read(v1::DeformResponse* response) {
  return !closed_.load(std::memory_order_acquire) && stream_ && stream_->Read(response);
}

void FrameStream::WritesDone() {
  if (!writes_done_ && !closed_.load(std::memory_order_acquire) && stream_) stream_->WritesDone();
  writes_done_ = true;
}

absl::Status FrameStream::Close(size_t* unread) {
  if (unread) *unread = 0;
  if (closed_.load(std::memory_order_acquire)) return status_;  // the final status, once more
  if (!stream_) {  // the client could not authorize a call (Client::status)
    closed_.store(true, std::memory_order_release);
    return status_;
  }
  WritesDone();
  v1::DeformResponse r;
  size_t n = 0;
  while (stream_->Read(&r)) ++n;
  if (unread) *unread = n;
  status_ = Explained(stream_->Finish(), tls_, client_certificate_);
  closed_.store(true, std::memory_order_release);
  return status_;
}

Client::Client(const std::string& target) : Client(target, ClientOptions{}) {}

namespace {
absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

Client::Client(const std::string& target, const ClientOptions& options)
    : affinity_(options.affinity),
      token_(options.token),
      timeout_seconds_(options.timeout_seconds),
      connect_timeout_seconds_(options.connect_timeout_seconds),
      target_(target),
      tls_(options.tls || !options.tls_ca.empty() || !options.tls_cert.empty() || !options.tls_key.empty()),
      client_certificate_(!options.tls_cert.empty()) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  if (options.keepalive_seconds > 0) {
    const int ms = static_cast<int>(std::min(options.keepalive_seconds * 1000, double(INT32_MAX)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // a silent call keeps being pinged
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls_) {
    grpc::SslCredentialsOptions ssl;
    const std::pair<const std::string*, std::string*> files[] = {
        {&options.tls_ca, &ssl.pem_root_certs}, {&options.tls_cert, &ssl.pem_cert_chain}, {&options.tls_key, &ssl.pem_private_key}};
    for (auto [path, out] : files) {
      if (path->empty()) continue;
      auto text = ReadFile(*path, "tls");
      if (!text.ok()) {
        status_ = text.status();
      } else {
        *out = std::move(*text);
      }
    }
    if (options.tls_cert.empty() != options.tls_key.empty()) {
      status_ = absl::InvalidArgumentError("tls: give the client certificate and its key together");
    }
    if (!options.server_name.empty()) args.SetSslTargetNameOverride(options.server_name);
    credentials = grpc::SslCredentials(ssl);
  } else if (!options.server_name.empty()) {
    // The name is checked against the server's certificate: a plaintext connection has none
    // (until 2026-12-07 it was ignored and the connection silently stayed plaintext; the programs'
    // --tls-server-name was refused so already, by ConnectionFromArgs).
    status_ = absl::InvalidArgumentError(
        "server_name: the name TLS checks the server's certificate against; it goes with tls (or tls_ca, tls_cert): "
        "without TLS the connection is plaintext");
  }
  channel_ = grpc::CreateCustomChannel(target, credentials, args);
  stub_ = v1::Sinew::NewStub(channel_);
}

namespace {
// How long the first call waits for the channel's first connection at most.
constexpr auto kFirstConnectionWait = std::chrono::seconds(10);
// After a failed attempt, how long it waits for the next one to succeed: gRPC's first reconnect
// backoff (1 s, jittered by up to 20 %) and the attempt itself.
constexpr auto kRetryWindow = std::chrono::milliseconds(2500);
}  // namespace

void Client::AwaitFirstConnection(std::chrono::system_clock::time_point call_deadline) const {
  if (first_connection_done_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(first_connection_mu_);
  if (first_connection_done_.load(std::memory_order_relaxed)) return;
  // gRPC fails a call at once when its channel's connection attempt fails, and one attempt on
  // loopback did ("connect: No such file or directory", a listening server, a fresh machine):
  // until 2026-12-03 a client's first call then failed UNAVAILABLE where the next succeeded.
  // The first call waits for a connection through one failed attempt and gRPC's reconnect
  // backoff (about a second); when that attempt fails too (no server there, a connection
  // closed unanswered) it goes on and fails as before, about 2.5 s later than it used to.
  // Within the call's own deadline (--timeout 1 waited up to 10 s here, and the call then
  // started with its deadline spent, until 2026-12-03).
  // gRPC keeps the channel in TRANSIENT_FAILURE through its reconnect attempts until one
  // succeeds (its state does not pass through CONNECTING again), so the second failure is not a
  // state change to wait for: after the first, the wait ends at kRetryWindow. Until 2026-12-06 it
  // waited for one, and every first call to a port with no server, or to a server refusing the
  // client's TLS, took the whole 10 s to fail.
  auto deadline = std::min(std::chrono::system_clock::now() + kFirstConnectionWait, call_deadline);
  int failures = 0;
  for (grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true); state != GRPC_CHANNEL_READY;) {
    if (state == GRPC_CHANNEL_SHUTDOWN) break;
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      if (++failures >= 2) break;
      // At the first failed attempt, why: where no later attempt can succeed (a certificate
      // not trusted or not for the name, TLS at a plaintext server) the call goes on at once
      // and fails with that reason and a hint (Explain); until 2026-12-06 it waited
      // kRetryWindow for an attempt that fails the same way. The probe fails at once in
      // TRANSIENT_FAILURE, with gRPC's reason for the failed attempt.
      grpc::Status why;
      if (Probe(call_deadline, why)) break;  // the server answered
      if (!WhyWaitingCannotHelp(why.error_message(), tls_).empty()) break;
      deadline = std::min(deadline, std::chrono::system_clock::now() + kRetryWindow);
    }
    if (!channel_->WaitForStateChange(state, deadline)) break;
    state = channel_->GetState(/*try_to_connect=*/true);
  }
  first_connection_done_.store(true, std::memory_order_release);
}

bool Client::Probe(std::chrono::system_clock::time_point deadline, grpc::Status& why) const {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::min(deadline, std::chrono::system_clock::now() + std::chrono::seconds(1)));
  v1::ServerInfo info;
  why = stub_->GetServerInfo(&ctx, {}, &info);
  return why.error_code() != grpc::StatusCode::UNAVAILABLE && why.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED;
}

absl::Status Client::Explain(const grpc::Status& status) const {
  return Explained(status, tls_, client_certificate_);
}

absl::Status Client::Authorize(grpc::ClientContext& ctx) const {
  if (!status_.ok()) return status_;
  AwaitFirstConnection(ctx.deadline());
  if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
  if (!affinity_.empty()) ctx.AddMetadata("x-sinew-affinity", affinity_);
  return absl::OkStatus();
}

absl::Status Client::Unary(grpc::ClientContext& ctx) const {
  if (timeout_seconds_ > 0) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::microseconds(int64_t(std::min(timeout_seconds_, 1e9) * 1e6)));
  }
  return Authorize(ctx);
}

absl::Status Client::WaitReady(std::chrono::milliseconds timeout) {
  if (!status_.ok()) return status_;
  const auto deadline = std::chrono::system_clock::now() + timeout;
  // Not GetServerInfo() for the probes (Probe): that one would wait for a first connection
  // again (AwaitFirstConnection) before trying.
  const auto failed = [&](const grpc::Status& why, const std::string& waited) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", target_, waited, ": ", Explain(why).message()));
  };
  // At the first failed attempt the wait asks why, and gives up at once where no later attempt
  // can succeed (until 2026-12-06 a client that did not trust the server's certificate waited
  // all of --connect-timeout, 120 s in the batch Job); the channel then stays in
  // TRANSIENT_FAILURE through gRPC's reconnect attempts until one succeeds.
  bool asked = false;
  for (grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true); state != GRPC_CHANNEL_READY;) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE && !asked) {
      asked = true;
      grpc::Status why;
      if (Probe(std::chrono::system_clock::time_point::max(), why)) return absl::OkStatus();
      if (!WhyWaitingCannotHelp(why.error_message(), tls_).empty()) return failed(why, "");
    }
    if (state == GRPC_CHANNEL_SHUTDOWN || !channel_->WaitForStateChange(state, deadline)) break;
    state = channel_->GetState(/*try_to_connect=*/true);
  }
  if (channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) return absl::OkStatus();
  // One call more, of at most a second, for the last attempt's reason.
  grpc::Status why;
  if (Probe(std::chrono::system_clock::time_point::max(), why)) return absl::OkStatus();
  return failed(why, absl::StrCat(" within ", absl::StrFormat("%g", timeout.count() / 1000.0), " s"));
}

absl::Status Client::WaitReady() {
  return WaitReady(std::chrono::milliseconds(int64_t(std::clamp(connect_timeout_seconds_, 0.0, 1e9) * 1000)));
}

absl::StatusOr<v1::ServerInfo> Client::GetServerInfo() {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::ServerInfo info;
  if (auto st = Explain(stub_->GetServerInfo(&ctx, {}, &info)); !st.ok()) return st;
  return info;
}

absl::StatusOr<v1::UploadRigResponse> Client::UploadRig(const v1::Rig& rig,
                                                        const UploadProgress& progress,
                                                        size_t chunk_bytes) {
  return UploadSerializedRig(v1::SerializeRigDeterministic(rig), progress, chunk_bytes);
}

absl::StatusOr<v1::UploadRigResponse> Client::UploadSerializedRig(const std::string& bytes,
                                                                  const UploadProgress& progress,
                                                                  size_t chunk_bytes) {
  const std::string id = v1::Sha256Hex(bytes);
  v1::UploadRigResponse resp;
  {
    auto info = GetRig(id);
    if (info.ok()) {
      resp.set_rig_id(id);
      resp.set_already_resident(true);
      *resp.mutable_info() = *info;
      if (progress) progress(bytes.size(), bytes.size());
      return resp;
    }
    if (info.status().code() != absl::StatusCode::kNotFound) return info.status();
  }
  grpc::ClientContext ctx;
  if (auto st = Authorize(ctx); !st.ok()) return st;
  auto writer = stub_->UploadRig(&ctx, &resp);
  v1::UploadRigRequest req;
  req.mutable_header()->set_total_bytes(bytes.size());
  req.mutable_header()->set_sha256(id);
  bool ok = writer->Write(req);
  chunk_bytes = std::max<size_t>(chunk_bytes, 1);
  for (size_t off = 0; ok && off < bytes.size(); off += chunk_bytes) {
    const size_t n = std::min(chunk_bytes, bytes.size() - off);
    req.set_chunk(bytes.data() + off, n);
    ok = writer->Write(req);
    if (ok && progress) progress(off + n, bytes.size());
  }
  // A failed Write means the server finished early (error or already resident): Finish says.
  writer->WritesDone();
  if (auto st = Explain(writer->Finish()); !st.ok()) return st;
  return resp;
}

absl::StatusOr<v1::RigInfo> Client::GetRig(const std::string& rig_id) {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::GetRigRequest req;
  req.set_rig_id(rig_id);
  v1::RigInfo info;
  if (auto st = Explain(stub_->GetRig(&ctx, req, &info)); !st.ok()) return st;
  return info;
}

absl::StatusOr<v1::ListRigsResponse> Client::ListRigs() {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::ListRigsResponse resp;
  if (auto st = Explain(stub_->ListRigs(&ctx, {}, &resp)); !st.ok()) return st;
  return resp;
}

absl::Status Client::DeleteRig(const std::string& rig_id) {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::DeleteRigRequest req;
  req.set_rig_id(rig_id);
  v1::DeleteRigResponse resp;
  return Explain(stub_->DeleteRig(&ctx, req, &resp));
}

absl::StatusOr<v1::Preparation> Client::CancelPreparation(const std::string& rig_id, const std::string& key) {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::CancelPreparationRequest req;
  req.set_rig_id(rig_id);
  req.set_key(key);
  v1::Preparation resp;
  if (auto st = Explain(stub_->CancelPreparation(&ctx, req, &resp)); !st.ok()) return st;
  return resp;
}

absl::StatusOr<v1::Session> Client::CreateSession(const v1::CreateSessionRequest& request) {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::Session s;
  if (auto st = Explain(stub_->CreateSession(&ctx, request, &s)); !st.ok()) return st;
  return s;
}

absl::StatusOr<v1::Session> Client::CreateSession(
    const v1::CreateSessionRequest& request,
    const std::function<void(double, const std::string&)>& progress) {
  std::promise<absl::StatusOr<v1::Session>> result;
  auto future = result.get_future();
  std::thread call([&] { result.set_value(CreateSession(request)); });
  const auto start = std::chrono::steady_clock::now();
  while (future.wait_for(std::chrono::milliseconds(250)) != std::future_status::ready) {
    if (!progress || std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) continue;
    auto info = GetRig(request.rig_id());
    if (!info.ok()) continue;
    for (const v1::Preparation& p : info->preparations()) {
      if (!p.done()) progress(p.progress(), p.key());
    }
  }
  call.join();
  return future.get();
}

absl::StatusOr<v1::Session> Client::GetSession(const std::string& session_id) {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::GetSessionRequest req;
  req.set_session_id(session_id);
  v1::Session s;
  if (auto st = Explain(stub_->GetSession(&ctx, req, &s)); !st.ok()) return st;
  return s;
}

absl::StatusOr<v1::Session> Client::UpdateSession(const std::string& session_id, const v1::DeformerConfig& deformer) {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::UpdateSessionRequest req;
  req.set_session_id(session_id);
  *req.mutable_deformer() = deformer;
  v1::Session s;
  if (auto st = Explain(stub_->UpdateSession(&ctx, req, &s)); !st.ok()) return st;
  return s;
}

absl::StatusOr<v1::SessionState> Client::GetSessionState(const std::string& session_id) {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::GetSessionStateRequest req;
  req.set_session_id(session_id);
  v1::SessionState state;
  if (auto st = Explain(stub_->GetSessionState(&ctx, req, &state)); !st.ok()) return st;
  return state;
}

absl::StatusOr<v1::Session> Client::SetSessionState(const std::string& session_id, const v1::SessionState& state) {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::SetSessionStateRequest req;
  req.set_session_id(session_id);
  *req.mutable_state() = state;
  v1::Session s;
  if (auto st = Explain(stub_->SetSessionState(&ctx, req, &s)); !st.ok()) return st;
  return s;
}

absl::StatusOr<v1::ListSessionsResponse> Client::ListSessions() {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::ListSessionsResponse resp;
  if (auto st = Explain(stub_->ListSessions(&ctx, {}, &resp)); !st.ok()) return st;
  return resp;
}

absl::StatusOr<uint64_t> Client::CloseSession(const std::string& session_id) {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  // A close is a small call made on every way out (a failed frame, Ctrl-C): at most 10 s even
  // without --timeout, so that a server that stopped answering cannot hold the client's exit.
  ctx.set_deadline(std::min(ctx.deadline(), std::chrono::system_clock::now() + std::chrono::seconds(10)));
  v1::CloseSessionRequest req;
  req.set_session_id(session_id);
  v1::CloseSessionResponse resp;
  if (auto st = Explain(stub_->CloseSession(&ctx, req, &resp)); !st.ok()) return st;
  return resp.frames();
}

absl::StatusOr<v1::DeformResponse> Client::Deform(const v1::DeformRequest& request) {
  grpc::ClientContext ctx;
  if (auto st = Unary(ctx); !st.ok()) return st;
  v1::DeformResponse resp;
  if (auto st = Explain(stub_->Deform(&ctx, request, &resp)); !st.ok()) return st;
  return resp;
}

absl::Status Client::DeformClip(
    const v1::DeformClipRequest& request,
    const std::function<absl::Status(const v1::DeformClipResponse&)>& on_frame) {
  grpc::ClientContext ctx;
  if (auto st = Authorize(ctx); !st.ok()) return st;
  auto reader = stub_->DeformClip(&ctx, request);
  v1::DeformClipResponse resp;
  absl::Status local;
  while (reader->Read(&resp)) {
    local = on_frame(resp);
    if (!local.ok()) {
      ctx.TryCancel();
      while (reader->Read(&resp)) {
      }
      break;
    }
  }
  const absl::Status remote = Explain(reader->Finish());
  return local.ok() ? remote : local;
}

std::unique_ptr<FrameStream> Client::OpenStream(std::optional<std::chrono::system_clock::time_point> deadline) {
  return std::make_unique<FrameStream>(*stub_, *this, deadline);
}

v1::Rig RigToProto(const RigInput& in) {
  const Rig& rig = in.rig;
  v1::Rig out;
  out.set_name(rig.name);
  out.mutable_mesh()->set_positions(Pack(rig.positions));
  out.mutable_mesh()->set_triangles(Pack(rig.triangles));
  out.mutable_mesh()->set_normals(Pack(rig.normals));
  for (size_t j = 0; j < rig.skeleton.size(); ++j) {
    v1::Joint* joint = out.mutable_skeleton()->add_joints();
    joint->set_name(rig.skeleton.names[j]);
    joint->set_parent(rig.skeleton.parents[j]);
    const Similarity& s = rig.skeleton.rest_local[j];
    v1::Transform* t = joint->mutable_rest();
    t->mutable_rotation()->set_x(float(s.rotation.x()));
    t->mutable_rotation()->set_y(float(s.rotation.y()));
    t->mutable_rotation()->set_z(float(s.rotation.z()));
    t->mutable_rotation()->set_w(float(s.rotation.w()));
    t->mutable_translation()->set_x(float(s.translation.x()));
    t->mutable_translation()->set_y(float(s.translation.y()));
    t->mutable_translation()->set_z(float(s.translation.z()));
    if (s.scale != 1.0) t->set_scale(float(s.scale));
  }
  if (!rig.skeleton.inverse_bind.empty()) {
    std::vector<float> ib;
    for (const Affine34d& m : rig.skeleton.inverse_bind) {
      const Affine34f f = m.cast<float>();
      ib.insert(ib.end(), f.data(), f.data() + 12);
    }
    out.mutable_skeleton()->set_inverse_bind_matrices(Pack(ib));
  }
  out.mutable_weights()->set_offsets(Pack(in.weights.offsets));
  out.mutable_weights()->set_joints(Pack(in.weights.joints));
  out.mutable_weights()->set_weights(Pack(in.weights.weights));
  out.mutable_weights()->set_influences_per_vertex(in.weights.influences_per_vertex);
  out.set_normalize_weights(in.weights.normalize);
  for (const AttributeMap& a : rig.attributes) {
    v1::AttributeMap* m = out.add_attributes();
    m->set_name(a.name);
    m->set_components(a.components);
    m->set_values(Pack(a.values));
  }
  if (!rig.sphere_mesh.centers.empty() || !rig.sphere_mesh.bones.empty()) {
    v1::SphereMesh& sm = *out.mutable_sphere_mesh();
    sm.set_centers(Pack(rig.sphere_mesh.centers));
    sm.set_radii(Pack(rig.sphere_mesh.radii));
    sm.set_bones(Pack(rig.sphere_mesh.bones));
    sm.set_triangles(Pack(rig.sphere_mesh.triangles));
    sm.set_bone_joints(Pack(rig.sphere_mesh.bone_joints));
    sm.set_bone_frames(Pack(rig.sphere_mesh.bone_frames));
    sm.set_point_bones(Pack(rig.sphere_mesh.point_bones));
  }
  if (!rig.tet_mesh.positions.empty() || !rig.tet_mesh.tets.empty()) {
    out.mutable_tet_mesh()->set_positions(Pack(rig.tet_mesh.positions));
    out.mutable_tet_mesh()->set_tets(Pack(rig.tet_mesh.tets));
  }
  for (const PrecomputedData& p : rig.precomputed) {
    v1::PrecomputedData* d = out.add_precomputed();
    d->set_deformer(p.deformer);
    d->set_version(p.version);
    d->set_data(p.data);
  }
  for (const Cage& c : rig.cages) {
    v1::Cage* cage = out.add_cages();
    cage->set_name(c.name);
    cage->set_positions(Pack(c.positions));
    cage->set_triangles(Pack(c.triangles));
  }
  return out;
}

std::vector<v1::DeformRequest> ClipRequests(const Clip& clip, const CageClip* cage_clip, const Skeleton& skeleton,
                                            double clip_fps, size_t frames) {
  std::vector<v1::DeformRequest> out(frames);
  const double step = std::clamp(1.0 / clip_fps, 1e-6, 60.0);
  Pose pose;
  std::vector<float> offsets;
  for (size_t f = 0; f < frames; ++f) {
    SampleClip(clip, skeleton, double(f) / clip_fps, pose);
    PoseToProto(pose, *out[f].mutable_pose());
    out[f].set_time_step(step);
    if (cage_clip) {  // the rig's first cage, animated by offsets from its rest position
      SampleCageClip(*cage_clip, double(f) / clip_fps, offsets);
      v1::CagePose* cp = out[f].add_cages();
      cp->set_input(v1::CAGE_INPUT_OFFSETS);
      cp->set_positions(offsets.data(), offsets.size() * sizeof(float));
    }
  }
  return out;
}

void PoseToProto(const Pose& pose, v1::Pose& out) {
  out.set_space(pose.space == PoseSpace::kWorld ? v1::POSE_SPACE_WORLD : v1::POSE_SPACE_LOCAL);
  out.set_rotations(Pack(pose.rotations));
  out.set_translations(Pack(pose.translations));
  out.set_scales(Pack(pose.scales));
}

namespace {
wire::Quantization FromProto(const v1::Quantization& p) {
  wire::Quantization q;
  q.offset[0] = p.offset_x();
  q.offset[1] = p.offset_y();
  q.offset[2] = p.offset_z();
  q.scale[0] = p.scale_x();
  q.scale[1] = p.scale_y();
  q.scale[2] = p.scale_z();
  q.key_frame = p.key_frame();
  q.since_key_frame = p.since_key_frame();
  return q;
}

// `delta`: the stream's decoder (null: key frames only).
absl::Status Decode(std::string_view b, uint32_t vertex_count, v1::OutputEncoding encoding,
                    const v1::Quantization& quantization, wire::DeltaDecoder* delta, std::vector<float>& out) {
  const size_t floats = size_t{3} * vertex_count;
  // The byte count first, so that a corrupt vertex_count cannot make `out` allocate gigabytes:
  // the fixed-size encodings' sizes follow from it; a delta frame's does not, and any server's
  // rig has at most kMaxResponseVertices (the server's own cap is 10 million by default).
  constexpr size_t kMaxResponseVertices = size_t{1} << 28;
  size_t per_float = 0;  // bytes per coordinate; 0: variable (delta)
  switch (encoding) {
    case v1::OUTPUT_ENCODING_FLOAT32: per_float = 4; break;
    case v1::OUTPUT_ENCODING_FLOAT16:
    case v1::OUTPUT_ENCODING_QUANTIZED16: per_float = 2; break;
    case v1::OUTPUT_ENCODING_DELTA: break;
    default: return absl::DataLossError(absl::StrCat("encoding: ", int(encoding), " is not one this client knows"));
  }
  if (per_float > 0 && b.size() != floats * per_float) {
    return absl::DataLossError(absl::StrCat("positions: ", b.size(), " bytes for ", vertex_count, " vertices in ",
                                            v1::OutputEncoding_Name(encoding), " (", floats * per_float, " expected)"));
  }
  if (vertex_count > kMaxResponseVertices) {
    return absl::DataLossError(absl::StrCat("vertex_count: ", vertex_count, " is beyond any rig (", kMaxResponseVertices, ")"));
  }
  // Every block of 16 values of a delta frame has its width byte: a count its bytes cannot hold is
  // refused before `out` is sized by it (until 2026-12-07 a few bytes could ask for 3 GiB).
  if (encoding == v1::OUTPUT_ENCODING_DELTA && b.size() < 3 * ((size_t{vertex_count} + 15) / 16)) {
    return absl::DataLossError(absl::StrCat("positions: ", b.size(), " bytes cannot hold a delta frame of ",
                                            vertex_count, " vertices (a byte a block of 16 values at least)"));
  }
  out.resize(floats);
  if (encoding == v1::OUTPUT_ENCODING_QUANTIZED16) {
    return wire::DecodeQuantized16(b, FromProto(quantization), out);
  }
  if (encoding == v1::OUTPUT_ENCODING_DELTA) {
    if (delta == nullptr) {
      if (!quantization.key_frame()) {
        return absl::FailedPreconditionError(
            "positions: a delta frame between key frames; decode the stream's frames with a PositionDecoder");
      }
      wire::DeltaDecoder once;
      return once.Decode(b, FromProto(quantization), out);
    }
    return delta->Decode(b, FromProto(quantization), out);
  }
  if (encoding == v1::OUTPUT_ENCODING_FLOAT16) {
    HalvesToFloats(reinterpret_cast<const uint16_t*>(b.data()), out.data(), floats);
    return absl::OkStatus();
  }
  if (floats) std::memcpy(out.data(), b.data(), b.size());
  return absl::OkStatus();
}
}  // namespace

absl::Status InSharedMemory(const v1::DeformResponse& r) {
  return absl::FailedPreconditionError(absl::StrCat("frame ", r.frame(), ": its positions are in shared-memory region ",
                                                    r.shared_positions().region_id(),
                                                    "; decode it with the region (PositionDecoder::Decode with it)"));
}

absl::Status Skipped(const v1::DeformResponse& r) {
  return absl::FailedPreconditionError(
      absl::StrCat("frame ", r.frame(), " was skipped for a newer one (latest_pose_wins): it has no positions"));
}

absl::Status DecodePositions(const v1::DeformResponse& r, std::vector<float>& out) {
  if (r.has_error()) {
    return absl::Status(static_cast<absl::StatusCode>(r.error().code()), r.error().message());
  }
  if (r.skipped()) return Skipped(r);
  if (r.has_shared_positions()) return InSharedMemory(r);
  return Decode(r.positions(), r.vertex_count(), r.encoding(), r.quantization(), nullptr, out);
}

absl::Status DecodePositions(const v1::DeformClipResponse& r, std::vector<float>& out) {
  return Decode(r.positions(), r.vertex_count(), r.encoding(), r.quantization(), nullptr, out);
}

absl::Status PositionDecoder::Decode(const v1::DeformResponse& r, std::vector<float>& out) {
  if (r.has_error()) {
    return absl::Status(static_cast<absl::StatusCode>(r.error().code()), r.error().message());
  }
  if (r.skipped()) return Skipped(r);
  if (r.has_shared_positions()) return InSharedMemory(r);
  return client::Decode(r.positions(), r.vertex_count(), r.encoding(), r.quantization(), &delta_, out);
}

absl::Status PositionDecoder::Decode(const v1::DeformResponse& r, const SharedMemory& shm, std::vector<float>& out) {
  if (r.has_error()) {
    return absl::Status(static_cast<absl::StatusCode>(r.error().code()), r.error().message());
  }
  if (r.skipped()) return Skipped(r);
  if (!r.has_shared_positions()) return Decode(r, out);
  auto bytes = shm.Positions(r);
  if (!bytes.ok()) return bytes.status();
  return client::Decode(*bytes, r.vertex_count(), r.encoding(), r.quantization(), &delta_, out);
}

absl::Status PositionDecoder::Decode(const v1::DeformClipResponse& r, std::vector<float>& out) {
  return client::Decode(r.positions(), r.vertex_count(), r.encoding(), r.quantization(), &delta_, out);
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Create(Client& client, uint64_t bytes) {
  static std::atomic<uint64_t> serial{0};
  const std::string name = absl::StrCat("/sinew-", getpid(), "-", serial.fetch_add(1), "-",
                                        std::chrono::steady_clock::now().time_since_epoch().count() % 1000000007);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("shm_open ", name, ": ", std::strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("ftruncate ", name, " to ", bytes, ": ", std::strerror(e)));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (data == MAP_FAILED) {
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("mmap ", name, ": ", std::strerror(errno)));
  }
  std::unique_ptr<SharedMemory> shm(new SharedMemory(client, name, static_cast<char*>(data), bytes));
  v1::RegisterSharedMemoryRequest req;
  req.set_name(name);
  req.set_bytes(bytes);
  v1::SharedMemoryRegion region;
  grpc::ClientContext ctx;
  if (auto st = client.Authorize(ctx); !st.ok()) return st;
  if (auto st = client.Explain(client.stub().RegisterSharedMemory(&ctx, req, &region)); !st.ok()) return st;
  shm->region_id_ = region.region_id();
  return shm;
}

SharedMemory::~SharedMemory() {
  if (!region_id_.empty()) {
    v1::UnregisterSharedMemoryRequest req;
    req.set_region_id(region_id_);
    v1::UnregisterSharedMemoryResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    (void)client_.Authorize(ctx);  // registered, so the client's status was OK
    (void)client_.stub().UnregisterSharedMemory(&ctx, req, &resp);
  }
  munmap(data_, bytes_);
  shm_unlink(name_.c_str());
}

absl::StatusOr<std::string_view> SharedMemory::Positions(const v1::DeformResponse& r) const {
  const v1::SharedMemoryTarget& p = r.shared_positions();
  if (p.region_id() != region_id_) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared_positions.region_id: \"", p.region_id(), "\" is not this region (\"", region_id_, "\")"));
  }
  if (p.offset() > bytes_ || p.bytes() > bytes_ - p.offset()) {
    return absl::DataLossError(absl::StrCat("shared_positions: ", p.bytes(), " bytes at ", p.offset(), " leave the region's ",
                                            bytes_));
  }
  return std::string_view(data_ + p.offset(), p.bytes());
}

void ClipToProto(const Clip& clip, v1::Clip& out) {
  out.Clear();
  out.set_name(clip.name);
  out.set_duration_seconds(clip.duration);
  for (size_t j = 0; j < clip.tracks.size(); ++j) {
    const JointTrack& t = clip.tracks[j];
    if (t.empty()) continue;
    v1::JointTrack* o = out.add_tracks();
    o->set_joint(static_cast<uint32_t>(j));
    std::vector<float> v;
    o->set_translation_times(Pack(t.translation_times));
    for (const auto& x : t.translations) v.insert(v.end(), {float(x.x()), float(x.y()), float(x.z())});
    o->set_translations(Pack(v));
    v.clear();
    o->set_rotation_times(Pack(t.rotation_times));
    for (const auto& q : t.rotations) v.insert(v.end(), {float(q.x()), float(q.y()), float(q.z()), float(q.w())});
    o->set_rotations(Pack(v));
    v.clear();
    o->set_scale_times(Pack(t.scale_times));
    for (double s : t.scales) v.push_back(float(s));
    o->set_scales(Pack(v));
  }
}

}  // namespace sinew::client

namespace sinew::client {
LimbOptions LimbWithVertices(size_t vertices, uint32_t bones, uint32_t influences) {
  LimbOptions o;
  o.segments = 100;
  o.rings = static_cast<uint32_t>(std::max<size_t>(2, (vertices + o.segments - 1) / o.segments));
  o.bones = bones;
  o.max_influences = influences;
  return o;
}
}  // namespace sinew::client
