#include "server/service.h"

#include <chrono>
#include <cmath>
#include <condition_variable>

#include "absl/strings/str_cat.h"
#include "core/deformer/skeletal.h"
#include "core/util/half.h"
#include "server/convert.h"
#include "server/version.h"
#include "sinew/v1/rig_id.h"

namespace sinew::server {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

grpc::Status GrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// UploadRig: header, then chunks; parsed and validated on the worker pool.

class Service::UploadCall final : public grpc::ServerReadReactor<v1::UploadRigRequest> {
 public:
  UploadCall(Service* svc, v1::UploadRigResponse* resp) : svc_(svc), resp_(resp) {
    svc_->active_calls_.fetch_add(1);
    StartRead(&req_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client finished sending (or went away)
      if (!have_header_) return Fail(absl::InvalidArgumentError("upload: no header was sent"));
      if (data_.size() != total_) {
        return Fail(absl::InvalidArgumentError(absl::StrCat(
            "upload: received ", data_.size(), " bytes, the header announced ", total_)));
      }
      svc_->pool_.Submit(&UploadCall::Finalize, this);
      return;
    }
    if (!have_header_) {
      if (!req_.has_header()) {
        return Fail(absl::InvalidArgumentError("upload: the first message must be a header"));
      }
      have_header_ = true;
      total_ = req_.header().total_bytes();
      sha_ = req_.header().sha256();
      if (total_ == 0) return Fail(absl::InvalidArgumentError("header.total_bytes: must be > 0"));
      if (total_ > svc_->options_.max_rig_bytes) {
        return Fail(absl::ResourceExhaustedError(
            absl::StrCat("header.total_bytes: ", total_, " bytes exceed the limit of ",
                         svc_->options_.max_rig_bytes, " (--max-rig-bytes)")));
      }
      if (!sha_.empty() && !v1::IsRigId(sha_)) {
        return Fail(absl::InvalidArgumentError("header.sha256: not 64 lowercase hex digits"));
      }
      if (!sha_.empty()) {
        if (auto stored = svc_->rigs_.Find(sha_, NowMs())) return Respond(*stored, true);
      }
      data_.reserve(total_);
    } else {
      if (!req_.has_chunk()) {
        return Fail(absl::InvalidArgumentError("upload: only the first message may be a header"));
      }
      if (data_.size() + req_.chunk().size() > total_) {
        return Fail(absl::InvalidArgumentError(absl::StrCat(
            "upload: more than the ", total_, " bytes the header announced")));
      }
      data_.append(req_.chunk());
      received_ += req_.chunk().size();
      svc_->metrics_.upload_bytes().Increment(static_cast<double>(req_.chunk().size()));
    }
    StartRead(&req_);
  }

  void OnDone() override {
    svc_->active_calls_.fetch_sub(1);
    delete this;
  }

 private:
  static void Finalize(void* arg) {
    auto* self = static_cast<UploadCall*>(arg);
    self->FinalizeImpl();
  }

  void FinalizeImpl() {
    const std::string id = v1::Sha256Hex(data_);
    if (!sha_.empty() && sha_ != id) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "header.sha256: the data hashes to ", id, ", the header named ", sha_)));
    }
    if (auto stored = svc_->rigs_.Find(id, NowMs())) return Respond(*stored, true);
    v1::Rig message;
    if (!message.ParseFromString(data_)) {
      return Fail(absl::InvalidArgumentError("upload: the bytes are not a serialized sinew.v1.Rig"));
    }
    std::string().swap(data_);
    auto input = RigFromProto(message);
    if (!input.ok()) return Fail(input.status());
    message.Clear();
    RigLimits limits;
    limits.max_vertices = svc_->options_.max_vertices;
    auto rig = BuildRig(std::move(*input), limits);
    if (!rig.ok()) return Fail(rig.status());
    auto stored = svc_->rigs_.Insert(id, std::move(*rig), NowMs());
    if (!stored.ok()) return Fail(stored.status());
    svc_->UpdateGauges();
    Respond(**stored, false);
  }

  void Respond(const StoredRig& stored, bool already) {
    resp_->set_rig_id(stored.id);
    resp_->set_already_resident(already);
    resp_->set_bytes_received(received_);
    v1::RigInfo* info = resp_->mutable_info();
    info->set_rig_id(stored.id);
    FillRigInfo(*stored.rig, *info);
    info->set_session_count(static_cast<uint32_t>(stored.sessions.load()));
    Finish(grpc::Status::OK);
  }

  void Fail(const absl::Status& st) { Finish(svc_->ToGrpc("UploadRig", st)); }

  Service* svc_;
  v1::UploadRigResponse* resp_;
  v1::UploadRigRequest req_;
  bool have_header_ = false;
  uint64_t total_ = 0;
  uint64_t received_ = 0;
  std::string sha_;
  std::string data_;
};

// ---------------------------------------------------------------------------------------------
// CreateSession: runs on the worker pool, because preparing a method (cage coordinates, ...)
// can take seconds; gRPC's threads are never blocked.

