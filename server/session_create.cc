// CreateSession: the method and its parameters from the registry, the shared preparation, the
// backend (GPU when asked or under AUTO, for methods with a device stage), the session's scratch.
#include <atomic>
#include <cstdio>
#include <functional>

#include "absl/strings/str_cat.h"
#include "core/deformer/pipeline.h"
#include "server/convert.h"
#include "server/echo_id.h"
#include "server/fallback_deformer.h"
#include "server/service.h"

namespace sinew::server {

// CreateSession runs on its own threads (Service::creates_): a preparation can take seconds, and
// neither gRPC's threads nor the frame workers are held while it runs or is waited for.

class Service::CreateCall final : public grpc::ServerUnaryReactor {
 public:
  CreateCall(Service* svc, const v1::CreateSessionRequest* req, v1::Session* resp, std::string tenant)
      : svc_(svc), req_(req), resp_(resp), tenant_(std::move(tenant)) {
    svc_->active_calls_.fetch_add(1);
    svc_->creates_->Submit(&CreateCall::Run, this);  // not the frame pool (Service::creates_)
  }
  void OnDone() override {
    svc_->active_calls_.fetch_sub(1);
    delete this;
  }
  void OnCancel() override { cancelled_.store(true); }

 private:
  static void Run(void* arg) {
    auto* self = static_cast<CreateCall*>(arg);
    absl::Status st = self->svc_->CreateSessionImpl(*self->req_, *self->resp_, self->tenant_);
    if (st.ok() && self->cancelled_.load()) {
      // The caller is gone (its deadline passed while a pipeline's stage prepared, or it
      // cancelled): nobody knows the session's id, which until 2026-12-03 stayed until its idle
      // timeout and counted against --max-sessions and the tenant's quota.
      (void)self->svc_->sessions_.Close(self->resp_->session_id(), self->tenant_);
      self->svc_->UpdateGauges();
      st = absl::CancelledError("CreateSession: the caller cancelled or its deadline passed; the session was closed");
    }
    self->Finish(self->svc_->ToGrpc("CreateSession", st));
  }
  std::atomic<bool> cancelled_{false};
  Service* svc_;
  const v1::CreateSessionRequest* req_;
  v1::Session* resp_;
  const std::string tenant_;
};

absl::Status Service::CreateSessionImpl(const v1::CreateSessionRequest& request, v1::Session& response,
                                        const std::string& tenant, const std::string& restore_id,
                                        const v1::CreateSessionRequest* record) {
  const v1::CreateSessionRequest* req = &request;
  if (req->rig_id().empty()) return absl::InvalidArgumentError("rig_id: required");
  // Held until the session is registered (or this fails): DeleteRig answers FAILED_PRECONDITION
  // meanwhile, as it does for open sessions, however long the preparation takes.
  const RigClaim claim = rigs_.Acquire(req->rig_id(), NowMs(), tenant);
  if (!claim) {
    return absl::NotFoundError(absl::StrCat("rig_id: no rig \"", EchoId(req->rig_id()), "\"; upload it first"));
  }
  const std::shared_ptr<StoredRig>& stored = claim.rig();
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

  if (!v1::OutputEncoding_IsValid(req->encoding())) {
    return absl::InvalidArgumentError(absl::StrCat("encoding: unknown value ", req->encoding()));
  }
  const bool delta = req->encoding() == v1::OUTPUT_ENCODING_DELTA;
  const double max_error = req->max_error() == 0 ? 1e-4 : req->max_error();
  const uint32_t key_interval = req->key_frame_interval() == 0 ? 30 : req->key_frame_interval();
  if (!delta && (req->max_error() != 0 || req->key_frame_interval() != 0)) {
    return absl::InvalidArgumentError(
        "max_error, key_frame_interval: only for encoding OUTPUT_ENCODING_DELTA (leave them 0)");
  }
  if (!(max_error >= 1e-7 && max_error <= 1e-2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_error: ", req->max_error(), " is outside [1e-7, 1e-2] (a fraction of the rig's diagonal)"));
  }
  if (key_interval > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("key_frame_interval: ", key_interval, " is over 100000 frames"));
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
            absl::StrCat("expected_joint_names[", j, "]: \"", EchoId(req->expected_joint_names(j)),
                         "\" but the rig's joint ", j, " is \"", rig.skeleton.names[j], "\""));
      }
    }
  }
  // Both limits before the preparation: a refused session must not leave a preparation behind
  // (until 2026-12-01 the tenant's max_sessions was asked only after it, so a tenant at its
  // quota could still have the server prepare, and keep, one per parameter set it sent).
  // A place is held from here to Add (SessionManager::Reservation): concurrent creates count it.
  auto place = sessions_.Reserve(tenant, tokens_.Quotas(tenant).max_sessions);
  if (!place.ok()) return place.status();
  // One method, or a pipeline of them (DeformerConfigFromProto checked the names).
  const MethodInfo* method = config->stages.empty() ? FindMethod(config->method) : nullptr;
  const std::string what = method ? absl::StrCat("method ", std::string(method->name)) : "this pipeline";
  if (backend == v1::BACKEND_GPU && method != nullptr && !method->device_stage) {
    return absl::FailedPreconditionError(
        absl::StrCat("backend: ", what, " has no GPU implementation yet; use BACKEND_AUTO or BACKEND_CPU"));
  }
  // A GPU session of a method with a fallback opens only once its preparation is done: one
  // opened again at a restart prepares now (until 2026-12-03 it was refused UNAVAILABLE below at
  // every restart, and its record renamed *.bad).
  const bool serve_fallback = restore_id.empty() || backend != v1::BACKEND_GPU;
  auto deformer = CreateDeformerOn(stored, *config, serve_fallback, tenant, /*restoring=*/!restore_id.empty());
  if (!deformer.ok() && deformer.status().code() == absl::StatusCode::kCancelled) {
    // The preparation this call ran or waited for was cancelled: by the drain (UNAVAILABLE, as
    // any new work then: the client goes to another server) or by CancelPreparation (ABORTED:
    // asking again starts it again).
    if (draining()) return ShuttingDown();
    return absl::AbortedError(absl::StrCat(what, ": its preparation was cancelled (CancelPreparation) before it was "
                                           "done; create the session again to start it again"));
  }
  if (!deformer.ok()) return deformer.status();
  // Methods with a device stage run it on the GPU under AUTO when there is one.
  const DeviceStage stage = (*deformer)->device_stage();
  if (backend == v1::BACKEND_GPU && stage.kernel.empty() && !(*deformer)->produced_by().empty()) {
    // The method's GPU stage needs its prepared data; until then only the CPU fallback runs.
    return absl::UnavailableError(absl::StrCat(
        "backend: ", what, " runs on the GPU once its preparation is done (see RigInfo.preparations); until then "
        "use BACKEND_AUTO or BACKEND_CPU, which serve its fallback ", std::string((*deformer)->produced_by()),
        " at once"));
  }
  if (backend == v1::BACKEND_GPU && stage.kernel.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("backend: ", what, " has no GPU implementation yet; use BACKEND_AUTO or BACKEND_CPU"));
  }
  bool on_gpu = gpu_ != nullptr && !stage.kernel.empty() && backend != v1::BACKEND_CPU;
  std::unique_ptr<gpu::GpuSession> gpu_session;
  if (on_gpu) {
    // Device programs read their method's parameters (a pipeline's single stage's).
    const auto& params = config->stages.size() == 1 ? config->stages[0].params : config->params;
    auto s = CreateGpuSession(*stored, **deformer, stage, params);
    if (s.ok()) {
      gpu_session = std::move(*s);
      (*deformer)->RunsOnDevice();  // frees the CPU-only scratch before it is counted below
    } else if (backend == v1::BACKEND_AUTO && (s.status().code() == absl::StatusCode::kFailedPrecondition ||
                                               s.status().code() == absl::StatusCode::kResourceExhausted)) {
      on_gpu = false;  // the device program cannot run this rig, or the device is full: AUTO runs it on the CPU
    } else {
      return s.status();
    }
  }

  auto session = std::make_unique<Session>();
  session->rig = stored;
  session->tenant = tenant;
  session->config = req->deformer();
  session->method = method;
  session->stateful = PipelineStateful(*config);
  session->cost_follows_motion = PipelineCostFollowsMotion(*config);
  session->backend = on_gpu ? v1::BACKEND_GPU : v1::BACKEND_CPU;
  session->gpu = std::move(gpu_session);
  session->runner = on_gpu ? static_cast<FrameBackend*>(gpu_frames_.get()) : &cpu_frames_;
  session->device_states = on_gpu && stage.device_vertex_states;
  session->state_on_device = on_gpu && stage.state_on_device;
  session->encoding = req->encoding();
  session->latest_pose_wins = req->latest_pose_wins();
  for (const DeformerConfig& stage : config->stages.empty() ? std::vector<DeformerConfig>{*config} : config->stages) {
    if (const MethodInfo* m = FindMethod(stage.method); m != nullptr && m->prepare != nullptr) {
      session->preparation_keys.push_back(PreparationKey(*m, stage));
    }
  }
  if (delta) {
    session->max_error = max_error;
    session->key_frame_interval = key_interval;
    session->grid = wire::DeltaGrid(rig.bbox_min.data(), rig.bbox_max.data(), max_error);
  }
  session->created_ms = NowMs();
  session->last_used_ms = session->created_ms;
  session->deformer = std::move(*deformer);
  session->device_params.resize(session->deformer->device_param_count());
  // Size the scratch now so that frames allocate nothing.
  const size_t joints = rig.joint_count();
  session->pose.rotations.reserve(4 * joints);
  session->pose.translations.reserve(3 * joints);
  session->pose.scales.reserve(joints);
  if (session->encoding == v1::OUTPUT_ENCODING_FLOAT16) session->positions.resize(rig.positions.size());
  session->CountState();
  // Until 2026-12-07 a session reopened where its history ran kept that backend in its record:
  // an AUTO session that had run on a GPU was recorded BACKEND_GPU at its next UpdateSession, and
  // a later start without a GPU left it closed, "kept for a later start", for good.
  session->request = record != nullptr ? *record : request;
  session->request.clear_deformer();
  auto added = sessions_.Add(std::move(session), tokens_.Quotas(tenant).max_sessions, restore_id, &*place);
  if (!added.ok()) return added.status();
  if (restore_id.empty()) {
    // Kept before the client hears of it: a crash after this answer cannot lose the session.
    if (auto st = KeepSession(**added); !st.ok()) {
      (void)sessions_.Close((*added)->id, tenant);
      return st;
    }
  }
  (*added)->ToProto(response, options_.session_idle_ttl_seconds);
  UpdateGauges();
  return absl::OkStatus();
}

