// Sessions: a deformer instance (with its per-session state and scratch) on a shared rig.
// Sessions that receive no request for the idle TTL, and play no DeformClip batch, are closed by
// ExpireIdle.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/deformer/deformer.h"
#include "server/rig_store.h"
#include "sinew/v1/position_codec.h"
#include "sinew/v1/sinew.pb.h"

namespace sinew::server {

class FrameBackend;

// ABORTED for a writer of a stateful session's history while a DeformClip batch plays it (a
// history has one writer at a time); `then` says what the caller may do.
absl::Status HistoryHeld(const std::string& session_id, absl::string_view then);

struct Session {
  std::string id;
  std::string tenant;  // who created it (server/auth.h); only that tenant finds it
  std::shared_ptr<StoredRig> rig;
  v1::DeformerConfig config;  // as requested, or as UpdateSession last changed it (under config_mu)
  v1::CreateSessionRequest request;  // as created, for --state-dir (its deformer: `config`)
  mutable std::mutex config_mu;  // for readers without `mu` (ToProto); writers hold both
  const MethodInfo* method = nullptr;  // null: a pipeline (config.stages)
  bool stateful = false;               // frames depend on earlier frames (a stateful stage); under mu
  // Its method's (or a stage's) frame cost follows the inputs' motion: its frames never run
  // inline (Service::RunsInline). Set at creation.
  bool cost_follows_motion = false;
  // The number of the last frame applied since creation or reset (written under mu): a stateful
  // session takes only frames numbered above it.
  std::atomic<bool> has_frame{false};
  std::atomic<uint64_t> last_frame{0};
  v1::Backend backend = v1::BACKEND_CPU;
  v1::OutputEncoding encoding = v1::OUTPUT_ENCODING_FLOAT32;
  // OUTPUT_ENCODING_DELTA: the bound and key frame interval as created, and the rig's grid.
  double max_error = 0;
  uint32_t key_frame_interval = 0;
  wire::Quantization grid;
  bool latest_pose_wins = false;  // StreamDeform may skip this session's frames that wait
  std::vector<std::string> preparation_keys;  // of its method or its stages' (Session.preparations)
  int64_t created_ms = 0;
  std::atomic<int64_t> last_used_ms{0};
  std::atomic<uint64_t> frames{0};
  // Compute time of its last frame (ns; the maximum until one has run): small frames run on the
  // gRPC thread that read them (ServerOptions::inline_frame_us).
  std::atomic<uint64_t> last_compute_ns{UINT64_MAX};

  // Held while a frame runs: frames of one session never overlap.
  std::mutex mu;
  std::unique_ptr<Deformer> deformer;
  // Per-frame scratch, reused so that steady-state frames allocate nothing.
  Pose pose;
  std::vector<CageFrame> cages;
  CageFrame posed_cage;
  SphereFrame spheres;
  std::vector<float> positions;  // float32 staging for float16
  std::vector<float> extra_posed_cage, extra_rest_cage, extra_joints, extra_base_points;
  std::vector<uint8_t> extra_states;
  std::vector<float> extra_normals;
  std::shared_ptr<const VertexNormals> normals;  // the rig's adjacency, on the first frame that wants normals
  std::shared_ptr<gpu::GpuMesh> gpu_mesh;         // GPU sessions: the same on the rig's device
  // Where its frames run (server/frames.h): the CPU pool or the GPU backend.
  FrameBackend* runner = nullptr;
  // GPU sessions: device state and the parameters of the device stage, computed on the CPU.
  std::unique_ptr<gpu::GpuSession> gpu;
  std::vector<float> device_params;
  bool device_states = false;  // the device makes the vertex states (implicit skinning)
  // A GPU session whose method keeps its history on the device (DeviceStage::state_on_device:
  // pbs, elastic implicit); fixed at creation.
  bool state_on_device = false;
  // GPU sessions: frames submitted (under mu), the last submitted from rest or set by a clip's
  // start or SetSessionState (under mu, counted as a submission), and the latest that left the
  // device's state unusable (set by the device's completion, without mu): its positions left
  // float's range (where the state can, Deformer::DeviceStateCanDiverge), or it was stopped part
  // way by its caller (FrameInput::stop). The next frame submitted after such a one, with no
  // restart since, starts from rest (GpuFrames).
  uint64_t device_submitted = 0, device_restarted = 0;
  std::atomic<uint64_t> device_lost{0};
  // GPU frames submitted and not yet answered: a use, however long it runs on the device (the
  // frame holds `mu` only until it is submitted), so ExpireIdle leaves the session; the answer
  // stamps the use's end.
  std::atomic<uint32_t> device_frames{0};

  // Per-session bytes (deformer state and scratch): counted when the session is made, again when
  // its parameters change (pbs's jiggle keeps four times the particles) and after each CPU frame
  // (a fallback session goes over to its method); CountState under mu.
  std::atomic<size_t> state_bytes{0};
  void CountState() {
    state_bytes.store(sizeof(Session) + deformer->StateBytes() + 32 * rig->rig->joint_count() +
                      4 * positions.size());
  }