class Service::CreateCall final : public grpc::ServerUnaryReactor {
 public:
  CreateCall(Service* svc, const v1::CreateSessionRequest* req, v1::Session* resp)
      : svc_(svc), req_(req), resp_(resp) {
    svc_->active_calls_.fetch_add(1);
    svc_->pool_.Submit(&CreateCall::Run, this);
  }
  void OnDone() override {
    svc_->active_calls_.fetch_sub(1);
    delete this;
  }

 private:
  static void Run(void* arg) {
    auto* self = static_cast<CreateCall*>(arg);
    self->Finish(self->svc_->ToGrpc("CreateSession", self->svc_->CreateSessionImpl(*self->req_, *self->resp_)));
  }
  Service* svc_;
  const v1::CreateSessionRequest* req_;
  v1::Session* resp_;
};

// ---------------------------------------------------------------------------------------------
// Deform (unary): the frame runs on the worker pool.

class Service::DeformCall final : public grpc::ServerUnaryReactor {
 public:
  DeformCall(Service* svc, const v1::DeformRequest* req, v1::DeformResponse* resp)
      : svc_(svc), req_(req), resp_(resp) {
    svc_->active_calls_.fetch_add(1);
    svc_->pool_.Submit(&DeformCall::Run, this);
  }
  void OnDone() override {
    svc_->active_calls_.fetch_sub(1);
    delete this;
  }

 private:
  static void Run(void* arg) {
    auto* self = static_cast<DeformCall*>(arg);
    self->svc_->RunFrame(*self->req_, *self->resp_, self->pending_, &DeformCall::Done, self);
  }
  static void Done(void* arg, const absl::Status& st) {
    auto* self = static_cast<DeformCall*>(arg);
    if (!st.ok()) self->svc_->metrics_.FrameError(static_cast<grpc::StatusCode>(st.code()));
    self->Finish(self->svc_->ToGrpc("Deform", st));
  }
  Service* svc_;
  const v1::DeformRequest* req_;
  v1::DeformResponse* resp_;
  PendingFrame pending_;
};

// ---------------------------------------------------------------------------------------------
// StreamDeform: read one request, deform on the pool, write its response, read the next. One
// frame in flight per stream keeps responses in request order; an idle stream waits in a
// pending read and holds no thread. gRPC operations are started outside mu_.

class Service::StreamCall final
    : public grpc::ServerBidiReactor<v1::DeformRequest, v1::DeformResponse>,
      public Service::Drainable {
 public:
  explicit StreamCall(Service* svc) : svc_(svc) {
    svc_->active_calls_.fetch_add(1);
    if (!svc_->Register(this)) {
      finished_ = true;
      Finish(grpc::Status(grpc::UNAVAILABLE, "server is shutting down"));
      return;
    }
    StartRead(&req_);
  }

  void OnReadDone(bool ok) override {
    {
      std::lock_guard lock(mu_);
      if (finished_) return;
      if (!ok) {
        finished_ = true;  // client half-closed after its last frame, or went away
      } else {
        state_ = State::kProcessing;
      }
    }
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    svc_->pool_.Submit(&StreamCall::Run, this);
  }

  void OnWriteDone(bool ok) override {
    grpc::Status end;
    bool finish = false;
    {
      std::lock_guard lock(mu_);
      if (finished_) return;
      if (!ok) {
        finish = true;
        end = grpc::Status(grpc::CANCELLED, "stream: the client stopped reading");
      } else if (draining_) {
        finish = true;
        end = grpc::Status(grpc::UNAVAILABLE, "server is shutting down");
      } else {
        state_ = State::kReading;
      }
      finished_ = finish;
    }
    if (finish) Finish(end);
    else StartRead(&req_);
  }

  // Called by BeginDrain (under streams_mu_).
  void Drain() override {
    {
      std::lock_guard lock(mu_);
      draining_ = true;
      if (finished_ || state_ != State::kReading) return;  // OnWriteDone will finish
      finished_ = true;
    }
    Finish(grpc::Status(grpc::UNAVAILABLE, "server is shutting down"));
  }

  void OnDone() override {
    svc_->Unregister(this);
    svc_->active_calls_.fetch_sub(1);
    delete this;
  }

 private:
  enum class State { kReading, kProcessing };

  static void Run(void* arg) {
    auto* self = static_cast<StreamCall*>(arg);
    self->svc_->RunFrame(self->req_, self->resp_, self->pending_, &StreamCall::Done, self);
  }

  static void Done(void* arg, const absl::Status& st) {
    auto* self = static_cast<StreamCall*>(arg);
    v1::DeformResponse& resp = self->resp_;
    if (st.ok()) {
      resp.clear_error();
    } else {
      // A bad frame does not end the stream: its response carries the error.
      resp.clear_positions();
      resp.set_vertex_count(0);
      resp.mutable_error()->set_code(static_cast<int>(st.code()));
      resp.mutable_error()->set_message(std::string(st.message()));
      self->svc_->metrics_.FrameError(static_cast<grpc::StatusCode>(st.code()));
    }
    self->StartWrite(&resp);
  }

  Service* svc_;
  v1::DeformRequest req_;
  v1::DeformResponse resp_;  // reused: its positions buffer keeps its capacity
  PendingFrame pending_;
  std::mutex mu_;
  State state_ = State::kReading;
  bool draining_ = false;
  bool finished_ = false;
};

