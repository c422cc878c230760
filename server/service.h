// The sinew.v1.Sinew service on gRPC's callback API. Handlers translate and validate; frames
// run on the bounded worker pool, never on gRPC's threads, and streams hold no thread while
// idle. The service owns no deformation maths: it calls core's Deformer interface.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "core/parallel/thread_pool.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/rig_store.h"
#include "gpu/backend.h"
#include "server/session_manager.h"
#include "sinew/v1/sinew.grpc.pb.h"

namespace sinew::server {

int64_t NowMs();  // wall clock, Unix milliseconds

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
  size_t open_streams() const;
  // Calls whose reactor has not finished (uploads, frames, streams).
  int active_calls() const { return active_calls_.load(); }
  // Expires idle sessions and refreshes gauges. Called periodically.
  void Housekeeping();
  // Why there is no GPU backend (shown in GetServerInfo).
  void set_gpu_unavailable_reason(std::string reason) { gpu_unavailable_reason_ = std::move(reason); }

 private:
  class UploadCall;
  class CreateCall;
  class DeformCall;
  class StreamCall;
  class ClipCall;
  // A long-lived call that BeginDrain must end (streams, batches).
  class Drainable {
   public:
    virtual ~Drainable() = default;
    virtual void Drain() = 0;
  };

  // A frame in flight. CPU frames complete inside RunFrame; GPU frames complete on the device's
  // completion thread once their batch is done. Owned by the calling reactor (no allocation).
  using FrameDone = void (*)(void* context, const absl::Status& status);
  struct PendingFrame {
    Service* service = nullptr;
    std::shared_ptr<Session> session;
    v1::DeformResponse* response = nullptr;
    std::chrono::steady_clock::time_point start;
    FrameDone done = nullptr;
    void* context = nullptr;
  };
  // Deforms one frame of a DeformRequest into `resp` and calls done(context, status), possibly
  // before returning (CPU) or later from another thread (GPU). `pending` must outlive that.
  void RunFrame(const v1::DeformRequest& req, v1::DeformResponse& resp, PendingFrame& pending,
                FrameDone done, void* context);
  static void GpuFrameDone(void* pending, const absl::Status& status);
  // The extra outputs a frame asked for (posed cage, rest cage, joints).
  absl::Status FillExtras(Session& session, const v1::FrameOutputs& want, v1::DeformResponse& resp);
  // Deforms `frame` on `session` (whose mutex the caller holds) into `out` in the session's
  // encoding, and accounts for it.
  absl::Status DeformInto(Session& session, const FrameInput& frame, std::string& out);
  // Creates a session (on the worker pool: preparing a method can take seconds).
  absl::Status CreateSessionImpl(const v1::CreateSessionRequest& req, v1::Session& resp);
  // The session's device state and its per-rig device data (uploaded on first use).
  absl::StatusOr<std::unique_ptr<gpu::GpuSession>> CreateGpuSession(StoredRig& stored, const Deformer& deformer,
                                                                     const DeviceStage& stage,
                                                                     const ImplicitConfig& implicit);
  void DescribeRig(StoredRig& stored, v1::RigInfo& info, bool with_joints);
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const char* rpc,
                                 const absl::Status& status);
  grpc::Status ToGrpc(const char* rpc, const absl::Status& status);
  void UpdateGauges();
  bool Register(Drainable* call);  // false once draining
  void Unregister(Drainable* call);

  const ServerOptions options_;
  Metrics& metrics_;
  ThreadPool& pool_;
  gpu::GpuBackend* gpu_;
  std::string gpu_unavailable_reason_ = "no GPU backend";
  RigStore rigs_;
  SessionManager sessions_;

  mutable std::recursive_mutex streams_mu_;
  absl::flat_hash_set<Drainable*> streams_;
  bool draining_ = false;  // guarded by streams_mu_
  std::atomic<int> active_calls_{0};
};

}  // namespace sinew::server
