// Resident rigs, content-addressed by id. Rigs are immutable and shared (shared_ptr) by every
// session on them. When the store would exceed its byte budget, rigs that no session uses are
// evicted least recently used first.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include <condition_variable>
#include <functional>
#include <map>

#include "absl/status/statusor.h"
#include "core/deformer/deformer.h"
#include "core/geometry/mesh_quality.h"
#include "core/normals/normals.h"
#include "core/rig/rig.h"
#include "gpu/backend.h"
#include "server/cache_folder.h"

namespace sinew::server {

// One method's precomputation for one rig, computed once and shared by its sessions.
struct Preparation {
  std::string key;
  std::atomic<double> progress{0};
  std::atomic<bool> cancel{false};          // asked to stop (CancelPreparation, shutdown)
  int64_t started_ms = 0;
  int64_t finished_ms = 0;                  // guarded by StoredRig::prep_mu
  bool done = false;                        // guarded by StoredRig::prep_mu
  absl::Status status;                      // guarded by StoredRig::prep_mu
  std::shared_ptr<const Prepared> result;   // guarded by StoredRig::prep_mu
  bool from_cache = false;                  // read from the cache directory; guarded by prep_mu
  bool claimed = false;                     // a thread is computing it; guarded by prep_mu
  int64_t last_asked_ms = 0;                // listed, or last asked for by a session; prep_mu
  int64_t file_used_ms = 0;                 // its --cache-dir file last written, read or marked used; prep_mu
};

// A finished preparation that no deformer holds, as StoredRig::Unused lists it.
struct UnusedPreparation {
  std::string key;
  int64_t last_asked_ms = 0;
  size_t bytes = 0;  // what dropping it frees: its result's bytes, or its key and error's
};

// The name a preparation is kept under in StoredRig::preparations (and listed in GetRig).
std::string PreparationKey(const MethodInfo& method, const DeformerConfig& config);

struct StoredRig {
  std::string id;
  // The tenants that uploaded it (server/auth.h), guarded by the RigStore's lock: the bytes are
  // shared (content-addressed), its existence is visible only to them.
  absl::flat_hash_set<std::string> tenants;
  // Of `tenants`, those whose hold an upload has made but not yet acknowledged, because it is
  // not yet kept in --state-dir (RigStore::Saved ends it): the rig is not theirs to see, use or
  // evict until then, so that nothing answers for a rig a restart would not bring back (until
  // 2026-12-07 GetRig and CreateSession saw it while its files were being written). Guarded by
  // the RigStore's lock; counted in the tenant's quota.
  // By tenant, how many of its uploads are keeping it (each releases only its own).
  absl::flat_hash_map<std::string, int> unsaved;
  // Whether the rig's bytes are in --state-dir (or there is none): a tenant adopting it then
  // writes its tenant list alone.
  std::atomic<bool> bytes_kept{false};
  std::shared_ptr<const Rig> rig;
  size_t bytes = 0;
  std::atomic<int> sessions{0};
  // Sessions --state-dir keeps and this start could not open (no GPU, a preparation that failed)
  // name it: never evicted, so that a later start opens them (until 2026-12-07 an upload needing
  // room evicted it, its files with it, and the next start set those sessions aside as rigless).
  // DeleteRig still removes it: the caller's word, and the next start says so.
  std::atomic<bool> kept_sessions{false};
  std::atomic<int64_t> last_used_ms{0};
  // `sessions` by tenant: its sessions open (SessionManager) or being created (RigClaim) on the
  // rig. A tenant may not delete its hold on a rig several tenants share while one of its own
  // sessions uses it; counted here, with the same order as `sessions` (a created session is
  // counted before its claim lets go), so that no moment shows neither (until 2026-12-03 the
  // creates were not counted, and the open sessions were counted apart, before the delete).
  std::mutex holds_mu;
  absl::flat_hash_map<std::string, int> holds;  // guarded by holds_mu; no entry for 0
  void Hold(const std::string& tenant) {
    sessions.fetch_add(1);
    std::lock_guard lock(holds_mu);
    ++holds[tenant];
  }
  void LetGo(const std::string& tenant) {
    sessions.fetch_sub(1);
    std::lock_guard lock(holds_mu);
    if (--holds[tenant] == 0) holds.erase(tenant);
  }
  int HoldsOf(const std::string& tenant) {
    std::lock_guard lock(holds_mu);
    const auto it = holds.find(tenant);
    return it == holds.end() ? 0 : it->second;
  }