// ---------------------------------------------------------------------------------------------
// DeformClip: a batch. Frames are produced one at a time on the worker pool; the next one starts
// when the previous response has been written, so a slow client slows the batch instead of
// filling memory.

class Service::ClipCall final : public grpc::ServerWriteReactor<v1::DeformClipResponse>,
                                public Service::Drainable {
 public:
  ClipCall(Service* svc, const v1::DeformClipRequest* req) : svc_(svc), req_(req) {
    svc_->active_calls_.fetch_add(1);
    if (!svc_->Register(this)) {
      End(grpc::Status(grpc::UNAVAILABLE, "server is shutting down"));
      return;
    }
    if (auto st = Prepare(); !st.ok()) {
      End(svc_->ToGrpc("DeformClip", st));
      return;
    }
    if (next_ >= end_) {
      End(grpc::Status::OK);
      return;
    }
    svc_->pool_.Submit(&ClipCall::Run, this);
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard lock(mu_);
      if (finished_) return;
      writing_ = false;
    }
    if (!ok) return End(grpc::Status(grpc::CANCELLED, "batch: the client stopped reading"));
    if (draining()) return End(grpc::Status(grpc::UNAVAILABLE, "server is shutting down"));
    if (next_ >= end_) return End(grpc::Status::OK);
    svc_->pool_.Submit(&ClipCall::Run, this);
  }

  void Drain() override {
    {
      std::lock_guard lock(mu_);
      draining_ = true;
      if (finished_ || writing_ || running_) return;  // OnWriteDone will finish
    }
    End(grpc::Status(grpc::UNAVAILABLE, "server is shutting down"));
  }

  void OnDone() override {
    svc_->Unregister(this);
    svc_->active_calls_.fetch_sub(1);
    delete this;
  }

 private:
  absl::Status Prepare() {
    session_ = svc_->sessions_.Find(req_->session_id(), NowMs());
    if (!session_) {
      return absl::NotFoundError(absl::StrCat("session_id: no session \"", req_->session_id(),
                                              "\" (closed or expired)"));
    }
    const Rig& rig = *session_->rig->rig;
    uint64_t total = 0;
    if (req_->has_clip()) {
      fps_ = req_->clip().frames_per_second();
      if (!(fps_ > 0) || !std::isfinite(fps_) || fps_ > 1e6) {
        return absl::InvalidArgumentError("clip.frames_per_second: must be in (0, 1e6]");
      }
      auto clip = ClipFromProto(req_->clip().clip(), rig.joint_count());
      if (!clip.ok()) return clip.status();
      clip_ = std::move(*clip);
      total = ClipFrameCount(clip_, fps_);
    } else if (req_->has_poses()) {
      total = static_cast<uint64_t>(req_->poses().poses_size());
    } else {
      return absl::InvalidArgumentError("source: give a clip (with frames_per_second) or poses");
    }
    if (total > kMaxFrames) {
      return absl::ResourceExhaustedError(
          absl::StrCat("clip: ", total, " frames; one batch holds at most ", kMaxFrames));
    }
    response_.set_total_frames(total);
    next_ = req_->first_frame();
    end_ = total;
    if (req_->max_frames() > 0) end_ = std::min<uint64_t>(end_, next_ + req_->max_frames());
    if (const MethodInfo* m = FindMethod(session_->method); m && m->stateful && next_ < end_) {
      // A history-dependent method plays the clip from its rest state, and a resumed batch
      // replays the frames before first_frame without sending them, so that its frames equal
      // those of an uninterrupted run.
      std::lock_guard lock(session_->mu);
      session_->deformer->Reset();
      replay_end_ = next_;
      next_ = 0;
    }
    return absl::OkStatus();
  }

  static void Run(void* arg) { static_cast<ClipCall*>(arg)->RunFrame(); }

  void RunFrame() {
    {
      std::lock_guard lock(mu_);
      if (finished_) return;
      running_ = true;
    }
    absl::Status st;
    uint64_t frame;
    do {  // stateful methods first replay the frames before first_frame, unsent
      frame = next_++;
      std::lock_guard lock(session_->mu);
      Pose& pose = session_->pose;
      if (req_->has_clip()) {
        const double t = double(frame) / fps_;
        SampleClip(clip_, session_->rig->rig->skeleton, t, pose);
        response_.set_time_seconds(t);
      } else {
        st = PoseFromProto(req_->poses().poses(static_cast<int>(frame)), pose);
      }
      if (st.ok()) st = svc_->DeformInto(*session_, {&pose, {}}, *response_.mutable_positions());
      if (!st.ok() && req_->has_poses()) {
        st = absl::Status(st.code(), absl::StrCat("poses.poses[", frame, "] ", st.message()));
      }
    } while (st.ok() && frame < replay_end_);
    if (!st.ok()) {
      {
        std::lock_guard lock(mu_);
        running_ = false;
      }
      svc_->metrics_.FrameError(static_cast<grpc::StatusCode>(st.code()));
      return End(svc_->ToGrpc("DeformClip", st));
    }
    response_.set_frame(frame);
    response_.set_vertex_count(static_cast<uint32_t>(session_->rig->rig->vertex_count()));
    response_.set_encoding(session_->encoding);
    {
      std::lock_guard lock(mu_);
      running_ = false;
      writing_ = true;
    }
    StartWrite(&response_);
  }

  bool draining() {
    std::lock_guard lock(mu_);
    return draining_;
  }

  void End(const grpc::Status& status) {
    {
      std::lock_guard lock(mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(status);
  }

  static constexpr uint64_t kMaxFrames = 10'000'000;
  Service* svc_;
  const v1::DeformClipRequest* req_;
  std::shared_ptr<Session> session_;
  Clip clip_;
  double fps_ = 0;
  uint64_t replay_end_ = 0;  // frames before this one are computed but not sent
  uint64_t next_ = 0, end_ = 0;
  v1::DeformClipResponse response_;
  std::mutex mu_;
  bool draining_ = false, writing_ = false, running_ = false, finished_ = false;
};

// ---------------------------------------------------------------------------------------------

Service::Service(const ServerOptions& options, Metrics& metrics, ThreadPool& pool,
                 gpu::GpuBackend* gpu)
    : options_(options),
      metrics_(metrics),
      pool_(pool),
      gpu_(gpu),
      rigs_(options.max_store_bytes),
      sessions_(options.max_sessions, int64_t{options.session_idle_ttl_seconds} * 1000) {}

Service::~Service() = default;

grpc::Status Service::ToGrpc(const char* rpc, const absl::Status& status) {
  if (!status.ok()) metrics_.RpcError(rpc, static_cast<grpc::StatusCode>(status.code()));
  return GrpcStatus(status);
}

grpc::ServerUnaryReactor* Service::Done(grpc::CallbackServerContext* ctx, const char* rpc,
                                        const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(rpc, status));
  return reactor;
}

