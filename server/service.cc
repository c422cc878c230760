// The adapter: handler entry points that need no reactor of their own (rigs, sessions), gauges,
// housekeeping and drain. The reactors are in upload_call.cc, session_create.cc and
// frame_calls.cc; GetServerInfo in service_info.cc.
#include "server/service.h"

#include <cstdio>
#include "server/echo_id.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "server/convert.h"

namespace sinew::server {

int64_t NowMs() {
  // A steady clock, anchored to the wall clock at its first use: the idle timeouts that compare
  // these times (sessions, shared memory regions, rigs' last use) must not jump with the wall
  // clock (until 2026-12-03 an NTP step or a resumed VM past --session-idle-ttl expired every
  // session at once, streaming ones too, and a step back turned expiry off); the times the API
  // shows (created_unix_ms, last_used_unix_ms) stay Unix times, as of the anchor.
  using namespace std::chrono;
  static const auto anchor = std::make_pair(system_clock::now(), steady_clock::now());
  return duration_cast<milliseconds>(anchor.first.time_since_epoch() + (steady_clock::now() - anchor.second)).count();
}

namespace {

// An error message travels in the call's trailers, which clients bound (gRPC's default: 8 KiB
// of metadata): a longer one (a 1 MB joint name echoed by "is not unique") reached the client as
// a metadata-size error instead of the status (until 2026-12-03). Longer ones are cut, at a
// UTF-8 character boundary, saying how long they were.
constexpr size_t kMaxStatusMessageBytes = 4096;

std::string BoundedMessage(absl::string_view m) {
  if (m.size() <= kMaxStatusMessageBytes) return std::string(m);
  size_t cut = kMaxStatusMessageBytes - 64;
  while (cut > 0 && (static_cast<unsigned char>(m[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return absl::StrCat(m.substr(0, cut), "... (the message is ", m.size(), " bytes; cut)");
}

grpc::Status GrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), BoundedMessage(s.message()));
}

}  // namespace

Service::Service(const ServerOptions& options, Metrics& metrics, ThreadPool& pool,
                 gpu::GpuBackend* gpu)
    : options_(options),
      metrics_(metrics),
      pool_(pool),
      gpu_(gpu),
      cpu_frames_(pool, metrics),
      gpu_frames_(gpu ? std::make_unique<GpuFrames>(*gpu, metrics, [this] { return FreeUnheldDeviceCopies(); })
                      : nullptr),
      rigs_(options.max_store_bytes),
      sessions_(options.max_sessions, int64_t{options.session_idle_ttl_seconds} * 1000),
      shared_memory_(options.max_shared_memory_bytes, int64_t{options.session_idle_ttl_seconds} * 1000),
      // Creates wait on other creates' preparations of the same key (GetOrPrepare): a pool as
      // small as the frame pool let a few slow creates hold up every other, an instant LBS one too.
      creates_(std::make_unique<ThreadPool>(std::max(2u, std::thread::hardware_concurrency()))),
      uploads_(2),
      // Sized by --worker-threads as the frame pool is (until 2026-12-07 by the host's hardware
      // threads: a container given 4 of a 64-core node ran 64 background preparations at once,
      // their working memory outside --max-prepared-bytes).
      background_(std::max<size_t>(1, WorkerThreads(options))) {
  // A closed or expired session is no longer reopened by a restart (--state-dir). A record that
  // cannot be removed (a failing disk) is said in the log: the session reopens at the next start
  // (until 2026-12-07 silently).
  sessions_.set_on_removed([this](Session& s) {
    std::lock_guard lock(s.record_mu);
    s.removed = true;
    if (const absl::Status st = state_.RemoveSession(s.id); !st.ok()) {
      std::fprintf(stderr, "sinew-server: --state-dir: session %s is closed, but its record was not removed (%s): "
                   "a restart reopens it\n", s.id.c_str(), std::string(st.message()).c_str());
    }
  });
}

Service::~Service() = default;

uint64_t Service::FreeUnheldDeviceCopies() {
  uint64_t freed = 0;
  for (const auto& rig : rigs_.List()) freed += rig->DropUnheldDeviceCopies();
  if (freed > 0) {
    std::fprintf(stderr, "sinew-server: gpu: freed %llu bytes of device copies no session holds\n",
                 (unsigned long long)freed);
  }
  return freed;
}

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
  metrics_.shared_memory_bytes().Set(static_cast<double>(shared_memory_.mapped_bytes()));
}

size_t Service::WorkerThreads(const ServerOptions& options) {
  return options.worker_threads > 0 ? options.worker_threads : std::max(1u, std::thread::hardware_concurrency());
}

void Service::CancelIdleUploads(int64_t now_ms) {
  if (options_.upload_idle_seconds == 0) return;
  const int64_t limit = int64_t{options_.upload_idle_seconds} * 1000;
  std::lock_guard lock(watch_mu_);
  for (auto& [call, w] : upload_watch_) {
    if (w.cancelled || now_ms - w.last_ms < limit) continue;
    w.cancelled = true;
    std::fprintf(stderr, "sinew-server: an UploadRig call received nothing for %u s (--upload-idle-timeout): "
                 "cancelled\n", options_.upload_idle_seconds);
    w.ctx->TryCancel();
  }
}

void Service::Housekeeping() {
  const int64_t now = NowMs();
  CancelIdleUploads(now);
  sessions_.ExpireIdle(now);
  shared_memory_.ExpireIdle(now);
  ApplyPendingStates();
  TrimPreparations();
  UpdateGauges();
  if (gpu_) {
    for (const gpu::DeviceInfo& d : gpu_->Devices()) metrics_.Device(d);
  }
}

size_t Service::TrimPreparations() {
  // Until 2026-12-01 a rig kept every preparation until DeleteRig: one per parameter set any
  // session asked for (a pbs tet mesh per voxel size, implicit fields per operator choice), so a
  // client could grow the server without bound, quota or not.
  // Under budget (every second, mostly) it costs a sum over the rigs, nothing more.
  const auto rigs = rigs_.List();
  uint64_t held = 0;
  for (const auto& r : rigs) held += r->prepared_bytes.load();
  if (held <= options_.max_prepared_bytes) return 0;
  absl::flat_hash_map<const StoredRig*, absl::flat_hash_set<std::string>> in_use;
  for (const auto& s : sessions_.All()) in_use[s->rig.get()].insert(s->preparation_keys.begin(), s->preparation_keys.end());
  struct Candidate {
    std::shared_ptr<StoredRig> rig;
    UnusedPreparation prep;
  };
  std::vector<Candidate> unused;
  for (const auto& r : rigs) {
    for (UnusedPreparation& p : r->Unused(in_use[r.get()])) unused.push_back({r, std::move(p)});
  }
  std::sort(unused.begin(), unused.end(),
            [](const Candidate& a, const Candidate& b) { return a.prep.last_asked_ms < b.prep.last_asked_ms; });
  size_t dropped = 0;
  for (const Candidate& c : unused) {
    if (held <= options_.max_prepared_bytes) break;
    const size_t freed = c.rig->DropIfUnused(c.prep.key, c.prep.last_asked_ms);
    if (freed == 0) continue;
    held -= std::min<uint64_t>(held, freed);
    ++dropped;
    std::fprintf(stderr, "sinew-server: rig %.12s: dropped preparation %s (%zu bytes; no open session uses it, "
                 "--max-prepared-bytes %llu)\n", c.rig->id.c_str(), c.prep.key.c_str(), freed,
                 (unsigned long long)options_.max_prepared_bytes);
  }
  return dropped;
}

absl::StatusOr<Rig> Service::RigFromBytes(const std::string& bytes) const {
  RigLimits limits;
  limits.max_vertices = options_.max_vertices;
  return RigFromUpload(bytes, limits);
}

absl::StatusOr<size_t> Service::RestoreRigs(const std::string& dir) {
  auto opened = StateDir::Open(dir);
  if (!opened.ok()) return opened.status();
  state_ = std::move(*opened);
  size_t loaded = 0;
  const int64_t now = NowMs();
  for (const std::string& problem : state_.LoadRigs([&](const std::string& id, const std::string& bytes,
                                                        const std::vector<std::string>& tenants) -> absl::Status {
         auto rig = RigFromBytes(bytes);
         if (!rig.ok()) return rig.status();
         // No eviction here: every rig on disk fits the budget it was kept under, and one that
         // does not (a lower --max-store-bytes) is reported rather than evicting a rig whose
         // sessions are restored next.
         auto stored = rigs_.Insert(id, std::move(*rig), now, tenants.front(), nullptr);
         if (!stored.ok()) return stored.status();
         bool had = false;
         for (const std::string& t : tenants) {
           rigs_.Adopt(id, now, t, &had);
           rigs_.Saved(id, t);  // kept already: these files
         }
         (*stored)->bytes_kept = true;
         ++loaded;
         return absl::OkStatus();
       })) {
    std::fprintf(stderr, "sinew-server: --state-dir: %s\n", problem.c_str());
  }
  UpdateGauges();
  return loaded;
}

absl::Status Service::KeepRig(const std::string& id, const std::string* bytes) {
  if (!state_.enabled()) return absl::OkStatus();
  // The tenants are read and written under one lock, so that of two uploads (or a delete)
  // changing them at once, the later write has the later list: written from unordered snapshots,
  // an older list could land last and a restart lose a tenant's claim.
  std::lock_guard lock(keep_rig_mu_[absl::Hash<std::string>{}(id) % keep_rig_mu_.size()]);
  const std::vector<std::string> tenants = rigs_.Tenants(id);
  if (tenants.empty()) return state_.RemoveRig(id);
  return bytes ? state_.SaveRig(id, *bytes, tenants) : state_.SaveTenants(id, tenants);
}

std::optional<absl::Status> Service::DeleteRigKeptOnDisk(const std::string& id, const std::string& tenant) {
  // Until 2026-12-07 answered NOT_FOUND with the files left: the rig the client was told is gone
  // came back at the next start with room.
  if (!state_.HasRig(id)) return std::nullopt;
  // Under the upload's lock too: an upload takes the file's tenants (Adopt) under quota_mu_, and
  // one between this check and the write below would give the deleting tenant the rig back.
  std::lock_guard quota(quota_mu_);
  std::lock_guard lock(keep_rig_mu_[absl::Hash<std::string>{}(id) % keep_rig_mu_.size()]);
  if (!rigs_.Tenants(id).empty()) return std::nullopt;  // loaded meanwhile (an upload): the store answers
  std::vector<std::string> tenants = state_.ReadTenants(id);
  const auto it = std::find(tenants.begin(), tenants.end(), tenant);
  if (it == tenants.end()) return std::nullopt;
  if (absl::Status held = KeptSessionsHold(id, tenant, tenants); !held.ok()) return held;
  tenants.erase(it);
  return tenants.empty() ? state_.RemoveRig(id) : state_.SaveTenants(id, tenants);
}

absl::Status Service::KeptSessionsHold(const std::string& rig_id, const std::string& tenant,
                                       const std::vector<std::string>& tenants) const {
  // As a loaded rig's delete is refused while the tenant's open sessions use it (RigStore::
  // Delete). Until 2026-12-08 it went, and the next start set those sessions aside.
  if (std::find(tenants.begin(), tenants.end(), tenant) == tenants.end()) return absl::OkStatus();
  std::lock_guard lock(unopened_mu_);
  bool others = false;
  for (const auto& [id, s] : unopened_) {
    if (s.rig_id != rig_id) continue;
    if (s.tenant == tenant) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rig_id: session ", EchoId(id), ", kept for a later start, uses it (CloseSession closes it)"));
    }
    others = true;
  }
  if (others && tenants.size() == 1) {
    return absl::FailedPreconditionError("rig_id: another tenant's session, kept for a later start, uses it");
  }
  return absl::OkStatus();
}

