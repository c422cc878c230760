// UpdateSession (a session's parameters, live), GetSessionState and SetSessionState (snapshots).
// The session's deformer does the method's part (Deformer::SetParams, SaveState, LoadState);
// here: which session, whether the change or the state fits it, and the frame numbering.
#include <optional>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/deformer/pipeline.h"
#include "server/convert.h"
#include "server/echo_id.h"
#include "server/service.h"

namespace sinew::server {

template <class Request, class Response>
class Service::PoolCall final : public grpc::ServerUnaryReactor {
 public:
  using Impl = absl::Status (Service::*)(const Request&, Response&, const std::string& tenant);
  PoolCall(Service* svc, const char* rpc, Impl impl, const Request* req, Response* resp, std::string tenant)
      : svc_(svc), rpc_(rpc), impl_(impl), req_(req), resp_(resp), tenant_(std::move(tenant)) {
    svc_->active_calls_.fetch_add(1);
    svc_->pool_.Submit(&PoolCall::Run, this);
  }
  void OnDone() override {
    svc_->active_calls_.fetch_sub(1);
    delete this;
  }

 private:
  static void Run(void* arg) {
    auto* self = static_cast<PoolCall*>(arg);
    self->Finish(self->svc_->ToGrpc(self->rpc_, (self->svc_->*self->impl_)(*self->req_, *self->resp_, self->tenant_)));
  }
  Service* svc_;
  const char* rpc_;
  Impl impl_;
  const Request* req_;
  Response* resp_;
  const std::string tenant_;
};

namespace {

absl::Status NoSession(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("session_id: no session \"", EchoId(id), "\" (closed or expired)"));
}

// The session's method's preparation key ("" for methods without one); for a pipeline its
// stages' methods and keys ("pipeline elastic-implicit[implicit ops=contact] > lbs"), so that a
// state is refused by a pipeline of other stages or preparations, as by another method.
std::string KeyOf(const Session& s, const DeformerConfig& config) {
  if (s.method != nullptr) return s.method->prepare != nullptr ? PreparationKey(*s.method, config) : std::string();
  std::string key = "pipeline";
  for (size_t k = 0; k < config.stages.size(); ++k) {
    const DeformerConfig& stage = config.stages[k];
    absl::StrAppend(&key, k == 0 ? " " : " > ", stage.method);
    if (const MethodInfo* m = FindMethod(stage.method); m != nullptr && m->prepare != nullptr) {
      absl::StrAppend(&key, "[", PreparationKey(*m, stage), "]");
    }
  }
  return key;
}

}  // namespace

absl::Status Service::UpdateSessionImpl(const v1::UpdateSessionRequest& req, v1::Session& resp,
                                        const std::string& tenant) {
  auto s = sessions_.Find(req.session_id(), NowMs(), tenant);
  if (!s) return NoSession(req.session_id());
  if (s->method == nullptr) {
    return absl::UnimplementedError("deformer: a pipeline's parameters are fixed when its session is created");
  }
  auto config = DeformerConfigFromProto(req.deformer());
  if (!config.ok()) return config.status();
  if (!config->stages.empty() || config->method != s->method->name) {
    return absl::FailedPreconditionError(absl::StrCat("deformer.method: the session's method is ",
                                                      std::string(s->method->name),
                                                      " and stays so; create a new session for another"));
  }
  if (s->backend == v1::BACKEND_GPU) {
    std::lock_guard lock(s->mu);
    if (!s->deformer->device_stage().params_per_frame) {
      return absl::FailedPreconditionError(
          "session_id: this GPU session's parameters are fixed on the device; create a new session with the new ones");
    }
  }
  v1::DeformerConfig before_proto;
  {
    std::lock_guard lock(s->config_mu);
    before_proto = s->config;
  }
  auto before = DeformerConfigFromProto(before_proto);
  if (!before.ok()) return before.status();
  const std::string was = KeyOf(*s, *before), now = KeyOf(*s, *config);
  if (was != now) {
    return absl::FailedPreconditionError(absl::StrCat(
        "deformer: these parameters need another per-rig preparation (\"", now, "\" instead of the session's \"", was,
        "\"); only parameters outside it change live: create a new session for them"));
  }
  std::lock_guard lock(s->mu);
  // Closed (CloseSession, the idle TTL) while this call waited for the lock: answered as closed,
  // not OK for a session that is gone.
  if (!s->open.load()) return NoSession(req.session_id());
  // What the deformer runs with, read again under s->mu (which every change holds): another
  // UpdateSession may have changed it since the read above, and the undo below must restore this
  // one (until 2026-12-07 it restored the older parameters while the session named the newer).
  {
    std::lock_guard config_lock(s->config_mu);
    before_proto = s->config;
  }
  before = DeformerConfigFromProto(before_proto);
  if (!before.ok()) return before.status();
  // A batch decided at its start whether it owns the session's history (stateful sessions) or
  // shares the session with other frames: parameters that change that (pbs's jiggle, swing-
  // twist's unwrap_twist) wait for it to end (until 2026-12-03 they let a second writer into a
  // batch's history, or left a batch owning a stateless session).
  if (const bool stateful = PipelineStateful(*config); stateful != s->stateful && s->batches.load() > 0) {
    return absl::AbortedError(absl::StrCat("deformer: these parameters make the session ", stateful ? "" : "not ",
                                           "history-dependent, and a DeformClip batch is playing it; change them "
                                           "once the batch has ended"));
  }
  if (auto st = s->deformer->SetParams(*config); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("deformer: method ", std::string(s->method->name), ": ", st.message()));
  }
  // A restart reopens the session with its new parameters (--state-dir). Where they cannot be
  // kept the change is undone and refused: applied and answered OK (until 2026-12-07, a line in
  // the log), a restart would have brought back the old ones unannounced. They are the session's
  // (GetSession, Session.deformer) only once kept; no frame runs meanwhile (s->mu is held).
  if (auto st = KeepSession(*s, &req.deformer()); !st.ok()) {
    if (auto undone = s->deformer->SetParams(*before); !undone.ok()) {  // what it ran with: accepted before
      std::fprintf(stderr, "sinew-server: session %s: its old parameters back: %s\n", s->id.c_str(),
                   std::string(undone.message()).c_str());
    }
    return absl::Status(st.code(), absl::StrCat("--state-dir: the new parameters could not be kept (", st.message(),
                                                "); the session keeps its old ones"));
  }
  s->stateful = PipelineStateful(*config);
  s->CountState();
  {
    std::lock_guard config_lock(s->config_mu);
    s->config = req.deformer();
  }
  s->ToProto(resp, options_.session_idle_ttl_seconds);
  return absl::OkStatus();
}