void Service::UpdateGauges() {
  metrics_.sessions().Set(static_cast<double>(sessions_.count()));
  metrics_.rigs().Set(static_cast<double>(rigs_.count()));
  size_t prepared = 0;
  for (const auto& r : rigs_.List()) prepared += r->prepared_bytes.load();
  metrics_.rig_bytes().Set(static_cast<double>(rigs_.bytes() + prepared));
  metrics_.session_bytes().Set(static_cast<double>(sessions_.state_bytes()));
}

void Service::Housekeeping() {
  sessions_.ExpireIdle(NowMs());
  UpdateGauges();
  if (gpu_) {
    for (const gpu::DeviceInfo& d : gpu_->Devices()) metrics_.Device(d);
  }
}

grpc::ServerUnaryReactor* Service::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                 const v1::GetServerInfoRequest*,
                                                 v1::ServerInfo* resp) {
  resp->set_version(kVersion);
  resp->set_api_version("sinew.v1");
  const auto* svc = v1::DeformRequest::descriptor()->file()->FindServiceByName("Sinew");
  for (int i = 0; i < svc->method_count(); ++i) resp->add_rpcs(svc->method(i)->name());
  for (const MethodInfo& m : Methods()) {
    v1::MethodInfo* mi = resp->add_methods();
    mi->set_method(static_cast<v1::Method>(m.method));
    mi->set_name(std::string(m.name));
    mi->set_description(std::string(m.description));
    mi->set_stateful(m.stateful);
    mi->add_backends(v1::BACKEND_CPU);
    if (gpu_ && m.device_stage) mi->add_backends(v1::BACKEND_GPU);
  }
  v1::BackendInfo* cpu = resp->add_backends();
  cpu->set_backend(v1::BACKEND_CPU);
  cpu->set_available(true);
  cpu->set_description(absl::StrCat("CPU, ", pool_.workers(), " worker threads"));
  v1::BackendInfo* gpu = resp->add_backends();
  gpu->set_backend(v1::BACKEND_GPU);
  gpu->set_available(gpu_ != nullptr);
  if (gpu_) {
    std::string d;
    for (const gpu::DeviceInfo& dev : gpu_->Devices()) {
      v1::DeviceInfo* di = resp->add_devices();
      di->set_index(dev.index);
      di->set_name(dev.name);
      di->set_total_bytes(dev.total_bytes);
      di->set_limit_bytes(dev.limit_bytes);
      di->set_used_bytes(dev.used_bytes);
      di->set_utilisation(dev.utilisation);
      di->set_rigs(dev.rigs);
      di->set_sessions(dev.sessions);
      absl::StrAppend(&d, d.empty() ? "" : ", ", dev.name);
    }
    gpu->set_description(d);
  } else {
    gpu->set_description(gpu_unavailable_reason_);
  }
  resp->add_encodings(v1::OUTPUT_ENCODING_FLOAT32);
  resp->add_encodings(v1::OUTPUT_ENCODING_FLOAT16);
  v1::Limits* l = resp->mutable_limits();
  l->set_max_vertices_per_rig(static_cast<uint32_t>(options_.max_vertices));
  l->set_max_rig_bytes(options_.max_rig_bytes);
  l->set_max_sessions(static_cast<uint32_t>(options_.max_sessions));
  l->set_session_idle_ttl_seconds(options_.session_idle_ttl_seconds);
  l->set_worker_threads(static_cast<uint32_t>(pool_.workers()));
  l->set_max_joints(65535);
  l->set_max_message_bytes(options_.max_message_bytes);
  resp->set_sessions(static_cast<uint32_t>(sessions_.count()));
  resp->set_rigs(static_cast<uint32_t>(rigs_.count()));
  return Done(ctx, "GetServerInfo", absl::OkStatus());
}