absl::Status Service::KeepSession(const Session& s, const v1::DeformerConfig* config) {
  if (!state_.enabled()) return absl::OkStatus();
  v1::CreateSessionRequest record = s.request;
  if (config != nullptr) {
    *record.mutable_deformer() = *config;
  } else {
    std::lock_guard lock(s.config_mu);
    *record.mutable_deformer() = s.config;
  }
  std::lock_guard lock(s.record_mu);
  if (s.removed) return absl::OkStatus();  // closed meanwhile: its record is gone and stays gone
  return state_.SaveSession(s.id, s.tenant, record.SerializeAsString());
}

namespace {
// The history KeepStates wrote for session `id` at the last stop, if any. A file that cannot be
// read or parsed is reported (and removed when it does not parse): the session starts from rest.
std::optional<v1::SessionState> ReadKeptState(const StateDir& dir, const std::string& id, Metrics& metrics) {
  std::string problem;
  std::optional<v1::SessionState> kept;
  if (auto bytes = dir.ReadSessionState(id, &problem)) {
    kept.emplace();
    if (!kept->ParseFromString(*bytes)) {
      problem = "its kept state is not a SessionState";
      kept.reset();
      (void)dir.RemoveSessionState(id);
    }
  }
  if (!problem.empty()) {
    std::fprintf(stderr, "sinew-server: --state-dir: session %s: %s; it starts again from rest\n", id.c_str(),
                 problem.c_str());
    metrics.KeptState(/*restored=*/false);
  }
  return kept;
}
}  // namespace