absl::Status Service::GetSessionStateImpl(const v1::GetSessionStateRequest& req, v1::SessionState& resp,
                                          const std::string& tenant) {
  auto s = sessions_.Find(req.session_id(), NowMs(), tenant);
  if (!s) return NoSession(req.session_id());
  std::lock_guard lock(s->mu);
  // Closed (CloseSession, the idle TTL) while this call waited for the lock: answered as closed,
  // as UpdateSession and SetSessionState answer, not with the state of a session that is gone.
  if (!s->open.load()) return NoSession(req.session_id());
  auto config = DeformerConfigFromProto(s->config);
  if (!config.ok()) return config.status();
  resp.set_rig_id(s->rig->id);
  resp.set_method(static_cast<v1::Method>(s->method ? s->method->id : 0));
  resp.set_preparation_key(KeyOf(*s, *config));
  resp.set_backend(s->backend);
  if (s->has_frame) resp.set_last_frame(s->last_frame);
  if (!s->stateful) return absl::OkStatus();
  absl::StatusOr<std::string> bytes;
  if (s->state_on_device) {
    // The device's copy, once the session's frames queued before this call are done.
    auto resident = gpu_->ReadState(*s->gpu);
    if (!resident.ok()) return resident.status();
    // A frame left the device's state unusable and none has started again since: the session's
    // next frame starts from rest (GpuFrames::Run), and so does the saved state.
    const uint64_t lost = s->device_lost.load(std::memory_order_acquire);
    if (lost != 0 && lost >= s->device_restarted) s->deformer->Reset();
    bytes = s->deformer->SaveDeviceState(*resident);
  } else {
    bytes = s->deformer->SaveState();
  }
  if (!bytes.ok()) return bytes.status();
  resp.set_method_state(std::move(*bytes));
  return absl::OkStatus();
}

absl::Status Service::SetSessionStateImpl(const v1::SetSessionStateRequest& req, v1::Session& resp,
                                          const std::string& tenant) {
  auto s = sessions_.Find(req.session_id(), NowMs(), tenant);
  if (!s) return NoSession(req.session_id());
  std::lock_guard lock(s->mu);
  if (!s->open.load()) return NoSession(req.session_id());  // closed while this call waited
  return SetStateLocked(*s, req.state(), resp);
}