grpc::ServerReadReactor<v1::UploadRigRequest>* Service::UploadRig(grpc::CallbackServerContext*,
                                                                  v1::UploadRigResponse* resp) {
  return new UploadCall(this, resp);
}

void Service::DescribeRig(StoredRig& stored, v1::RigInfo& info, bool with_joints) {
  info.set_rig_id(stored.id);
  FillRigInfo(*stored.rig, info);
  if (!with_joints) info.clear_joints();
  info.set_session_count(static_cast<uint32_t>(stored.sessions.load()));
  info.set_resident_bytes(stored.TotalBytes());
  std::lock_guard lock(stored.prep_mu);
  const int64_t now = NowMs();
  for (const auto& [key, p] : stored.preparations) {
    v1::Preparation* out = info.add_preparations();
    out->set_key(key);
    out->set_progress(p->progress.load());
    out->set_done(p->done);
    if (!p->status.ok()) out->set_error(std::string(p->status.message()));
    if (p->result) out->set_bytes(p->result->Bytes());
    out->set_seconds(double((p->done ? p->finished_ms : now) - p->started_ms) / 1000);
  }
}

grpc::ServerUnaryReactor* Service::GetRig(grpc::CallbackServerContext* ctx,
                                          const v1::GetRigRequest* req, v1::RigInfo* resp) {
  auto stored = rigs_.Find(req->rig_id(), NowMs());
  if (!stored) {
    return Done(ctx, "GetRig", absl::NotFoundError(absl::StrCat("rig_id: no rig \"", req->rig_id(), "\"")));
  }
  DescribeRig(*stored, *resp, true);
  return Done(ctx, "GetRig", absl::OkStatus());
}

grpc::ServerUnaryReactor* Service::ListRigs(grpc::CallbackServerContext* ctx,
                                            const v1::ListRigsRequest*,
                                            v1::ListRigsResponse* resp) {
  for (const auto& stored : rigs_.List()) {
    DescribeRig(*stored, *resp->add_rigs(), false);  // listing stays small; GetRig has the joints
  }
  return Done(ctx, "ListRigs", absl::OkStatus());
}

grpc::ServerUnaryReactor* Service::DeleteRig(grpc::CallbackServerContext* ctx,
                                             const v1::DeleteRigRequest* req,
                                             v1::DeleteRigResponse*) {
  const absl::Status st = rigs_.Delete(req->rig_id());
  UpdateGauges();
  return Done(ctx, "DeleteRig", st);
}

grpc::ServerUnaryReactor* Service::CreateSession(grpc::CallbackServerContext*,
                                                 const v1::CreateSessionRequest* req,
                                                 v1::Session* resp) {
  return new CreateCall(this, req, resp);
}