absl::Status Service::ReopenSession(const std::string& id, const std::string& tenant, const std::string& bytes,
                                    std::optional<v1::SessionState> kept) {
  v1::CreateSessionRequest request;
  if (!request.ParseFromString(bytes)) return absl::DataLossError("not a serialized CreateSessionRequest");
  // A record kept before unknown fields were refused (2026-12-07) may hold some, which the
  // session ran without: it opens again as it ran, without them (said once), not refused.
  const size_t recorded = request.ByteSizeLong();
  request.DiscardUnknownFields();
  if (request.ByteSizeLong() != recorded) {
    std::fprintf(stderr, "sinew-server: --state-dir: session %s: its record held fields this server does not know, "
                 "which it ran without; opened again without them\n", id.c_str());
  }
  v1::Session ignored;
  absl::Status st;
  bool other_backend = false;
  if (kept && kept->backend() != request.backend()) {
    // On the kind of backend its history ran on (AUTO places again at each start, and a history
    // continues on the same kind only); else as recorded, from rest.
    v1::CreateSessionRequest there = request;
    there.set_backend(kept->backend());
    st = CreateSessionImpl(there, ignored, tenant, id, /*record=*/&request);
    if (!st.ok()) {
      std::fprintf(stderr, "sinew-server: --state-dir: session %s: cannot open on %s, where its history ran (%s); "
                   "opened as recorded, from rest\n", id.c_str(), v1::Backend_Name(kept->backend()).c_str(),
                   std::string(st.message()).c_str());
      kept.reset();
      other_backend = true;
      st = CreateSessionImpl(request, ignored, tenant, id);
    }
  } else {
    st = CreateSessionImpl(request, ignored, tenant, id);
  }
  if (st.ok()) {
    if (other_backend) metrics_.KeptState(/*restored=*/false);
    // Removed before it is applied (used once: a later crash must not bring it back).
    if (auto removed = state_.RemoveSessionState(id); !removed.ok() && kept) {
      std::fprintf(stderr, "sinew-server: --state-dir: session %s: %s; its kept state is not restored\n", id.c_str(),
                   std::string(removed.message()).c_str());
      metrics_.KeptState(/*restored=*/false);
    } else if (kept) {
      if (auto s = sessions_.Find(id, NowMs(), tenant)) {
        RestoreState(s, std::move(*kept), /*first_try=*/true, NowMs());
      } else {
        metrics_.KeptState(/*restored=*/false);
      }
    }
  }
  // Its rig kept but not loaded at this start (no room under --max-store-bytes): kept too.
  if (st.code() == absl::StatusCode::kNotFound && state_.HasRig(request.rig_id())) {
    return absl::UnavailableError(absl::StrCat("its rig ", EchoId(request.rig_id()), " was not loaded at this start"));
  }
  // Kept for a later start (not set aside): so is its rig, if loaded (never evicted meanwhile).
  if (!st.ok() && !StateDir::SetAside(st)) rigs_.KeepForKeptSessions(request.rig_id());
  return st;
}