  std::mutex prep_mu;
  std::condition_variable prep_cv;
  std::map<std::string, std::shared_ptr<Preparation>> preparations;  // guarded by prep_mu
  // The tenants whose sessions asked for each preparation key (guarded by prep_mu): a tenant sees
  // and may cancel only the preparations it asked for, and none another tenant asked for too (a
  // rig several tenants uploaded is shared; its preparations serve their sessions alike). Keys
  // nobody is recorded for (none so far) are everyone's. A key is recorded with its entry in
  // `preparations` and leaves with it (until 2026-12-07 a create refused at
  // --max-background-preparations, or a preparation cancelled, left its key here for the rig's
  // life: one more per new parameter set, without bound).
  std::map<std::string, absl::flat_hash_set<std::string>> askers;
  bool VisibleLocked(const std::string& key, const std::string& tenant) const;
  // A session asks again for preparation `key` that CancelPreparation stopped and that has not
  // ended yet (under prep_mu): one that had not started is wanted after all (its cancellation is
  // withdrawn; its task runs it), one still running leaves the list (it ends cancelled for those
  // that waited on it, and leaves the new entry alone), so that the request starts it again.
  // Until 2026-12-07 the request found it listed and started nothing: its session served the
  // fallback for good, and GetRig no longer listed what it waited for. Not after CancelAll.
  void RenewLocked(const std::string& key);
  bool cancelling_all = false;  // CancelAll was called (shutdown, a rig let go); guarded by prep_mu
  // The preparations' results, kept failures (their key and error), the normals' adjacency and
  // the quality measure.
  std::atomic<size_t> prepared_bytes{0};
  std::shared_ptr<gpu::GpuRig> gpu_rig;  // device-resident copy, guarded by prep_mu
  // Device copies of coefficient matrices (cage stages) and implicit models, by
  // DeviceStage::device_data_key.
  std::map<std::string, std::shared_ptr<gpu::GpuCoefficients>> gpu_coefficients;  // prep_mu
  std::map<std::string, std::shared_ptr<gpu::GpuModel>> gpu_models;               // prep_mu

  // The vertex → triangle adjacency for normals, built on first use (shared by the sessions).
  std::shared_ptr<const VertexNormals> Normals();
  // The quality report's per-rig part (FrameOutputs.quality), made on first use (one measure of
  // the rest mesh, on `pool`); rigs with triangles only.
  std::shared_ptr<const MeshQualityMeasure> QualityMeasure(ThreadPool* pool = nullptr);
  std::shared_ptr<const VertexNormals> vertex_normals;  // guarded by prep_mu
  std::shared_ptr<const MeshQualityMeasure> quality_measure;  // guarded by prep_mu
  // The adjacency on the rig's device, for GPU sessions' normals, uploaded on first use.
  absl::StatusOr<std::shared_ptr<gpu::GpuMesh>> MeshOnGpu(gpu::GpuBackend& backend);
  std::shared_ptr<gpu::GpuMesh> gpu_mesh;  // guarded by prep_mu

  // The rig on the GPU, uploaded on first use.
  absl::StatusOr<std::shared_ptr<gpu::GpuRig>> OnGpu(gpu::GpuBackend& backend);
  // A deformer's coefficient matrix on the rig's device, uploaded once per key.
  absl::StatusOr<std::shared_ptr<gpu::GpuCoefficients>> CoefficientsOnGpu(
      gpu::GpuBackend& backend, const gpu::GpuRig& on_gpu, const Deformer& deformer,
      const std::string& key);
  // A device stage's per-rig model (implicit skinning) on the rig's device, uploaded once per key.
  absl::StatusOr<std::shared_ptr<gpu::GpuModel>> ModelOnGpu(gpu::GpuBackend& backend,
                                                            std::shared_ptr<gpu::GpuRig> on_gpu,
                                                            const DeviceStage& stage);
  // Frees the device copies above (rig, adjacency, coefficient matrices, models) that no session
  // holds: they are caches of host data, uploaded again by the next session that needs them.
  // Returns the device bytes freed.
  uint64_t DropUnheldDeviceCopies();