absl::Status Service::CreateSessionImpl(const v1::CreateSessionRequest& request, v1::Session& response) {
  const v1::CreateSessionRequest* req = &request;
  if (req->rig_id().empty()) return absl::InvalidArgumentError("rig_id: required");
  auto stored = rigs_.Find(req->rig_id(), NowMs());
  if (!stored) {
    return absl::NotFoundError(absl::StrCat("rig_id: no rig \"", req->rig_id(), "\"; upload it first"));
  }
  auto config = DeformerConfigFromProto(req->deformer());
  if (!config.ok()) return config.status();
  v1::Backend backend = req->backend();
  if (backend != v1::BACKEND_AUTO && backend != v1::BACKEND_CPU && backend != v1::BACKEND_GPU) {
    return absl::InvalidArgumentError(absl::StrCat("backend: unknown value ", backend));
  }
  if (backend == v1::BACKEND_GPU && gpu_ == nullptr) {
    return absl::FailedPreconditionError(
        "backend: BACKEND_GPU requested but this server has no GPU backend; use BACKEND_AUTO "
        "or BACKEND_CPU");
  }

  if (req->encoding() != v1::OUTPUT_ENCODING_FLOAT32 &&
      req->encoding() != v1::OUTPUT_ENCODING_FLOAT16) {
    return absl::InvalidArgumentError(absl::StrCat("encoding: unknown value ", req->encoding()));
  }
  const Rig& rig = *stored->rig;
  if (req->expected_joint_names_size() > 0) {
    if (static_cast<size_t>(req->expected_joint_names_size()) != rig.joint_count()) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected_joint_names: ", req->expected_joint_names_size(),
                       " names but the rig has ", rig.joint_count(), " joints"));
    }
    for (int j = 0; j < req->expected_joint_names_size(); ++j) {
      if (req->expected_joint_names(j) != rig.skeleton.names[j]) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected_joint_names[", j, "]: \"", req->expected_joint_names(j),
                         "\" but the rig's joint ", j, " is \"", rig.skeleton.names[j], "\""));
      }
    }
  }
  if (sessions_.count() >= sessions_.max_sessions()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sessions: ", sessions_.count(), " open, the limit is ", sessions_.max_sessions(),
        " (--max-sessions); close sessions you no longer use"));
  }
  const MethodInfo& method = *FindMethod(config->method);
  if (backend == v1::BACKEND_GPU && !method.device_stage) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backend: method ", std::string(method.name), " has no GPU implementation yet; use "
        "BACKEND_AUTO or BACKEND_CPU"));
  }
  std::shared_ptr<const Prepared> prepared;
  if (method.prepare != nullptr) {
    auto p = stored->GetOrPrepare(method, *config, &pool_, NowMs());
    if (!p.ok()) return p.status();
    prepared = std::move(*p);
  }
  auto deformer = method.create(stored->rig, std::move(prepared), *config);
  if (!deformer.ok()) return deformer.status();
  // Methods with a device stage run it on the GPU under AUTO when there is one.
  const DeviceStage stage = (*deformer)->device_stage();
  if (backend == v1::BACKEND_GPU && stage.kind == DeviceStageKind::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backend: method ", std::string(method.name), " has no GPU implementation yet; use "
        "BACKEND_AUTO or BACKEND_CPU"));
  }
  bool on_gpu = gpu_ != nullptr && stage.kind != DeviceStageKind::kNone && backend != v1::BACKEND_CPU;
  std::unique_ptr<gpu::GpuSession> gpu_session;
  if (on_gpu) {
    auto s = CreateGpuSession(*stored, **deformer, stage, config->implicit);
    if (s.ok()) {
      gpu_session = std::move(*s);
      (*deformer)->RunsOnDevice();  // frees the CPU-only scratch before it is counted below
    } else if (backend == v1::BACKEND_AUTO && s.status().code() == absl::StatusCode::kFailedPrecondition) {
      on_gpu = false;  // the device program cannot run this rig: AUTO runs it on the CPU
    } else {
      return s.status();
    }
  }

  auto session = std::make_unique<Session>();
  session->rig = stored;
  session->config = req->deformer();
  session->method = config->method;
  session->backend = on_gpu ? v1::BACKEND_GPU : v1::BACKEND_CPU;
  session->gpu = std::move(gpu_session);
  session->device_states = on_gpu && stage.device_vertex_states;
  session->encoding = req->encoding();
  session->created_ms = NowMs();
  session->last_used_ms = session->created_ms;
  session->deformer = std::move(*deformer);
  session->device_params.resize(session->deformer->device_param_count());
  // Size the scratch now so that frames allocate nothing.
  const size_t joints = rig.joint_count();
  session->pose.rotations.reserve(4 * joints);
  session->pose.translations.reserve(3 * joints);
  session->pose.scales.reserve(joints);
  if (session->encoding != v1::OUTPUT_ENCODING_FLOAT32) session->positions.resize(rig.positions.size());
  session->state_bytes = sizeof(Session) + session->deformer->StateBytes() + 32 * joints +
                         4 * session->positions.size();
  auto added = sessions_.Add(std::move(session));
  if (!added.ok()) return added.status();
  (*added)->ToProto(response, options_.session_idle_ttl_seconds);
  UpdateGauges();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<gpu::GpuSession>> Service::CreateGpuSession(StoredRig& stored, const Deformer& deformer,
                                                                         const DeviceStage& stage,
                                                                         const ImplicitConfig& implicit) {
  auto gpu_rig = stored.OnGpu(*gpu_);
  if (!gpu_rig.ok()) return gpu_rig.status();
  gpu::SessionSpec spec;
  spec.with_rest = stage.with_rest;
  spec.implicit = implicit;
  switch (stage.kind) {
    case DeviceStageKind::kDqs: spec.method = gpu::GpuMethod::kDqs; break;
    case DeviceStageKind::kCage: spec.method = gpu::GpuMethod::kCage; break;
    case DeviceStageKind::kCageThenLbs: spec.method = gpu::GpuMethod::kCageThenLbs; break;
    case DeviceStageKind::kCageThenDqs: spec.method = gpu::GpuMethod::kCageThenDqs; break;
    case DeviceStageKind::kImplicit: spec.method = gpu::GpuMethod::kImplicit; break;
    case DeviceStageKind::kElasticImplicit: spec.method = gpu::GpuMethod::kElasticImplicit; break;
    default: spec.method = gpu::GpuMethod::kLbs; break;
  }
  if (spec.method == gpu::GpuMethod::kImplicit || spec.method == gpu::GpuMethod::kElasticImplicit) {
    auto model = stored.ModelOnGpu(*gpu_, *gpu_rig, stage);
    if (!model.ok()) return model.status();
    spec.model = std::move(*model);
  } else if (!stage.device_data_key.empty()) {
    auto c = stored.CoefficientsOnGpu(*gpu_, **gpu_rig, deformer, stage.device_data_key);
    if (!c.ok()) return c.status();
    spec.coefficients = std::move(*c);
  }
  return gpu_->CreateSession(std::move(*gpu_rig), spec);
}