size_t Service::RestoreSessions() {
  size_t opened = 0;
  for (const std::string& problem :
       state_.LoadSessions([&](const std::string& id, const std::string& tenant, const std::string& bytes) {
         // A kept history not applied is counted dropped once (sinew_kept_states_total): unreadable
         // (ReadKeptState), refused or given up (ReopenSession, RestoreState), or set aside with its
         // record; one left on disk for a later start (a record kept for it) is not.
         std::optional<v1::SessionState> kept = ReadKeptState(state_, id, metrics_);
         const bool had_kept = kept.has_value();
         const absl::Status st = ReopenSession(id, tenant, bytes, std::move(kept));
         if (st.ok()) ++opened;
         if (!st.ok() && !StateDir::SetAside(st)) {  // kept for a later start (LoadSessions)
           v1::CreateSessionRequest request;
           (void)request.ParseFromString(bytes);  // parsed by ReopenSession already
           std::lock_guard lock(unopened_mu_);
           unopened_[id] = UnopenedSession{tenant, request.rig_id()};
         }
         if (had_kept && StateDir::SetAside(st)) metrics_.KeptState(/*restored=*/false);
         return st;
       })) {
    std::fprintf(stderr, "sinew-server: --state-dir: %s\n", problem.c_str());
  }
  UpdateGauges();
  return opened;
}