  // Where a preparation stands, without waiting: done (its result, or its error), or not yet
  // (nullptr: running, reserved or not started). `key`: PreparationKey(method, config), which
  // callers asking every frame compute once.
  absl::StatusOr<std::shared_ptr<const Prepared>> PreparedIfDone(const std::string& key);
  // The method's prepared data for `config`: computed on the calling thread by the first caller
  // (progress logged when it takes over a second), waited for by concurrent callers, cached
  // (failures too: they are deterministic). Methods with save_prepared/load_prepared are also
  // kept under `cache.dir`/prepared/ (when not empty), by rig id and key, and read from there;
  // each write trims that folder to `cache.max_bytes` (server/cache_folder.h).
  // `asker`: the tenant whose session asks (recorded in `askers` with the entry, under prep_mu);
  // nullptr for a background task, whose session's create recorded it.
  absl::StatusOr<std::shared_ptr<const Prepared>> GetOrPrepare(const MethodInfo& method,
                                                               const DeformerConfig& config,
                                                               ThreadPool* pool, int64_t now_ms,
                                                               const CacheFolder& cache = {},
                                                               const std::string* asker = nullptr);
  // Asks the running preparation `key` to stop (it leaves `preparations` once it has; sessions
  // serving a fallback keep it) or forgets a failed one (the next request retries it). `describe`
  // sees the entry as it was, under prep_mu. NOT_FOUND naming the keys there are;
  // FAILED_PRECONDITION when it finished successfully.
  // Only the caller's (VisibleLocked; NOT_FOUND otherwise), and not one other tenants asked for
  // too (FAILED_PRECONDITION).
  absl::Status CancelPreparation(const std::string& key, const std::string& tenant,
                                 const std::function<void(const Preparation&)>& describe);
  // Lists the preparation `key` as started (progress 0) so that GetRig shows it at once, for a
  // background task that will run GetOrPrepare; false when it is already listed (then no task
  // is needed). `asker` is recorded as asking for it either way.
  bool Reserve(const std::string& key, int64_t now_ms, const std::string& asker);
  // Whether preparation `key` is listed (running, reserved, or finished and kept), and a request
  // for it would start no task (RenewLocked: a running one that was cancelled would need one).
  bool Listed(const std::string& key);
  // Asks every running preparation to stop (server shutdown).
  void CancelAll();
  // The keys of the preparations not done (running, or reserved and not started).
  std::vector<std::string> Unfinished();
  // The finished preparations (successful or failed) whose keys are not in `in_use` (the keys
  // open sessions name, Session.preparations) and whose result no deformer holds.
  std::vector<UnusedPreparation> Unused(const absl::flat_hash_set<std::string>& in_use);
  // Forgets preparation `key` if it is still unused as Unused says, and nobody named it since
  // `asked_ms` (its last_asked_ms then); returns the bytes freed (0: kept). A session that asks
  // for it again prepares it again (or reads it from the cache directory).
  size_t DropIfUnused(const std::string& key, int64_t asked_ms);
  size_t TotalBytes() const { return bytes + prepared_bytes.load(); }
};

// A rig held against DeleteRig and eviction while a session is being created on it (its
// preparation may take minutes): counted in StoredRig::sessions from RigStore::Acquire until the
// claim is destroyed. The session, once registered, holds its own count.
class RigClaim {
 public:
  RigClaim() = default;
  // Counts the claim (RigStore::Acquire, under the store's lock).
  RigClaim(std::shared_ptr<StoredRig> rig, std::string tenant) : rig_(std::move(rig)), tenant_(std::move(tenant)) {
    rig_->Hold(tenant_);
  }
  RigClaim(RigClaim&& o) noexcept : rig_(std::move(o.rig_)), tenant_(std::move(o.tenant_)) {}
  RigClaim& operator=(RigClaim&&) = delete;
  ~RigClaim() {
    if (rig_) rig_->LetGo(tenant_);
  }
  const std::shared_ptr<StoredRig>& rig() const { return rig_; }
  explicit operator bool() const { return rig_ != nullptr; }