grpc::ServerUnaryReactor* Service::GetSession(grpc::CallbackServerContext* ctx,
                                              const v1::GetSessionRequest* req,
                                              v1::Session* resp) {
  auto s = sessions_.Find(req->session_id(), NowMs());
  if (!s) {
    return Done(ctx, "GetSession", absl::NotFoundError(absl::StrCat(
                                       "session_id: no session \"", req->session_id(),
                                       "\" (closed or expired)")));
  }
  s->ToProto(*resp, options_.session_idle_ttl_seconds);
  return Done(ctx, "GetSession", absl::OkStatus());
}

grpc::ServerUnaryReactor* Service::ListSessions(grpc::CallbackServerContext* ctx,
                                                const v1::ListSessionsRequest*,
                                                v1::ListSessionsResponse* resp) {
  for (const auto& s : sessions_.List()) s->ToProto(*resp->add_sessions(), options_.session_idle_ttl_seconds);
  return Done(ctx, "ListSessions", absl::OkStatus());
}

grpc::ServerUnaryReactor* Service::CloseSession(grpc::CallbackServerContext* ctx,
                                                const v1::CloseSessionRequest* req,
                                                v1::CloseSessionResponse* resp) {
  auto frames = sessions_.Close(req->session_id());
  if (frames.ok()) resp->set_frames(*frames);
  UpdateGauges();
  return Done(ctx, "CloseSession", frames.status());
}

grpc::ServerUnaryReactor* Service::Deform(grpc::CallbackServerContext*,
                                          const v1::DeformRequest* req, v1::DeformResponse* resp) {
  return new DeformCall(this, req, resp);
}

grpc::ServerBidiReactor<v1::DeformRequest, v1::DeformResponse>* Service::StreamDeform(
    grpc::CallbackServerContext*) {
  return new StreamCall(this);
}

grpc::ServerWriteReactor<v1::DeformClipResponse>* Service::DeformClip(
    grpc::CallbackServerContext*, const v1::DeformClipRequest* req) {
  return new ClipCall(this, req);
}

void Service::RunFrame(const v1::DeformRequest& req, v1::DeformResponse& resp, PendingFrame& pending,
                       FrameDone done, void* context) {
  resp.set_frame(req.frame());
  resp.clear_posed_cage();  // streams reuse the response: nothing of the last frame may remain
  resp.clear_rest_cage();
  resp.clear_joints();
  resp.clear_vertex_states();
  std::shared_ptr<Session> session = sessions_.Find(req.session_id(), NowMs());
  if (!session) {
    return done(context, absl::NotFoundError(absl::StrCat("session_id: no session \"", req.session_id(),
                                                          "\" (closed or expired)")));
  }
  std::unique_lock lock(session->mu);
  absl::Status st;
  if (req.has_pose()) st = PoseFromProto(req.pose(), session->pose);
  if (st.ok()) st = CageFramesFromProto(req.cages(), session->cages);
  if (st.ok() && req.has_posed_cage()) st = CagePoseFromProto(req.posed_cage(), session->posed_cage, "posed_cage");
  if (!st.ok()) return done(context, st);
  if (req.reset()) session->deformer->Reset();
  const FrameInput frame{req.has_pose() ? &session->pose : nullptr, session->cages,
                         req.has_posed_cage() ? &session->posed_cage : nullptr};
  const uint32_t vertices = static_cast<uint32_t>(session->rig->rig->vertex_count());
  resp.set_vertex_count(vertices);
  resp.set_encoding(session->encoding);
  const auto t0 = std::chrono::steady_clock::now();

  if (session->gpu) {
    // GPU: everything but the per-vertex stage here, the vertices in the device's next batch.
    st = session->deformer->DeviceFrame(frame, session->device_params);
    if (st.ok()) st = FillExtras(*session, req.outputs(), resp);
    if (!st.ok()) return done(context, st);
    const bool f16 = session->encoding == v1::OUTPUT_ENCODING_FLOAT16;
    std::string* out = resp.mutable_positions();
    out->resize(size_t{3} * vertices * (f16 ? 2 : 4));
    uint8_t* states = nullptr;  // made on the device, written with the positions
    if (session->device_states && req.outputs().vertex_states()) {
      resp.mutable_vertex_states()->resize(vertices);
      states = reinterpret_cast<uint8_t*>(resp.mutable_vertex_states()->data());
    }
    pending = {this, session, &resp, t0, done, context};
    gpu_->Submit(*session->gpu, session->device_params, out->data(),
                 f16 ? gpu::OutputFormat::kFloat16 : gpu::OutputFormat::kFloat32, &Service::GpuFrameDone,
                 &pending, states);
    return;
  }

  st = DeformInto(*session, frame, *resp.mutable_positions());
  if (st.ok()) st = FillExtras(*session, req.outputs(), resp);
  resp.set_compute_ns(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()));
  lock.unlock();
  done(context, st);
}