namespace {
// A preparation run in the background for sessions that serve a fallback meanwhile.
struct PrepareTask {
  // Not held while queued: a rig deleted or evicted with its sessions gone is freed at once, and
  // its queued preparation ends without running (until 2026-12-03 each queued task kept its rig,
  // up to --max-rig-bytes, until a background worker reached it, and then prepared it for nobody).
  std::weak_ptr<StoredRig> rig;
  const MethodInfo* method;
  DeformerConfig config;
  ThreadPool* pool;
  CacheFolder cache;
  std::function<void()> finished;  // counts the task out (Service::StopBackground waits for it)
  static void Run(void* arg) {
    std::unique_ptr<PrepareTask> t(static_cast<PrepareTask*>(arg));
    if (const std::shared_ptr<StoredRig> rig = t->rig.lock()) {
      auto p = rig->GetOrPrepare(*t->method, t->config, t->pool, NowMs(), t->cache);
      if (!p.ok() && p.status().code() != absl::StatusCode::kCancelled) {  // its sessions keep serving the fallback
        std::fprintf(stderr, "sinew-server: rig %.12s: preparing %s failed: %s\n", rig->id.c_str(),
                     std::string(t->method->name).c_str(), std::string(p.status().message()).c_str());
      }
    }
    t->finished();
  }
};
}  // namespace

absl::StatusOr<std::unique_ptr<Deformer>> Service::CreateDeformerOn(const std::shared_ptr<StoredRig>& stored_rig,
                                                                    const DeformerConfig& config, bool serve_fallback,
                                                                    const std::string& tenant, bool restoring) {
  StoredRig& stored = *stored_rig;
  if (!config.stages.empty()) {
    std::vector<std::unique_ptr<Deformer>> stages;
    for (size_t k = 0; k < config.stages.size(); ++k) {
      auto d = CreateDeformerOn(stored_rig, config.stages[k], /*serve_fallback=*/false, tenant, restoring);
      if (!d.ok()) return InStage(d.status(), k);
      stages.push_back(std::move(*d));
    }
    return MakePipeline(stored.rig, config, std::move(stages));
  }
  const MethodInfo& method = *FindMethod(config.method);
  std::shared_ptr<const Prepared> prepared;
  // Refusals that depend on the rig come before the preparation is asked for: kept as its failed
  // entry, a refused joint list or cage index was reported to every later session asking the same
  // key (which does not name every parameter), until 2026-12-03.
  if (method.check != nullptr) {
    if (auto st = method.check(*stored.rig, config); !st.ok()) return st;
  }
  if (method.prepare != nullptr && serve_fallback && !method.fallback.empty()) {
    const std::string key = PreparationKey(method, config);
    auto done = stored.PreparedIfDone(key);
    if (!done.ok()) {  // failed before: kept, not retried
      return absl::Status(done.status().code(),
                          absl::StrCat("method ", std::string(method.name), ": its preparation \"", key,
                                       "\" failed: ", done.status().message(),
                                       " (CancelPreparation forgets the failure so that the next session retries)"));
    }
    if (*done == nullptr) {
      // Not done: serve the fallback now, prepare in the background (once).
      const MethodInfo* fallback = FindMethod(method.fallback);
      if (fallback == nullptr || fallback->prepare != nullptr) {
        return absl::InternalError(absl::StrCat("method ", std::string(method.name), ": its fallback ",
                                                std::string(method.fallback), " is not a method without preparation"));
      }
      // Bounded: each queued task is a preparation of seconds to minutes on the background
      // workers; a client opening sessions with ever new parameters queued them without end
      // (until 2026-12-03). Counted under background_mu_ with the reservation, so that
      // concurrent creates cannot all pass the check. Not a session opened again at a start
      // (--state-dir): acknowledged before, it is not new work, and the restart reopens its
      // sessions one after another while their preparations queue (until 2026-12-07 those past the
      // limit stayed closed, NOT_FOUND to their clients, their records kept for a later start).
      std::unique_lock background(background_mu_);
      const size_t limit = restoring ? 0 : options_.max_background_preparations;
      if (limit > 0 && background_tasks_ >= limit && !stored.Listed(key)) {  // it would queue one more
        return absl::ResourceExhaustedError(absl::StrCat(
            "method ", std::string(method.name), ": ", background_tasks_,
            " preparations are running or waiting in the background (--max-background-preparations ", limit,
            "); send it again once some are done (GetRig lists them) or cancel some (CancelPreparation)"));
      }
      if (stored.Reserve(key, NowMs(), tenant)) {
        ++background_tasks_;
        background.unlock();
        auto finished = [this] {
          std::lock_guard lock(background_mu_);
          if (--background_tasks_ == 0) background_cv_.notify_all();
        };
        background_.Submit(&PrepareTask::Run,
                           new PrepareTask{stored_rig, &method, config, &background_, PreparedCache(), finished});
      } else {
        background.unlock();  // listed already: no task (and the lock not held over the fallback's creation)
      }
      auto fb = fallback->create(stored.rig, nullptr, DeformerConfig(std::string(method.fallback)));
      if (!fb.ok()) return fb.status();
      return MakeFallbackDeformer(stored_rig, method, config, std::move(*fb), method.fallback);
    }
  }
  if (method.prepare != nullptr) {  // shared by the rig's sessions
    // Its parallel work on the preparations' workers, not the frame workers (until 2026-12-03
    // the frame pool: a pipeline's or an implicit session's preparation delayed other sessions'
    // frames for its seconds).
    auto p = stored.GetOrPrepare(method, config, &background_, NowMs(), PreparedCache(), &tenant);
    if (!p.ok()) return p.status();
    prepared = std::move(*p);
  }
  return method.create(stored.rig, std::move(prepared), config);
}