std::optional<absl::StatusOr<uint64_t>> Service::CloseSessionKeptOnDisk(const std::string& id,
                                                                        const std::string& tenant) {
  // The caller's to close: until 2026-12-08 the close answered NOT_FOUND and left the record, and
  // the session the client had closed opened again at the next start. Another tenant's is not
  // found, as an open one is. Only ids this start left unopened: a session closed or expired a
  // moment ago (its record not yet removed) or a client's path is not found.
  std::lock_guard lock(unopened_mu_);
  const auto it = unopened_.find(id);
  if (it == unopened_.end() || it->second.tenant != tenant) return std::nullopt;
  if (absl::Status st = state_.RemoveSession(id); !st.ok()) return st;
  const std::string rig = it->second.rig_id;
  unopened_.erase(it);
  // Its rig, kept from eviction for such sessions (KeepForKeptSessions), may go when none is left.
  if (std::none_of(unopened_.begin(), unopened_.end(), [&](const auto& u) { return u.second.rig_id == rig; })) {
    rigs_.NoKeptSessions(rig);
  }
  return uint64_t{0};  // it served no frame at this start
}

grpc::ServerUnaryReactor* Service::GetRig(grpc::CallbackServerContext* ctx,
                                          const v1::GetRigRequest* req, v1::RigInfo* resp) {
  const auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "GetRig", tenant.status());
  auto stored = rigs_.Find(req->rig_id(), NowMs(), *tenant);
  if (!stored) {
    return Done(ctx, "GetRig", absl::NotFoundError(absl::StrCat("rig_id: no rig \"", EchoId(req->rig_id()), "\"")));
  }
  DescribeRig(*stored, *resp, true, *tenant);
  return Done(ctx, "GetRig", absl::OkStatus());
}