absl::Status Service::FillExtras(Session& session, const v1::FrameOutputs& want, v1::DeformResponse& resp) {
  // A device that makes the vertex states writes them itself (RunFrame).
  const bool states = want.vertex_states() && !session.device_states;
  if (!want.posed_cage() && !want.rest_cage() && !want.joints() && !states) return absl::OkStatus();
  FrameExtras extras;
  if (states) extras.vertex_states = &session.extra_states;
  if (want.posed_cage()) extras.posed_cage = &session.extra_posed_cage;
  if (want.rest_cage()) extras.rest_cage = &session.extra_rest_cage;
  if (want.joints()) extras.joints = &session.extra_joints;
  if (auto st = session.deformer->Extras(extras); !st.ok()) return st;
  auto pack = [](const std::vector<float>& v, std::string* out) {
    out->assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  if (want.posed_cage()) pack(session.extra_posed_cage, resp.mutable_posed_cage());
  if (want.rest_cage()) pack(session.extra_rest_cage, resp.mutable_rest_cage());
  if (want.joints()) pack(session.extra_joints, resp.mutable_joints());
  if (states) {
    resp.mutable_vertex_states()->assign(reinterpret_cast<const char*>(session.extra_states.data()),
                                         session.extra_states.size());
  }
  return absl::OkStatus();
}

void Service::GpuFrameDone(void* arg, const absl::Status& status) {
  PendingFrame& p = *static_cast<PendingFrame*>(arg);
  const auto dt = std::chrono::steady_clock::now() - p.start;
  if (status.ok()) {
    p.response->set_compute_ns(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count()));
    p.session->frames.fetch_add(1, std::memory_order_relaxed);
    p.service->metrics_.Frame(p.session->method, v1::BACKEND_GPU, std::chrono::duration<double>(dt).count());
  }
  std::shared_ptr<Session> keep = std::move(p.session);  // released after the callback
  p.done(p.context, status);
}

absl::Status Service::DeformInto(Session& session, const FrameInput& frame, std::string& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t floats = session.rig->rig->positions.size();
  if (session.gpu) {  // batch jobs on a GPU session: wait for the frame's batch
    if (auto st = session.deformer->DeviceFrame(frame, session.device_params); !st.ok()) return st;
    const bool f16 = session.encoding == v1::OUTPUT_ENCODING_FLOAT16;
    out.resize(floats * (f16 ? 2 : 4));
    struct Latch {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      absl::Status status;
    } latch;
    gpu_->Submit(*session.gpu, session.device_params, out.data(),
                 f16 ? gpu::OutputFormat::kFloat16 : gpu::OutputFormat::kFloat32,
                 [](void* l, const absl::Status& s) {
                   auto& latch = *static_cast<Latch*>(l);
                   std::lock_guard lock(latch.mu);
                   latch.status = s;
                   latch.done = true;
                   latch.cv.notify_all();
                 },
                 &latch);
    std::unique_lock lock(latch.mu);
    latch.cv.wait(lock, [&] { return latch.done; });
    if (!latch.status.ok()) return latch.status;
    session.frames.fetch_add(1, std::memory_order_relaxed);
    session.last_used_ms = NowMs();
    metrics_.Frame(session.method, session.backend,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return absl::OkStatus();
  }
  std::span<float> target;
  if (session.encoding == v1::OUTPUT_ENCODING_FLOAT32) {
    out.resize(floats * sizeof(float));
    target = std::span<float>(reinterpret_cast<float*>(out.data()), floats);
  } else {
    target = session.positions;
  }
  if (auto st = session.deformer->Deform(frame, target, &pool_); !st.ok()) return st;
  if (session.encoding == v1::OUTPUT_ENCODING_FLOAT16) {
    out.resize(floats * sizeof(uint16_t));
    FloatsToHalves(session.positions.data(), reinterpret_cast<uint16_t*>(out.data()), floats);
  }
  session.frames.fetch_add(1, std::memory_order_relaxed);
  session.last_used_ms = NowMs();
  metrics_.Frame(session.method, session.backend,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return absl::OkStatus();
}

bool Service::Register(Drainable* s) {
  std::lock_guard lock(streams_mu_);
  streams_.insert(s);
  metrics_.streams().Set(static_cast<double>(streams_.size()));
  return !draining_;
}

void Service::Unregister(Drainable* s) {
  std::lock_guard lock(streams_mu_);
  streams_.erase(s);
  metrics_.streams().Set(static_cast<double>(streams_.size()));
}

void Service::BeginDrain() {
  std::lock_guard lock(streams_mu_);
  draining_ = true;
  // Drain may finish a stream, whose OnDone may run on this thread and re-enter Unregister
  // (hence the recursive mutex): iterate over a copy.
  const std::vector<Drainable*> open(streams_.begin(), streams_.end());
  for (Drainable* s : open) {
    if (streams_.contains(s)) s->Drain();
  }
}

size_t Service::open_streams() const {
  std::lock_guard lock(streams_mu_);
  return streams_.size();
}

}  // namespace sinew::server