absl::Status Service::SetStateLocked(Session& session, const v1::SessionState& state, v1::Session& resp) {
  Session* s = &session;
  if (s->history_owner.load() != nullptr) {
    return HistoryHeld(s->id, "set its state once the batch ends");
  }
  auto config = DeformerConfigFromProto(s->config);
  if (!config.ok()) return config.status();
  if (state.rig_id() != s->rig->id) {
    return absl::FailedPreconditionError(
        absl::StrCat("state.rig_id: saved on rig ", EchoId(state.rig_id()), "; this session's rig is ", s->rig->id));
  }
  const uint32_t method = s->method ? s->method->id : 0;
  if (static_cast<uint32_t>(state.method()) != method) {
    return absl::FailedPreconditionError(absl::StrCat("state.method: saved by method ", v1::Method_Name(state.method()),
                                                      "; this session's is ",
                                                      v1::Method_Name(static_cast<v1::Method>(method))));
  }
  if (const std::string key = KeyOf(*s, *config); state.preparation_key() != key) {
    return absl::FailedPreconditionError(absl::StrCat("state.preparation_key: saved with \"",
                                                      EchoId(state.preparation_key()), "\"; this session's is \"",
                                                      key, "\""));
  }
  if (state.backend() != s->backend) {
    return absl::FailedPreconditionError(absl::StrCat("state.backend: saved on ", v1::Backend_Name(state.backend()),
                                                      "; this session runs on ", v1::Backend_Name(s->backend),
                                                      " (states continue bit for bit on the same kind only)"));
  }
  if (s->stateful && state.method_state().empty()) {
    return absl::FailedPreconditionError(
        "state.method_state: empty: saved by a stateless session; this one is stateful (its parameters differ, "
        "e.g. pbs's jiggle)");
  }
  if (s->stateful && s->state_on_device) {
    auto resident = gpu_->ReadState(*s->gpu);  // sized as the device's, after the session's frames
    if (!resident.ok()) return resident.status();
    if (auto st = s->deformer->LoadDeviceState(state.method_state(), *resident); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("state.method_state: ", st.message()));
    }
    if (auto st = gpu_->WriteState(*s->gpu, *resident); !st.ok()) {
      // The deformer took the state's flags; the device may hold none, some or all of its floats.
      s->deformer->Reset();
      return absl::Status(st.code(), absl::StrCat(st.message(), "; the state was not set: the session starts again "
                                                                "from rest at its next frame"));
    }
    s->device_restarted = ++s->device_submitted;  // a state to go on from: no restart for earlier overflows
  } else if (s->stateful) {
    // A played history comes with its last frame, as GetSessionState gives it: without it the
    // session would answer its next frame from_rest (which a checkpointing client takes for a
    // lost history) and a stop would not keep the history (until 2026-12-07 taken so). Played
    // means other than what the method saves after a Reset; a refusal puts the session's own
    // state back.
    std::optional<std::string> own;
    if (!state.has_last_frame()) {
      auto bytes = s->deformer->SaveState();
      if (!bytes.ok()) return bytes.status();
      own = std::move(*bytes);
    }
    if (auto st = s->deformer->LoadState(state.method_state()); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("state.method_state: ", st.message()));
    }
    if (own) {
      const auto loaded = s->deformer->SaveState();
      s->deformer->Reset();
      const auto rest = s->deformer->SaveState();
      if (!loaded.ok() || !rest.ok() || *loaded != *rest) {
        if (const absl::Status back = s->deformer->LoadState(*own); !back.ok()) {
          s->deformer->Reset();
          s->has_frame = false;
          return absl::InternalError(absl::StrCat("the session's own state did not load back (", back.message(),
                                                  "); it starts again from rest at its next frame"));
        }
        return absl::InvalidArgumentError(
            "state.last_frame: unset, but state.method_state holds a played history: give the last frame it "
            "followed, as GetSessionState does");
      }
    }
  } else if (!state.method_state().empty()) {
    return absl::FailedPreconditionError(
        "state.method_state: saved by a stateful session; this one is stateless (its parameters differ)");
  }
  s->has_frame = state.has_last_frame();
  s->last_frame = state.last_frame();
  s->ToProto(resp, options_.session_idle_ttl_seconds);
  return absl::OkStatus();
}

size_t Service::KeepStates() {
  if (!state_.enabled()) return 0;
  std::vector<PendingState> pending;
  {
    std::lock_guard lock(pending_mu_);
    pending.swap(pending_states_);
  }
  size_t kept = 0;
  for (const std::shared_ptr<Session>& s : sessions_.All()) {
    if (!s->stateful) continue;
    v1::SessionState state;
    // A state restored at this start and not yet applied (its method still prepared) is still
    // the session's history, unless the session has applied a frame since.
    auto waiting = std::find_if(pending.begin(), pending.end(),
                                [&](const PendingState& p) { return p.session.lock() == s; });
    bool from_pending = false;
    if (waiting != pending.end()) {
      std::lock_guard lock(s->mu);
      from_pending = !s->has_frame.load();
    }
    if (from_pending) {
      state = waiting->state;
    } else if (!s->has_frame.load()) {
      continue;  // no frame yet (or since a reset): it starts from rest anyway
    } else {
      v1::GetSessionStateRequest req;
      req.set_session_id(s->id);
      if (auto st = GetSessionStateImpl(req, state, s->tenant); !st.ok()) {
        std::fprintf(stderr, "sinew-server: --state-dir: session %s: its state is not kept (%s: %s); it starts again "
                     "from rest\n", s->id.c_str(), absl::StatusCodeToString(st.code()).c_str(),
                     std::string(st.message()).c_str());
        continue;
      }
    }
    if (auto st = state_.SaveSessionState(s->id, state.SerializeAsString()); !st.ok()) {
      std::fprintf(stderr, "sinew-server: --state-dir: session %s: %s\n", s->id.c_str(), std::string(st.message()).c_str());
      continue;
    }
    ++kept;
  }
  return kept;
}