grpc::ServerUnaryReactor* Service::CancelPreparation(grpc::CallbackServerContext* ctx,
                                                     const v1::CancelPreparationRequest* req, v1::Preparation* resp) {
  const auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "CancelPreparation", tenant.status());
  auto stored = rigs_.Find(req->rig_id(), NowMs(), *tenant);
  if (!stored) {
    return Done(ctx, "CancelPreparation",
                absl::NotFoundError(absl::StrCat("rig_id: no rig \"", EchoId(req->rig_id()), "\"")));
  }
  const int64_t now = NowMs();
  const absl::Status st =
      stored->CancelPreparation(req->key(), *tenant, [&](const Preparation& p) { DescribePreparation(p, now, *resp); });
  return Done(ctx, "CancelPreparation", st);
}

grpc::ServerUnaryReactor* Service::ListRigs(grpc::CallbackServerContext* ctx,
                                            const v1::ListRigsRequest*,
                                            v1::ListRigsResponse* resp) {
  const auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "ListRigs", tenant.status());
  for (const auto& stored : rigs_.List(*tenant)) {
    DescribeRig(*stored, *resp->add_rigs(), false, *tenant);  // listing stays small; GetRig has the joints
  }
  return Done(ctx, "ListRigs", absl::OkStatus());
}