 private:
  std::shared_ptr<StoredRig> rig_;
  std::string tenant_;
};

class RigStore {
 public:
  explicit RigStore(size_t max_bytes) : max_bytes_(max_bytes) {}

  // nullptr when absent or not `tenant`'s (StoredRig::unsaved holds included).
  std::shared_ptr<StoredRig> Find(const std::string& id, int64_t now_ms, const std::string& tenant);
  // The rig stored under `id`, whoever uploaded it, now `tenant`'s too (an upload of bytes the
  // store holds already); *had: whether it was `tenant`'s before, saved. A new hold is unsaved
  // (StoredRig::unsaved) until Saved. nullptr when absent.
  std::shared_ptr<StoredRig> Adopt(const std::string& id, int64_t now_ms, const std::string& tenant, bool* had);
  // The resident bytes of the rig stored under `id`, whoever holds it; 0 when absent (for a
  // tenant's quota before it adopts the rig: revealed to no one).
  size_t ResidentBytesOf(const std::string& id) const;
  // Find, counting the rig as used (under the store's lock, so that no Delete or eviction comes
  // between); empty when absent or not `tenant`'s.
  RigClaim Acquire(const std::string& id, int64_t now_ms, const std::string& tenant);
  // Inserts, or returns the rig already stored under `id`, as `tenant`'s. RESOURCE_EXHAUSTED when
  // the budget cannot be met even after evicting every unused rig. `evicted` (when given) receives
  // the ids of the rigs evicted to make room, for the caller to drop from --state-dir; with
  // `evicted` null nothing is evicted (a restore must not evict rigs whose sessions are yet to
  // be restored). `*inserted` (when given): whether this call stored it (false: it was there).
  // The tenant's hold, if new, is unsaved until Saved; rigs with unsaved holds are not evicted.
  absl::StatusOr<std::shared_ptr<StoredRig>> Insert(const std::string& id, Rig rig, int64_t now_ms,
                                                    const std::string& tenant, std::vector<std::string>* evicted,
                                                    bool* inserted = nullptr);
  // `tenant` lets go of the rig: NOT_FOUND when absent or not its; FAILED_PRECONDITION while one
  // of its sessions uses it or is being created (StoredRig::holds), or, for the last tenant
  // holding it, while any session does. Removed once no tenant holds it.
  absl::Status Delete(const std::string& id, const std::string& tenant);
  // Marks rig `id` (if held) as named by sessions --state-dir keeps for a later start: not evicted.
  void KeepForKeptSessions(const std::string& id);
  // No session kept for a later start names rig `id` any more (they were closed): evictable again.
  void NoKeptSessions(const std::string& id);
  // `tenant`'s hold on `id` is kept (--state-dir): the rig is the tenant's to see from now on.
  void Saved(const std::string& id, const std::string& tenant);
  // An upload that could not keep `id` lets go of its part of `tenant`'s unsaved hold: the hold
  // goes when no other upload of the tenant is keeping it (and none kept it: Saved), and the rig
  // once no tenant holds it.
  void ReleaseUnsaved(const std::string& id, const std::string& tenant);
  // Whether `tenant` holds `id`, saved or being kept by one of its uploads (already in its quota).
  bool Holds(const std::string& id, const std::string& tenant) const;
  std::vector<std::shared_ptr<StoredRig>> List() const;  // every tenant's
  // How many tenants hold `rig`.
  size_t TenantCount(const StoredRig& rig) const;
  // The tenants holding the rig `id`, sorted; empty when it is not stored.
  std::vector<std::string> Tenants(const std::string& id) const;
  // `tenant`'s rigs; with `unsaved`, those its uploads are keeping too (for its quota).
  std::vector<std::shared_ptr<StoredRig>> List(const std::string& tenant, bool unsaved = false) const;

  size_t count() const;
  size_t bytes() const;
  size_t max_bytes() const { return max_bytes_; }

 private:
  const size_t max_bytes_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<StoredRig>> rigs_;
  size_t bytes_ = 0;
};

}  // namespace sinew::server