bool Service::RestoreState(const std::shared_ptr<Session>& s, v1::SessionState state, bool first_try,
                           int64_t since_ms) {
  absl::Status st;
  {
    std::lock_guard lock(s->mu);
    if (!s->open.load()) {  // closed or expired meanwhile
      metrics_.KeptState(/*restored=*/false);
      return false;
    }
    if (!first_try && s->has_frame.load()) {
      std::fprintf(stderr, "sinew-server: --state-dir: session %s: a frame came before its method was ready for the "
                   "state kept at the last stop; it goes on from that frame, without it\n", s->id.c_str());
      metrics_.KeptState(/*restored=*/false);
      return false;
    }
    v1::Session ignored;
    st = SetStateLocked(*s, state, ignored);
    // Counted under the session's lock: a client that sees the history sees it counted.
    if (st.ok()) metrics_.KeptState(/*restored=*/true);
  }
  if (st.ok()) return true;
  if (st.code() == absl::StatusCode::kUnavailable) {  // the session serves a fallback while its method prepares
    const int64_t ttl_ms = int64_t(options_.session_idle_ttl_seconds) * 1000;
    if (ttl_ms > 0 && NowMs() - since_ms > ttl_ms) {
      std::fprintf(stderr, "sinew-server: --state-dir: session %s: its method did not serve within --session-idle-ttl "
                   "of the start (%s); the state kept at the last stop is dropped\n", s->id.c_str(),
                   std::string(st.message()).c_str());
      metrics_.KeptState(/*restored=*/false);
      return false;
    }
    std::lock_guard lock(pending_mu_);
    pending_states_.push_back({s, std::move(state), since_ms});
    return false;
  }
  std::fprintf(stderr, "sinew-server: --state-dir: session %s: the state kept at the last stop was refused (%s: %s); "
               "it starts again from rest\n", s->id.c_str(), absl::StatusCodeToString(st.code()).c_str(),
               std::string(st.message()).c_str());
  metrics_.KeptState(/*restored=*/false);
  return false;
}

void Service::ApplyPendingStates() {
  std::vector<PendingState> pending;
  {
    std::lock_guard lock(pending_mu_);
    if (pending_states_.empty()) return;
    pending.swap(pending_states_);
  }
  for (PendingState& p : pending) {
    if (const std::shared_ptr<Session> s = p.session.lock()) {
      RestoreState(s, std::move(p.state), /*first_try=*/false, p.since_ms);
    } else {
      metrics_.KeptState(/*restored=*/false);  // its session closed meanwhile
    }
  }
}

grpc::ServerUnaryReactor* Service::UpdateSession(grpc::CallbackServerContext* ctx, const v1::UpdateSessionRequest* req,
                                                 v1::Session* resp) {
  if (draining()) return Done(ctx, "UpdateSession", ShuttingDown());
  auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "UpdateSession", tenant.status());
  return new PoolCall<v1::UpdateSessionRequest, v1::Session>(this, "UpdateSession", &Service::UpdateSessionImpl, req,
                                                             resp, std::move(*tenant));
}

grpc::ServerUnaryReactor* Service::GetSessionState(grpc::CallbackServerContext* ctx,
                                                   const v1::GetSessionStateRequest* req, v1::SessionState* resp) {
  auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "GetSessionState", tenant.status());
  return new PoolCall<v1::GetSessionStateRequest, v1::SessionState>(this, "GetSessionState",
                                                                    &Service::GetSessionStateImpl, req, resp,
                                                                    std::move(*tenant));
}

grpc::ServerUnaryReactor* Service::SetSessionState(grpc::CallbackServerContext* ctx,
                                                   const v1::SetSessionStateRequest* req, v1::Session* resp) {
  if (draining()) return Done(ctx, "SetSessionState", ShuttingDown());
  auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "SetSessionState", tenant.status());
  return new PoolCall<v1::SetSessionStateRequest, v1::Session>(this, "SetSessionState",
                                                               &Service::SetSessionStateImpl, req, resp,
                                                               std::move(*tenant));
}

}  // namespace sinew::server