grpc::ServerUnaryReactor* Service::DeleteRig(grpc::CallbackServerContext* ctx,
                                             const v1::DeleteRigRequest* req,
                                             v1::DeleteRigResponse*) {
  const auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "DeleteRig", tenant.status());
  absl::Status st = KeptSessionsHold(req->rig_id(), *tenant, rigs_.Tenants(req->rig_id()));
  if (st.ok()) st = rigs_.Delete(req->rig_id(), *tenant);
  if (st.ok()) {
    st = KeepRig(req->rig_id(), nullptr);
  } else if (st.code() == absl::StatusCode::kNotFound) {
    if (auto on_disk = DeleteRigKeptOnDisk(req->rig_id(), *tenant)) st = *on_disk;
  }
  UpdateGauges();
  return Done(ctx, "DeleteRig", st);
}

grpc::ServerUnaryReactor* Service::GetSession(grpc::CallbackServerContext* ctx,
                                              const v1::GetSessionRequest* req,
                                              v1::Session* resp) {
  const auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "GetSession", tenant.status());
  auto s = sessions_.Find(req->session_id(), NowMs(), *tenant);
  if (!s) {
    return Done(ctx, "GetSession", absl::NotFoundError(absl::StrCat(
                                       "session_id: no session \"", EchoId(req->session_id()),
                                       "\" (closed or expired)")));
  }
  s->ToProto(*resp, options_.session_idle_ttl_seconds);
  return Done(ctx, "GetSession", absl::OkStatus());
}

grpc::ServerUnaryReactor* Service::ListSessions(grpc::CallbackServerContext* ctx,
                                                const v1::ListSessionsRequest*,
                                                v1::ListSessionsResponse* resp) {
  const auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "ListSessions", tenant.status());
  for (const auto& s : sessions_.List(*tenant)) s->ToProto(*resp->add_sessions(), options_.session_idle_ttl_seconds);
  return Done(ctx, "ListSessions", absl::OkStatus());
}