absl::StatusOr<std::unique_ptr<gpu::GpuSession>> Service::CreateGpuSession(StoredRig& stored, const Deformer& deformer,
                                                                         const DeviceStage& stage,
                                                                         std::shared_ptr<const MethodParams> params) {
  auto s = CreateGpuSessionOnce(stored, deformer, stage, params);
  if (s.ok() || s.status().code() != absl::StatusCode::kResourceExhausted) return s;
  // Until 2026-12-02 a rig's device copies stayed until the rig went, whether or not a session
  // used them: a long-running server filled its devices with the models of closed sessions and
  // then refused every GPU session.
  if (FreeUnheldDeviceCopies() == 0) return s;
  return CreateGpuSessionOnce(stored, deformer, stage, std::move(params));
}

absl::StatusOr<std::unique_ptr<gpu::GpuSession>> Service::CreateGpuSessionOnce(StoredRig& stored,
                                                                             const Deformer& deformer,
                                                                             const DeviceStage& stage,
                                                                             std::shared_ptr<const MethodParams> params) {
  auto kernel = gpu::KernelByName(stage.kernel);
  if (!kernel.ok()) return kernel.status();
  auto gpu_rig = stored.OnGpu(*gpu_);
  if (!gpu_rig.ok()) return gpu_rig.status();
  gpu::SessionSpec spec;
  spec.method = *kernel;
  spec.with_rest = stage.with_rest;
  spec.params = std::move(params);
  spec.frame_floats = uint32_t(deformer.device_param_count());
  if (gpu::KernelHasModel(spec.method)) {
    auto model = stored.ModelOnGpu(*gpu_, *gpu_rig, stage);
    if (!model.ok()) return model.status();
    spec.model = std::move(*model);
  } else if (gpu::KernelHasCoefficients(spec.method)) {
    auto c = stored.CoefficientsOnGpu(*gpu_, **gpu_rig, deformer, stage.device_data_key);
    if (!c.ok()) return c.status();
    spec.coefficients = std::move(*c);
  }
  return gpu_->CreateSession(std::move(*gpu_rig), spec);
}

grpc::ServerUnaryReactor* Service::CreateSession(grpc::CallbackServerContext* ctx,
                                                 const v1::CreateSessionRequest* req,
                                                 v1::Session* resp) {
  if (draining()) return Done(ctx, "CreateSession", ShuttingDown());
  auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "CreateSession", tenant.status());
  return new CreateCall(this, req, resp, std::move(*tenant));
}

}  // namespace sinew::server