  // DeformClip batches playing the session, from their start to their end. A batch is a use
  // however long it waits (for the client to read, or paced by max_frames_per_second), so
  // ExpireIdle leaves a session that has one; its end counts as the last use.
  std::atomic<uint32_t> batches{0};
  // A stateful session's history has one writer. While a batch plays it (from rest), that batch
  // is the owner (an opaque pointer, null when none) and every other writer is refused ABORTED:
  // another batch, a Deform or StreamDeform frame, SetSessionState.
  std::atomic<const void*> history_owner{nullptr};
  // Cleared when Close or ExpireIdle removes the session (ReleaseLocked): a batch still holding
  // it stops before its next frame.
  std::atomic<bool> open{true};

  // --state-dir: its record is written and removed under record_mu, and once the session is
  // closed or expired (`removed`) never written again, so that an UpdateSession finishing after
  // a CloseSession cannot bring a closed session back at the next restart.
  mutable std::mutex record_mu;
  bool removed = false;  // under record_mu

  void ToProto(v1::Session& out, uint32_t idle_ttl_seconds) const;
};

class SessionManager {
 public:
  SessionManager(size_t max_sessions, int64_t idle_ttl_ms)
      : max_sessions_(max_sessions), idle_ttl_ms_(idle_ttl_ms) {}
  ~SessionManager();

  class Reservation;
  // Registers a prepared session under a fresh random id (or `id`, a session a restart opens
  // again: ALREADY_EXISTS when taken). RESOURCE_EXHAUSTED when full, or when its tenant holds
  // `tenant_max` sessions already (0: no per-tenant limit).
  absl::StatusOr<std::shared_ptr<Session>> Add(std::unique_ptr<Session> session, size_t tenant_max = 0,
                                               const std::string& id = {}, Reservation* held = nullptr);
  // A place held for a session of `tenant` being created, counted by Reserve and Add as an open
  // session until it is given back (destroyed, or taken by the session Add adds): CreateSession holds
  // one from before it prepares anything, so that concurrent creates cannot all find room, all
  // prepare, and all but one be refused after (until 2026-12-03). RESOURCE_EXHAUSTED as Add.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& o) noexcept : manager_(std::exchange(o.manager_, nullptr)), tenant_(std::move(o.tenant_)) {}
    Reservation& operator=(Reservation&&) = delete;
    ~Reservation() {
      if (manager_ != nullptr) manager_->Unreserve(tenant_);
    }

   private:
    friend class SessionManager;
    Reservation(SessionManager* m, std::string tenant) : manager_(m), tenant_(std::move(tenant)) {}
    SessionManager* manager_ = nullptr;
    std::string tenant_;
  };
  absl::StatusOr<Reservation> Reserve(const std::string& tenant, size_t tenant_max);
  // Called with each session once Close or ExpireIdle has removed it (outside the lock); not
  // when the manager is destroyed (a server that stops keeps its sessions' records).
  void set_on_removed(std::function<void(Session& session)> fn) { on_removed_ = std::move(fn); }
  // nullptr when unknown or another tenant's; touches last use.
  std::shared_ptr<Session> Find(const std::string& id, int64_t now_ms, const std::string& tenant);
  // Whether `tenant` has the session open; not a use.
  bool Has(const std::string& id, const std::string& tenant) const;
  // NOT_FOUND when unknown or another tenant's.
  absl::StatusOr<uint64_t> Close(const std::string& id, const std::string& tenant);
  std::vector<std::shared_ptr<Session>> List(const std::string& tenant) const;
  std::vector<std::shared_ptr<Session>> All() const;  // every tenant's
  // Sessions of `tenant` on the rig `rig_id`.
  size_t CountOn(const std::string& rig_id, const std::string& tenant) const;
  // Closes sessions idle for longer than the TTL (a session a batch plays is not idle); returns
  // how many.
  size_t ExpireIdle(int64_t now_ms);

  size_t count() const;
  size_t state_bytes() const;
  size_t max_sessions() const { return max_sessions_; }
  int64_t idle_ttl_ms() const { return idle_ttl_ms_; }

 private:
  void ReleaseLocked(Session& s);
  // `held`: reservations of this tenant counted in pending_ that are the caller's own.
  absl::Status RoomLocked(const std::string& tenant, size_t tenant_max, size_t held = 0) const;
  void Unreserve(const std::string& tenant);
  void UnreserveLocked(const std::string& tenant);

  const size_t max_sessions_;
  const int64_t idle_ttl_ms_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions_;
  absl::flat_hash_map<std::string, size_t> pending_;  // reservations by tenant
  size_t pending_total_ = 0;
  std::function<void(Session&)> on_removed_;
};

}  // namespace sinew::server