grpc::ServerUnaryReactor* Service::CloseSession(grpc::CallbackServerContext* ctx,
                                                const v1::CloseSessionRequest* req,
                                                v1::CloseSessionResponse* resp) {
  const auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "CloseSession", tenant.status());
  auto frames = sessions_.Close(req->session_id(), *tenant);
  if (frames.status().code() == absl::StatusCode::kNotFound) {
    if (auto on_disk = CloseSessionKeptOnDisk(req->session_id(), *tenant)) frames = std::move(*on_disk);
  }
  if (frames.ok()) resp->set_frames(*frames);
  UpdateGauges();
  return Done(ctx, "CloseSession", frames.status());
}

grpc::ServerUnaryReactor* Service::RegisterSharedMemory(grpc::CallbackServerContext* ctx,
                                                        const v1::RegisterSharedMemoryRequest* req,
                                                        v1::SharedMemoryRegion* resp) {
  if (draining()) return Done(ctx, "RegisterSharedMemory", ShuttingDown());
  const auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "RegisterSharedMemory", tenant.status());
  auto id = shared_memory_.Register(req->name(), req->bytes(), *tenant, NowMs(),
                                    tokens_.Quotas(*tenant).max_shared_memory_bytes);
  if (id.ok()) {
    resp->set_region_id(*id);
    resp->set_bytes(req->bytes());
    UpdateGauges();
  }
  return Done(ctx, "RegisterSharedMemory", id.status());
}

grpc::ServerUnaryReactor* Service::UnregisterSharedMemory(grpc::CallbackServerContext* ctx,
                                                          const v1::UnregisterSharedMemoryRequest* req,
                                                          v1::UnregisterSharedMemoryResponse*) {
  const auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "UnregisterSharedMemory", tenant.status());
  const absl::Status st = shared_memory_.Unregister(req->region_id(), *tenant);
  if (st.ok()) UpdateGauges();
  return Done(ctx, "UnregisterSharedMemory", st);
}

bool Service::Register(Drainable* s) {
  std::lock_guard lock(streams_mu_);
  if (streams_.insert(s).second) batches_ += s->batch();
  metrics_.streams().Set(static_cast<double>(streams_.size() - batches_));
  metrics_.batches().Set(static_cast<double>(batches_));
  return !draining_;
}

void Service::Unregister(Drainable* s) {
  std::lock_guard lock(streams_mu_);
  if (streams_.erase(s) > 0) batches_ -= s->batch();
  metrics_.streams().Set(static_cast<double>(streams_.size() - batches_));
  metrics_.batches().Set(static_cast<double>(batches_));
}

void Service::BeginDrain() {
  // Background preparations stop at their next check instead of holding up the shutdown.
  for (const auto& rig : rigs_.List()) rig->CancelAll();
  std::lock_guard lock(streams_mu_);
  draining_ = true;
  // Drain may finish a stream, whose OnDone may run on this thread and re-enter Unregister
  // (hence the recursive mutex): iterate over a copy.
  const std::vector<Drainable*> open(streams_.begin(), streams_.end());
  for (Drainable* s : open) {
    if (streams_.contains(s)) s->Drain();
  }
}

std::vector<std::string> Service::StopBackground(std::chrono::steady_clock::time_point deadline) {
  for (const auto& rig : rigs_.List()) rig->CancelAll();  // those started since BeginDrain too
  {
    std::unique_lock lock(background_mu_);
    if (background_cv_.wait_until(lock, deadline, [&] { return background_tasks_ == 0; })) return {};
  }
  std::vector<std::string> left;
  for (const auto& rig : rigs_.List()) {
    for (const std::string& key : rig->Unfinished()) left.push_back(absl::StrCat("rig ", rig->id.substr(0, 12), ": ", key));
  }
  // Those of rigs deleted or evicted meanwhile are not listed (until 2026-12-03 an empty list
  // here read as "none left", and the shutdown waited for them in ~Service).
  if (left.empty()) left.push_back("a preparation of a rig no longer stored");
  return left;
}

size_t Service::open_streams() const {
  std::lock_guard lock(streams_mu_);
  return streams_.size();
}

}  // namespace sinew::server
