// The sinew.v1.Sinew service on gRPC's callback API. Handlers translate and validate; frames
// run on the bounded worker pool (small ones, under --inline-frame-us, on the gRPC thread that
// read them), and streams hold no thread while idle. The service owns no deformation maths and knows no method: it calls core's registry and
// Deformer interface, and every frame takes one path (server/frames.h).
//
//   service.cc         the adapter: handlers, rigs, sessions listing, drain
//   service_info.cc    GetServerInfo and rig descriptions, from the registry
//   upload_call.cc     UploadRig's reactor
//   session_create.cc  CreateSession: method, preparation, backend placement
//   session_state.cc   UpdateSession, GetSessionState, SetSessionState
//   frame_calls.cc     Deform, StreamDeform and DeformClip reactors
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/parallel/thread_pool.h"
#include "server/auth.h"
#include "server/clock.h"
#include "server/delay_queue.h"
#include "server/frames.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/rig_store.h"
#include "gpu/backend.h"
#include "server/session_manager.h"
#include "server/shared_memory.h"
#include "server/state_dir.h"
#include "sinew/v1/sinew.grpc.pb.h"

namespace sinew::server {


class Service final : public v1::Sinew::CallbackService {
 public:
  // `gpu` may be null (no GPU backend).
  Service(const ServerOptions& options, Metrics& metrics, ThreadPool& pool, gpu::GpuBackend* gpu);
  ~Service() override;

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx,
                                          const v1::GetServerInfoRequest* req,
                                          v1::ServerInfo* resp) override;
  grpc::ServerReadReactor<v1::UploadRigRequest>* UploadRig(grpc::CallbackServerContext* ctx,
                                                           v1::UploadRigResponse* resp) override;
  grpc::ServerUnaryReactor* GetRig(grpc::CallbackServerContext* ctx, const v1::GetRigRequest* req,
                                   v1::RigInfo* resp) override;
  grpc::ServerUnaryReactor* ListRigs(grpc::CallbackServerContext* ctx,
                                     const v1::ListRigsRequest* req,
                                     v1::ListRigsResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteRig(grpc::CallbackServerContext* ctx,
                                      const v1::DeleteRigRequest* req,
                                      v1::DeleteRigResponse* resp) override;
  grpc::ServerUnaryReactor* CancelPreparation(grpc::CallbackServerContext* ctx,
                                              const v1::CancelPreparationRequest* req,
                                              v1::Preparation* resp) override;
  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* ctx,
                                          const v1::CreateSessionRequest* req,
                                          v1::Session* resp) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* ctx,
                                       const v1::GetSessionRequest* req,
                                       v1::Session* resp) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* ctx,
                                         const v1::ListSessionsRequest* req,
                                         v1::ListSessionsResponse* resp) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* ctx,
                                         const v1::CloseSessionRequest* req,
                                         v1::CloseSessionResponse* resp) override;
  grpc::ServerUnaryReactor* UpdateSession(grpc::CallbackServerContext* ctx, const v1::UpdateSessionRequest* req,
                                          v1::Session* resp) override;
  grpc::ServerUnaryReactor* GetSessionState(grpc::CallbackServerContext* ctx, const v1::GetSessionStateRequest* req,
                                            v1::SessionState* resp) override;
  grpc::ServerUnaryReactor* SetSessionState(grpc::CallbackServerContext* ctx, const v1::SetSessionStateRequest* req,
                                            v1::Session* resp) override;
  grpc::ServerUnaryReactor* RegisterSharedMemory(grpc::CallbackServerContext* ctx,
                                                 const v1::RegisterSharedMemoryRequest* req,
                                                 v1::SharedMemoryRegion* resp) override;
  grpc::ServerUnaryReactor* UnregisterSharedMemory(grpc::CallbackServerContext* ctx,
                                                   const v1::UnregisterSharedMemoryRequest* req,
                                                   v1::UnregisterSharedMemoryResponse* resp) override;
  grpc::ServerUnaryReactor* Deform(grpc::CallbackServerContext* ctx,
                                   const v1::DeformRequest* req,
                                   v1::DeformResponse* resp) override;
  grpc::ServerBidiReactor<v1::DeformRequest, v1::DeformResponse>* StreamDeform(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerWriteReactor<v1::DeformClipResponse>* DeformClip(
      grpc::CallbackServerContext* ctx, const v1::DeformClipRequest* req) override;

  // Shutdown, step 1: every open stream and batch finishes (UNAVAILABLE) once its in-flight
  // frame has been answered; idle streams finish at once.
  void BeginDrain();
  // Shutdown, step 2 (after gRPC has stopped): cancels every background preparation and waits
  // until `deadline` for them to stop (they stop at their next check, see ProgressFn). Returns
  // those still running then ("rig 0123456789ab: swing-twist voxel=..."), which the destructor
  // waits for; a process that exits instead loses nothing but their work.
  std::vector<std::string> StopBackground(std::chrono::steady_clock::time_point deadline);
  // Joins the CreateSession threads (after the drain, before the frame pool they prepare on goes).
  void StopCreates() { creates_.reset(); }
  size_t open_streams() const;
  // Calls whose reactor has not finished (uploads, frames, streams).
  int active_calls() const { return active_calls_.load(); }
  // Expires idle sessions, trims the preparations to --max-prepared-bytes and refreshes gauges.
  // Called periodically.
  void Housekeeping();
  // While the rigs' preparations hold more than --max-prepared-bytes, forgets the one no open
  // session uses and no deformer holds that was least recently asked for; returns how many went.
  size_t TrimPreparations();
  // Why there is no GPU backend (shown in GetServerInfo).
  void set_gpu_unavailable_reason(std::string reason) { gpu_unavailable_reason_ = std::move(reason); }
  // The bearer tokens (--token-file; SinewServer loads them, and reloads them on SIGHUP).
  TokenTable& tokens() { return tokens_; }
  // --state-dir: opens it and loads the rigs kept there (before the server listens). Returns
  // how many were loaded; problems (unreadable or bad files, set aside) are printed.
  absl::StatusOr<size_t> RestoreRigs(const std::string& dir);
  // --state-dir, after RestoreRigs: opens again, under their ids, the sessions that were open,
  // stateful ones with the state KeepStates wrote at the last stop (from rest after a crash; a
  // session serving its method's fallback while the method prepares gets it once the method
  // serves, unless a frame comes first). Returns how many; problems are printed (a record whose
  // rig is gone or that no longer makes a session is set aside as *.bad).
  size_t RestoreSessions();
  // One record of RestoreSessions: opens session `id` of `tenant` as `request` (serialized) asks,
  // on the backend kind `kept` ran on where it can, and restores `kept` into it.
  absl::Status ReopenSession(const std::string& id, const std::string& tenant, const std::string& request,
                             std::optional<v1::SessionState> kept);
  // --state-dir, when the server stops (after the drain and the frame pool, before the
  // sessions go): writes each stateful session's state, as GetSessionState gives it, for the
  // next start. Returns how many; problems are printed (those sessions start from rest).
  size_t KeepStates();

 private:
  class UploadCall;
  class CreateCall;
  class DeformCall;
  class StreamCall;
  class ClipCall;
  template <class Request, class Response>
  class PoolCall;  // a unary call whose work runs on the worker pool
  // A long-lived call that BeginDrain must end (streams, batches).
  class Drainable {
   public:
    virtual ~Drainable() = default;
    virtual void Drain() = 0;
    // A DeformClip batch (the gauge sinew_batches) rather than a StreamDeform stream
    // (sinew_streams).
    virtual bool batch() const { return false; }
  };

  // Creates a session (on the worker pool: preparing a method can take seconds).
  // `restore_id`: a session --state-dir kept, opened again under its id (not written again).
  // `record`: the request kept as the session's --state-dir record, when not `req` (a kept
  // session reopened on the backend its history ran on stays recorded as asked: BACKEND_AUTO).
  absl::Status CreateSessionImpl(const v1::CreateSessionRequest& req, v1::Session& resp, const std::string& tenant,
                                 const std::string& restore_id = {}, const v1::CreateSessionRequest* record = nullptr);
  // Writes the session's record to --state-dir (its request, with the parameters it has now, or
  // `config` when given: those about to be its own).
  absl::Status KeepSession(const Session& session, const v1::DeformerConfig* config = nullptr);
  // Session parameters and state (server/session_state.cc), on the worker pool: they wait for the
  // session's frame in flight.
  // `tenant`: the caller's (TokenTable::Tenant); another tenant's session is NOT_FOUND.
  absl::Status UpdateSessionImpl(const v1::UpdateSessionRequest& req, v1::Session& resp, const std::string& tenant);
  absl::Status GetSessionStateImpl(const v1::GetSessionStateRequest& req, v1::SessionState& resp,
                                   const std::string& tenant);
  absl::Status SetSessionStateImpl(const v1::SetSessionStateRequest& req, v1::Session& resp, const std::string& tenant);
  // SetSessionStateImpl's work on a session whose `mu` the caller holds.
  absl::Status SetStateLocked(Session& s, const v1::SessionState& state, v1::Session& resp);
  // A state kept at the last stop (RestoreSessions) for a session that serves its method's
  // fallback meanwhile: Housekeeping applies it once the method serves, or drops it once the
  // session has applied a frame.
  // Held weakly (a session closed or expired meanwhile is gone; a look-up would count as a use).
  struct PendingState {
    std::weak_ptr<Session> session;
    v1::SessionState state;
    int64_t since_ms = 0;  // when the start read it; dropped after --session-idle-ttl
  };
  // Applies `state` kept for `session` now, or keeps it pending (UNAVAILABLE: the method still
  // prepares); other refusals are printed. `first_try`: at the start, before any frame could
  // come. Returns whether it was applied.
  bool RestoreState(const std::shared_ptr<Session>& session, v1::SessionState state, bool first_try, int64_t since_ms);
  void ApplyPendingStates();
  // --cache-dir and --max-cache-bytes, for StoredRig::GetOrPrepare.
  CacheFolder PreparedCache() const { return {options_.cache_dir, options_.max_cache_bytes}; }
  // The deformer of one method (with its shared preparation) or of a pipeline of them.
  // `serve_fallback`: a method with a MethodInfo::fallback whose preparation is not done gets a
  // deformer serving the fallback while the preparation runs on the pool (top-level methods only).
  // `tenant`: recorded as asking for the preparations it uses (StoredRig::askers). `restoring`: a
  // session opened again at a start, which --max-background-preparations does not refuse.
  absl::StatusOr<std::unique_ptr<Deformer>> CreateDeformerOn(const std::shared_ptr<StoredRig>& stored,
                                                             const DeformerConfig& config, bool serve_fallback,
                                                             const std::string& tenant, bool restoring);
  // The session's device state and its per-rig device data (uploaded on first use). When the
  // device is full, the device copies no session holds (every rig's) are freed and it tries once
  // more.
  absl::StatusOr<std::unique_ptr<gpu::GpuSession>> CreateGpuSession(StoredRig& stored, const Deformer& deformer,
                                                                     const DeviceStage& stage,
                                                                     std::shared_ptr<const MethodParams> params);
  // Frees every rig's device copies that no session holds (StoredRig::DropUnheldDeviceCopies);
  // the bytes freed.
  uint64_t FreeUnheldDeviceCopies();
  absl::StatusOr<std::unique_ptr<gpu::GpuSession>> CreateGpuSessionOnce(StoredRig& stored, const Deformer& deformer,
                                                                     const DeviceStage& stage,
                                                                     std::shared_ptr<const MethodParams> params);
  // Finds the request's session, decodes its inputs and runs it on the session's backend into
  // `resp`; done(context, status) is called once. `job` must outlive that. `tenant`: the caller's
  // (another tenant's session is NOT_FOUND). `queued_at`: when the
  // frame was handed to the worker pool (default: it was not); a frame that waited there longer
  // than --max-queue-ms is answered UNAVAILABLE without being deformed (admission control), and
  // so is a GPU frame of a session without history still in the device's queue by then.
  void StartDeform(const v1::DeformRequest& req, v1::DeformResponse& resp, FrameJob& job, FrameDone done,
                   void* context, const std::string& tenant, std::chrono::steady_clock::time_point queued_at = {});
  // Whether a Deform or StreamDeform frame runs on the gRPC thread that read it rather than on
  // the pool: its session is on the CPU and its last frame took less than --inline-frame-us
  // (and it asks for no quality report, nor is its method's cost one that follows the pose's
  // motion: costs the last frame does not tell). A long frame inline holds a gRPC thread (an
  // hour-long elastic frame run inline, its session's next frames inline behind it waiting for
  // its lock, left new connections and keepalive pings unanswered until it stopped). Counted
  // (sinew_frames_inline_total) when true.
  bool RunsInline(const v1::DeformRequest& req, const std::string& tenant);
  // Decodes a DeformRequest's inputs into the session's scratch (its lock held) and the job.
  absl::Status DecodeFrame(const v1::DeformRequest& req, Session& session, FrameJob& job);
  // As `tenant` sees it (SessionCount).
  void DescribeRig(StoredRig& stored, v1::RigInfo& info, bool with_joints, const std::string& tenant);
  uint32_t SessionCount(const StoredRig& stored, const std::string& tenant) const;
  // A serialized sinew.v1.Rig, counted, parsed, validated and built (UploadRig and RestoreRigs).
  absl::StatusOr<Rig> RigFromBytes(const std::string& bytes) const;
  // Keeps what --state-dir holds of rig `id` in step with the store after an upload or a delete.
  absl::Status KeepRig(const std::string& id, const std::string* bytes);
  // DeleteRig of a rig --state-dir keeps but this start did not load (no room): `tenant` leaves
  // its tenants file (the files go with the last). nullopt where the tenant holds no such rig.
  std::optional<absl::Status> DeleteRigKeptOnDisk(const std::string& id, const std::string& tenant);
  // CloseSession of a session --state-dir keeps for a later start that this start did not open
  // (unopened_): its record (and kept state) removed, 0 frames. nullopt where `tenant` has none
  // of that id.
  std::optional<absl::StatusOr<uint64_t>> CloseSessionKeptOnDisk(const std::string& id, const std::string& tenant);
  // FAILED_PRECONDITION where a session kept for a later start and not opened at this one uses
  // rig `rig_id` and is `tenant`'s (named), or anyone's when `tenant` is the last of `tenants`
  // (those holding the rig); a DeleteRig would take the rig from under it, and the next start
  // set it aside as rigless. OK where `tenant` does not hold it (the delete answers).
  absl::Status KeptSessionsHold(const std::string& rig_id, const std::string& tenant,
                                const std::vector<std::string>& tenants) const;
  // The sessions --state-dir keeps that this start did not open (RestoreSessions: their rig not
  // loaded for room, no GPU here, a failed preparation): id -> tenant and rig. Filled before the
  // server listens; afterwards it only shrinks (CloseSession).
  struct UnopenedSession {
    std::string tenant, rig_id;
  };
  mutable std::mutex unopened_mu_;
  std::map<std::string, UnopenedSession> unopened_;
  // KeepRig's read of the tenants and its write, as one step per rig (striped by id, so that
  // uploads of different rigs do not wait for each other's fsync).
  std::array<std::mutex, 16> keep_rig_mu_;
  // A tenant's rig quotas are checked and the rig taken (Adopt, Insert) under this lock: two
  // uploads at once (there are two upload threads) both passed max_rigs=1 until 2026-12-07.
  std::mutex quota_mu_;
  // Under the rig's prep_mu.
  static void DescribePreparation(const Preparation& p, int64_t now_ms, v1::Preparation& out);
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const char* rpc,
                                 const absl::Status& status);
  grpc::Status ToGrpc(const char* rpc, const absl::Status& status);
  // Once BeginDrain has run, calls that start new work (GetServerInfo, UploadRig, CreateSession,
  // UpdateSession, SetSessionState, RegisterSharedMemory, Deform, StreamDeform, DeformClip) are
  // answered UNAVAILABLE; reads and clean-up (Get*, List*, Close, Delete, Cancel, Unregister,
  // GetSessionState, which a client may want before it moves elsewhere) are still served.
  bool draining() const { return draining_.load(); }
  static absl::Status ShuttingDown() {
    return absl::UnavailableError("server is shutting down (draining): send new work to another server");
  }
  void UpdateGauges();
  bool Register(Drainable* call);  // false once draining
  void Unregister(Drainable* call);

  const ServerOptions options_;
  TokenTable tokens_;
  StateDir state_;
  Metrics& metrics_;
  ThreadPool& pool_;
  gpu::GpuBackend* gpu_;
  CpuFrames cpu_frames_;
  std::unique_ptr<GpuFrames> gpu_frames_;  // when gpu_
  std::string gpu_unavailable_reason_ = "no GPU backend";
  RigStore rigs_;
  SessionManager sessions_;
  SharedMemoryRegistry shared_memory_;
  // Batches waiting for their tenant's frame quota (DeformClip). Every waiting call is expedited
  // by its drain, so nothing is pending once the calls have ended.
  DelayQueue delays_;

  // States kept at the last stop whose sessions' methods still prepare (RestoreState).
  std::mutex pending_mu_;
  std::vector<PendingState> pending_states_;  // under pending_mu_

  mutable std::recursive_mutex streams_mu_;
  absl::flat_hash_set<Drainable*> streams_;  // open streams and batches
  size_t batches_ = 0;                        // of which batches (under streams_mu_)
  // Background preparations submitted and not finished, for StopBackground. Declared before
  // background_, whose tasks count themselves out here while it joins them.
  std::mutex background_mu_;
  std::condition_variable background_cv_;
  size_t background_tasks_ = 0;
  // CreateSession runs here, not on the frame pool: a create that waits for another's preparation
  // of the same data (or runs one, its chunks still on the pool) would otherwise hold a frame
  // worker asleep for seconds, and frames of other sessions are shed meanwhile. Null once stopped.
  std::unique_ptr<ThreadPool> creates_;
  // Uploads are hashed, parsed and validated here: for the same reason, a rig of millions of
  // vertices takes seconds; and not behind creates, which may run preparations for minutes.
  // Idle once gRPC's server has stopped (an upload answers before it ends).
  ThreadPool uploads_;
  // Preparations run in the background while their sessions serve a fallback (MethodInfo::fallback):
  // their own workers, so that they never take the frame pool's. Declared last: destroyed first,
  // finishing what it runs before the rig store goes.
  ThreadPool background_;
  std::atomic<bool> draining_{false};  // set under streams_mu_
  std::atomic<int> active_calls_{0};
  // Announced by the uploads in progress (--max-upload-bytes), and by each named tenant's: one
  // tenant may hold half of it (or one rig of --max-rig-bytes where that is more), so that one
  // tenant's headers cannot refuse every other tenant; and an upload that sends nothing more is
  // cancelled after --upload-idle-timeout (upload_watch_), so that two tenants' (or, without
  // tokens, one client's) stalled headers cannot hold it for good.
  std::mutex upload_mu_;
  uint64_t upload_bytes_ = 0;                                      // guarded by upload_mu_
  absl::flat_hash_map<std::string, uint64_t> tenant_upload_bytes_;  // guarded by upload_mu_; no entry for 0
  // The uploads still receiving, with the time each last received something: Housekeeping
  // cancels those idle past --upload-idle-timeout (CancelIdleUploads). An UploadCall is here
  // from its start until it stops receiving or is done, whichever is first.
  struct UploadWatch {
    grpc::CallbackServerContext* ctx = nullptr;
    int64_t last_ms = 0;
    bool cancelled = false;
  };
  std::mutex watch_mu_;
  absl::flat_hash_map<const void*, UploadWatch> upload_watch_;  // guarded by watch_mu_
  void CancelIdleUploads(int64_t now_ms);
  // --worker-threads, or the hardware's threads for 0: the frame pool's size, and the background
  // preparations' pool's.
  static size_t WorkerThreads(const ServerOptions& options);
};

}  // namespace sinew::server
