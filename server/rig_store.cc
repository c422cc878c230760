#include "server/rig_store.h"
#include "server/cache_folder.h"
#include "server/echo_id.h"

#include <algorithm>
#include <new>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/util/atomic_file.h"
#include "core/util/state_bytes.h"  // Fnv1a64

namespace sinew::server {

std::shared_ptr<const VertexNormals> StoredRig::Normals() {
  std::lock_guard lock(prep_mu);
  if (!vertex_normals) {
    vertex_normals = std::make_shared<const VertexNormals>(*rig);
    prepared_bytes += vertex_normals->Bytes();
  }
  return vertex_normals;
}

std::shared_ptr<const MeshQualityMeasure> StoredRig::QualityMeasure(ThreadPool* pool) {
  std::lock_guard lock(prep_mu);
  if (!quality_measure) {
    quality_measure = std::make_shared<const MeshQualityMeasure>(rig->positions, rig->triangles, MeshQualityOptions{}, pool);
    prepared_bytes += quality_measure->Bytes();
  }
  return quality_measure;
}

std::string PreparationKey(const MethodInfo& method, const DeformerConfig& config) {
  return absl::StrCat(std::string(method.prepare_group.empty() ? method.name : method.prepare_group), " ",
                      method.prepare_key(config));
}

absl::StatusOr<std::shared_ptr<const Prepared>> StoredRig::PreparedIfDone(const std::string& key) {
  std::lock_guard lock(prep_mu);
  auto it = preparations.find(key);
  if (it == preparations.end() || !it->second->done) return nullptr;
  if (!it->second->status.ok()) return it->second->status;
  return it->second->result;
}

namespace {

// Where a preparation of `key` on rig `rig_id` is kept, and the header its file starts with
// (the full rig id and key: a file name collision reads as a miss).
std::string CachePath(const std::string& dir, const MethodInfo& method, const std::string& rig_id,
                      const std::string& key) {
  return absl::StrCat(dir, "/prepared/", std::string(method.name), "-", rig_id.substr(0, 16), "-",
                      absl::Hex(Fnv1a64(rig_id + "\n" + key), absl::kZeroPad16), ".bin");
}
std::string CacheHeader(const std::string& rig_id, const std::string& key) {
  return absl::StrCat("sinew prepared\nrig ", rig_id, "\nkey ", key, "\n");
}

absl::StatusOr<std::shared_ptr<const Prepared>> ReadCached(const std::string& path, const std::string& header,
                                                           const MethodInfo& method, const Rig& rig,
                                                           const DeformerConfig& config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;  // a miss
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.compare(0, header.size(), header) != 0) return nullptr;
  auto loaded = method.load_prepared(rig, config, std::string_view(bytes).substr(header.size()));
  if (loaded.ok()) TouchFile(path);  // used: the last --max-cache-bytes removes
  return loaded;
}

// Written, then the folder trimmed to `max_bytes` (0: no limit) keeping this file; a file larger
// than the whole budget is not written.
absl::Status WriteCached(const std::string& path, const std::string& header, const std::string& bytes,
                         uint64_t max_bytes) {
  if (max_bytes > 0 && header.size() + bytes.size() > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(path, " would hold ", header.size() + bytes.size(),
                                                     " bytes, more than --max-cache-bytes ", max_bytes));
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", path, ": ", ec.message()));
  // Atomic, with a temporary name no other replica sharing the folder can pick; readable by the
  // server's user alone, as --state-dir's files: it holds data made from tenants' rigs and their
  // ids (until 2026-12-03 0644).
  AtomicWriteOptions options;
  options.mode = 0600;
  if (auto st = WriteFileAtomically(path, {header, bytes}, options); !st.ok()) return st;
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (const TrimResult trimmed = TrimFolder(dir, ".bin", max_bytes, path); trimmed.removed > 0) {
    std::fprintf(stderr, "sinew-server: %s: removed the %d least recently used preparations (%llu bytes) to keep "
                 "%llu bytes under --max-cache-bytes %llu\n", dir.c_str(), trimmed.removed,
                 static_cast<unsigned long long>(trimmed.removed_bytes),
                 static_cast<unsigned long long>(trimmed.kept_bytes), static_cast<unsigned long long>(max_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// What a finished preparation's entry holds: its result's bytes, or its key and error's (a
// failure is kept so that it is not retried).
size_t EntryBytes(const Preparation& p) {
  return p.result ? p.result->Bytes() : sizeof(Preparation) + p.key.size() + p.status.message().size();
}

// How often a preparation used from memory marks its cache file used (TouchFile).
constexpr int64_t kCacheTouchMs = 3'600'000;

// Finished, and held by the map alone (a deformer on it holds its own reference).
bool Droppable(const Preparation& p) { return p.done && (!p.result || p.result.use_count() == 1); }

}  // namespace

absl::StatusOr<std::shared_ptr<const Prepared>> StoredRig::GetOrPrepare(
    const MethodInfo& method, const DeformerConfig& config, ThreadPool* pool, int64_t now_ms,
    const CacheFolder& cache, const std::string* asker) {
  const std::string key = PreparationKey(method, config);
  std::shared_ptr<Preparation> prep;
  bool mine = false;
  {
    std::unique_lock lock(prep_mu);
    if (asker != nullptr) RenewLocked(key);  // (a background task's own entry stays cancelled)
    auto& slot = preparations[key];
    if (!slot) {
      slot = std::make_shared<Preparation>();
      slot->key = key;
      slot->started_ms = now_ms;
    }
    if (asker != nullptr) askers[key].insert(*asker);
    slot->last_asked_ms = std::max(slot->last_asked_ms, now_ms);
    if (!slot->claimed && !slot->done) {  // new, or reserved for a background task
      slot->claimed = true;
      mine = true;
    }
    prep = slot;
    if (!mine) {
      prep_cv.wait(lock, [&] { return prep->done; });
      if (!prep->status.ok()) return prep->status;
      // Used from memory: its cache file is marked used too, at most hourly, so that the
      // --max-cache-bytes trim (least recently used first) does not take a rig in use for days
      // first, to be computed again at the next start.
      const bool cacheable = method.save_prepared && method.load_prepared && !cache.dir.empty();
      if (cacheable && prep->file_used_ms > 0 && now_ms - prep->file_used_ms >= kCacheTouchMs) {
        prep->file_used_ms = now_ms;
        TouchFile(CachePath(cache.dir, method, id, key));
      }
      return prep->result;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto last_log = t0;
  std::mutex log_mu;
  auto progress = [&](double f) {
    prep->progress = f;
    std::lock_guard lock(log_mu);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_log >= std::chrono::seconds(1)) {
      last_log = now;
      std::fprintf(stderr, "sinew-server: rig %.12s: preparing %s: %.0f%%\n", id.c_str(), key.c_str(), 100 * f);
    }
    return !prep->cancel.load();
  };
  const bool cacheable = method.save_prepared && method.load_prepared && !cache.dir.empty();
  const std::string path = cacheable ? CachePath(cache.dir, method, id, key) : std::string();
  const std::string header = CacheHeader(id, key);
  bool from_cache = false;
  absl::StatusOr<std::shared_ptr<const Prepared>> result = nullptr;
  if (cacheable) {
    result = ReadCached(path, header, method, *rig, config);
    if (!result.ok()) {  // unreadable or stale: computed again, and the file replaced
      std::fprintf(stderr, "sinew-server: rig %.12s: ignoring %s: %s\n", id.c_str(), path.c_str(),
                   std::string(result.status().message()).c_str());
      result = nullptr;
    }
    from_cache = *result != nullptr;
  }
  if (!from_cache) {
    // A preparation's allocation the machine cannot give fails the preparation, not the server
    // (those on the calling thread: the large ones are sized there before the parallel work).
    try {
      result = prep->cancel ? absl::CancelledError("cancelled before it started")
                            : method.prepare(*rig, config, pool, progress);
    } catch (const std::bad_alloc&) {
      result = absl::ResourceExhaustedError(absl::StrCat("preparing ", key, ": out of memory"));
    }
    if (cacheable && result.ok()) {
      if (auto st = WriteCached(path, header, method.save_prepared(**result), cache.max_bytes); !st.ok()) {
        std::fprintf(stderr, "sinew-server: rig %.12s: not cached: %s\n", id.c_str(), std::string(st.message()).c_str());
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (seconds >= 1 && result.ok()) {
    std::fprintf(stderr, "sinew-server: rig %.12s: prepared %s in %.1f s%s\n", id.c_str(), key.c_str(), seconds,
                 from_cache ? " (read from the cache directory)" : "");
  }
  {
    std::lock_guard lock(prep_mu);
    prep->done = true;
    prep->finished_ms = now_ms + static_cast<int64_t>(seconds * 1000);
    prep->progress = 1;
    prep->from_cache = from_cache;
    if (cacheable && result.ok()) prep->file_used_ms = now_ms;  // written or read just now
    if (result.ok()) {
      prep->result = *result;
      prepared_bytes += (*result)->Bytes();
    } else {
      // Sessions waiting now get the error. A failure is kept (the key covers every parameter
      // the data depends on, so a retry would fail again) and shown by GetRig until
      // CancelPreparation forgets it; a cancelled preparation leaves, so that the next request
      // starts it again.
      prep->status = result.status();
      if (result.status().code() == absl::StatusCode::kCancelled) {
        std::fprintf(stderr, "sinew-server: rig %.12s: preparing %s cancelled\n", id.c_str(), key.c_str());
        if (auto it = preparations.find(key); it != preparations.end() && it->second == prep) {
          preparations.erase(it);
          askers.erase(key);
        }
      } else {
        prepared_bytes += EntryBytes(*prep);  // a kept failure counts too (--max-prepared-bytes)
      }
    }
  }
  prep_cv.notify_all();
  return result;
}

void StoredRig::RenewLocked(const std::string& key) {
  const auto it = preparations.find(key);
  if (it == preparations.end() || cancelling_all) return;
  Preparation& p = *it->second;
  if (p.done || !p.cancel) return;
  if (!p.claimed) {
    p.cancel = false;
  } else {
    preparations.erase(it);
  }
}

bool StoredRig::Reserve(const std::string& key, int64_t now_ms, const std::string& asker) {
  std::lock_guard lock(prep_mu);
  RenewLocked(key);
  askers[key].insert(asker);
  auto& slot = preparations[key];
  if (slot) return false;
  slot = std::make_shared<Preparation>();
  slot->key = key;
  slot->started_ms = now_ms;
  slot->last_asked_ms = now_ms;
  return true;
}

bool StoredRig::Listed(const std::string& key) {
  std::lock_guard lock(prep_mu);
  const auto it = preparations.find(key);
  if (it == preparations.end()) return false;
  const Preparation& p = *it->second;
  return cancelling_all || p.done || !p.cancel || !p.claimed;
}

bool StoredRig::VisibleLocked(const std::string& key, const std::string& tenant) const {
  const auto it = askers.find(key);
  return it == askers.end() || it->second.empty() || it->second.contains(tenant);
}

absl::Status StoredRig::CancelPreparation(const std::string& key, const std::string& tenant,
                                         const std::function<void(const Preparation&)>& describe) {
  std::lock_guard lock(prep_mu);
  auto it = preparations.find(key);
  if (it == preparations.end() || !VisibleLocked(key, tenant)) {
    std::string keys;
    for (const auto& [k, p] : preparations) {
      if (VisibleLocked(k, tenant)) keys += (keys.empty() ? "\"" : ", \"") + k + "\"";
    }
    return absl::NotFoundError(absl::StrCat("key: rig ", id.substr(0, 12), " has no preparation \"", EchoId(key), "\"",
                                            keys.empty() ? std::string(" (it has none)") : "; it has " + keys));
  }
  if (const auto a = askers.find(key); a != askers.end() && a->second.size() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "key: preparation \"", key, "\" serves other callers' sessions on this shared rig too; it is not cancelled"));
  }
  Preparation& p = *it->second;
  if (p.done && p.status.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "key: preparation \"", key, "\" is done; nothing to cancel (DeleteRig frees a rig with its preparations)"));
  }
  describe(p);
  if (p.done) {
    prepared_bytes -= EntryBytes(p);
    preparations.erase(it);  // a failure, forgotten: the next request retries
    askers.erase(key);
  } else {
    p.cancel = true;
  }
  return absl::OkStatus();
}

void StoredRig::CancelAll() {
  std::lock_guard lock(prep_mu);
  cancelling_all = true;
  for (auto& [key, p] : preparations) {
    if (!p->done) p->cancel = true;
  }
}


std::vector<UnusedPreparation> StoredRig::Unused(const absl::flat_hash_set<std::string>& in_use) {
  std::lock_guard lock(prep_mu);
  std::vector<UnusedPreparation> out;
  for (const auto& [key, p] : preparations) {
    if (Droppable(*p) && !in_use.contains(key)) out.push_back({key, p->last_asked_ms, EntryBytes(*p)});
  }
  return out;
}

size_t StoredRig::DropIfUnused(const std::string& key, int64_t asked_ms) {
  std::lock_guard lock(prep_mu);
  auto it = preparations.find(key);
  if (it == preparations.end() || !Droppable(*it->second) || it->second->last_asked_ms != asked_ms) return 0;
  const size_t freed = EntryBytes(*it->second);
  prepared_bytes -= freed;
  preparations.erase(it);
  askers.erase(key);  // no session uses it: the next to ask is recorded again
  return freed;
}

std::vector<std::string> StoredRig::Unfinished() {
  std::lock_guard lock(prep_mu);
  std::vector<std::string> keys;
  for (const auto& [key, p] : preparations) {
    if (!p->done) keys.push_back(key);
  }
  return keys;
}

absl::StatusOr<std::shared_ptr<gpu::GpuRig>> StoredRig::OnGpu(gpu::GpuBackend& backend) {
  std::lock_guard lock(prep_mu);
  // A copy on a device a sticky error broke is let go with the device data made for it (its
  // sessions keep theirs until they close) and the rig uploaded again, to a usable device: until
  // 2026-12-07 the rig stayed pinned to the broken one while its sessions held the copy, and
  // every reopened GPU session was refused (BACKEND_AUTO ones ran on the CPU beside an idle GPU).
  if (gpu_rig && !backend.DeviceFailed(gpu_rig->device()).empty()) {
    gpu_rig.reset();
    gpu_models.clear();
    gpu_coefficients.clear();
    gpu_mesh.reset();
  }
  if (!gpu_rig) {
    auto uploaded = backend.Upload(*rig);
    if (!uploaded.ok()) return uploaded.status();
    gpu_rig = std::move(*uploaded);
  }
  return gpu_rig;
}

absl::StatusOr<std::shared_ptr<gpu::GpuMesh>> StoredRig::MeshOnGpu(gpu::GpuBackend& backend) {
  auto on_gpu = OnGpu(backend);
  if (!on_gpu.ok()) return on_gpu.status();
  auto normals = Normals();
  std::lock_guard lock(prep_mu);
  if (!gpu_mesh) {
    auto uploaded = backend.UploadMesh(**on_gpu, *normals);
    if (!uploaded.ok()) return uploaded.status();
    gpu_mesh = std::move(*uploaded);
  }
  return gpu_mesh;
}

absl::StatusOr<std::shared_ptr<gpu::GpuCoefficients>> StoredRig::CoefficientsOnGpu(
    gpu::GpuBackend& backend, const gpu::GpuRig& on_gpu, const Deformer& deformer, const std::string& key) {
  std::lock_guard lock(prep_mu);
  auto& slot = gpu_coefficients[key];
  if (!slot) {
    std::vector<float> values;
    uint32_t cols = 0;
    deformer.DeviceCoefficients(values, cols);
    auto uploaded = backend.UploadCoefficients(on_gpu, values, cols);
    if (!uploaded.ok()) {
      gpu_coefficients.erase(key);
      return uploaded.status();
    }
    slot = std::move(*uploaded);
  }
  return slot;
}

absl::StatusOr<std::shared_ptr<gpu::GpuModel>> StoredRig::ModelOnGpu(gpu::GpuBackend& backend,
                                                                     std::shared_ptr<gpu::GpuRig> on_gpu,
                                                                     const DeviceStage& stage) {
  std::lock_guard lock(prep_mu);
  auto& slot = gpu_models[stage.device_data_key];
  if (!slot) {
    auto kernel = gpu::KernelByName(stage.kernel);
    absl::StatusOr<std::shared_ptr<gpu::GpuModel>> uploaded = absl::InternalError("a device stage without its model");
    if (!kernel.ok()) uploaded = kernel.status();
    else if (stage.model) uploaded = backend.UploadModel(std::move(on_gpu), *kernel, *stage.model);
    if (!uploaded.ok()) {
      gpu_models.erase(stage.device_data_key);
      return uploaded.status();
    }
    slot = std::move(*uploaded);
  }
  return slot;
}

uint64_t StoredRig::DropUnheldDeviceCopies() {
  std::lock_guard lock(prep_mu);
  uint64_t freed = 0;
  // Sessions hold what they use (GpuSession keeps its rig, model and coefficients; frames with
  // normals the mesh), so a copy only this rig holds is in no session's frames.
  auto drop = [&](auto& map) {
    for (auto it = map.begin(); it != map.end();) {
      if (it->second.use_count() == 1) {
        freed += it->second->bytes();
        it = map.erase(it);
      } else {
        ++it;
      }
    }
  };
  drop(gpu_models);  // before the rig: a model holds its rig
  drop(gpu_coefficients);
  if (gpu_mesh && gpu_mesh.use_count() == 1) {
    freed += gpu_mesh->bytes();
    gpu_mesh.reset();
  }
  // The rig last, and only with nothing of it left here: what is kept was uploaded to its device.
  if (gpu_rig && gpu_rig.use_count() == 1 && gpu_models.empty() && gpu_coefficients.empty() && !gpu_mesh) {
    freed += gpu_rig->bytes();
    gpu_rig.reset();
  }
  return freed;
}

namespace {
// Whether `tenant` holds `r` and may see it (not an unsaved hold); under the store's lock.
bool Visible(const StoredRig& r, const std::string& tenant) {
  return r.tenants.contains(tenant) && !r.unsaved.contains(tenant);
}
}  // namespace

std::shared_ptr<StoredRig> RigStore::Find(const std::string& id, int64_t now_ms, const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto it = rigs_.find(id);
  if (it == rigs_.end() || !Visible(*it->second, tenant)) return nullptr;
  it->second->last_used_ms = now_ms;
  return it->second;
}

std::shared_ptr<StoredRig> RigStore::Adopt(const std::string& id, int64_t now_ms, const std::string& tenant,
                                           bool* had) {
  std::lock_guard lock(mu_);
  auto it = rigs_.find(id);
  if (it == rigs_.end()) return nullptr;
  StoredRig& r = *it->second;
  r.last_used_ms = now_ms;
  *had = Visible(r, tenant);
  if (!*had) {
    r.tenants.insert(tenant);
    ++r.unsaved[tenant];
  }
  return it->second;
}

size_t RigStore::ResidentBytesOf(const std::string& id) const {
  std::lock_guard lock(mu_);
  const auto it = rigs_.find(id);
  return it == rigs_.end() ? 0 : it->second->bytes;
}

RigClaim RigStore::Acquire(const std::string& id, int64_t now_ms, const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto it = rigs_.find(id);
  if (it == rigs_.end() || !Visible(*it->second, tenant)) return RigClaim();
  it->second->last_used_ms = now_ms;
  return RigClaim(it->second, tenant);
}

absl::StatusOr<std::shared_ptr<StoredRig>> RigStore::Insert(const std::string& id, Rig rig, int64_t now_ms,
                                                            const std::string& tenant, std::vector<std::string>* evicted,
                                                            bool* inserted) {
  if (inserted) *inserted = false;
  auto stored = std::make_shared<StoredRig>();
  stored->id = id;
  stored->tenants.insert(tenant);
  stored->unsaved[tenant] = 1;
  stored->bytes = rig.ResidentBytes();
  stored->rig = std::make_shared<const Rig>(std::move(rig));
  stored->last_used_ms = now_ms;

  // Rigs evicted below stop their background preparations, outside mu_ (CancelAll takes prep_mu).
  std::vector<std::shared_ptr<StoredRig>> gone;
  absl::Cleanup cancel_gone = [&gone] {
    for (auto& r : gone) r->CancelAll();
  };
  std::lock_guard lock(mu_);
  if (auto it = rigs_.find(id); it != rigs_.end()) {
    if (!Visible(*it->second, tenant)) {
      it->second->tenants.insert(tenant);
      ++it->second->unsaved[tenant];
    }
    return it->second;
  }
  size_t idle_bytes = 0;  // of the rigs no session uses, counted where eviction was tried
  if (bytes_ + stored->bytes > max_bytes_ && evicted != nullptr) {
    // Evict unused rigs, least recently used first, until the new one fits.
    std::vector<std::pair<int64_t, std::string>> idle;
    for (auto& [key, r] : rigs_) {
      // Not one an upload is keeping: it is about to be acknowledged.
      // Nor one that sessions kept for a later start need.
      if (r->sessions.load() == 0 && r->unsaved.empty() && !r->kept_sessions.load()) {
        idle.emplace_back(r->last_used_ms.load(), key);
      }
    }
    std::sort(idle.begin(), idle.end());
    // Only if evicting every idle rig makes room: a refused upload evicts nothing (until
    // 2026-12-03 it dropped idle rigs, and their --state-dir files, and was refused anyway).
    for (auto& [t, key] : idle) idle_bytes += rigs_[key]->bytes;
    if (bytes_ - idle_bytes + stored->bytes > max_bytes_) idle.clear();
    for (auto& [t, key] : idle) {
      if (bytes_ + stored->bytes <= max_bytes_) break;
      bytes_ -= rigs_[key]->bytes;
      gone.push_back(rigs_[key]);
      rigs_.erase(key);
      evicted->push_back(key);
    }
  }
  if (bytes_ + stored->bytes > max_bytes_) {
    // Until 2026-12-07 every byte held was said to be "held by rigs in use", idle rigs' too.
    const std::string held =
        evicted == nullptr ? absl::StrCat(bytes_, " bytes held")
                           : absl::StrCat(bytes_ - idle_bytes, " bytes held by rigs in use and ", idle_bytes,
                                          " by rigs no session uses (evicting them would not make room)");
    return absl::ResourceExhaustedError(absl::StrCat("rig store: ", stored->bytes, " bytes for this rig, ", held,
                                                     ", limit ", max_bytes_, " (--max-store-bytes)"));
  }
  bytes_ += stored->bytes;
  rigs_.emplace(id, stored);
  if (inserted) *inserted = true;
  return stored;
}

absl::Status RigStore::Delete(const std::string& id, const std::string& tenant) {
  // A deleted rig's background preparations stop (outside mu_): until 2026-12-03 one kept
  // running for nobody, its CPU and memory uncounted, and held up the server's shutdown.
  std::shared_ptr<StoredRig> gone;
  absl::Cleanup cancel_gone = [&gone] {
    if (gone) gone->CancelAll();
  };
  std::lock_guard lock(mu_);
  auto it = rigs_.find(id);
  if (it == rigs_.end() || !Visible(*it->second, tenant)) {
    return absl::NotFoundError(absl::StrCat("rig_id: no rig ", EchoId(id)));
  }
  StoredRig& r = *it->second;
  // Another tenant's sessions are not this caller's business (nor may their count leak): the
  // caller's own, open or being created.
  const int n = r.tenants.size() == 1 ? r.sessions.load() : r.HoldsOf(tenant);
  if (n > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("rig_id: rig ", id, " is used by ", n, " sessions (open, or being created); close them first"));
  }
  r.tenants.erase(tenant);
  if (!r.tenants.empty()) return absl::OkStatus();
  bytes_ -= it->second->bytes;
  gone = it->second;
  rigs_.erase(it);
  return absl::OkStatus();
}

void RigStore::KeepForKeptSessions(const std::string& id) {
  std::lock_guard lock(mu_);
  if (auto it = rigs_.find(id); it != rigs_.end()) it->second->kept_sessions = true;
}

void RigStore::NoKeptSessions(const std::string& id) {
  std::lock_guard lock(mu_);
  if (auto it = rigs_.find(id); it != rigs_.end()) it->second->kept_sessions = false;
}

bool RigStore::Holds(const std::string& id, const std::string& tenant) const {
  std::lock_guard lock(mu_);
  const auto it = rigs_.find(id);
  return it != rigs_.end() && it->second->tenants.contains(tenant);
}

void RigStore::Saved(const std::string& id, const std::string& tenant) {
  std::lock_guard lock(mu_);
  if (auto it = rigs_.find(id); it != rigs_.end()) it->second->unsaved.erase(tenant);
}

void RigStore::ReleaseUnsaved(const std::string& id, const std::string& tenant) {
  std::shared_ptr<StoredRig> gone;  // its background preparations stop outside mu_, as in Delete
  absl::Cleanup cancel_gone = [&gone] {
    if (gone) gone->CancelAll();
  };
  std::lock_guard lock(mu_);
  auto it = rigs_.find(id);
  if (it == rigs_.end()) return;
  const auto u = it->second->unsaved.find(tenant);
  if (u == it->second->unsaved.end() || --u->second > 0) return;  // kept already, or by another upload still
  it->second->unsaved.erase(u);
  it->second->tenants.erase(tenant);
  if (!it->second->tenants.empty()) return;
  bytes_ -= it->second->bytes;
  gone = it->second;
  rigs_.erase(it);
}

std::vector<std::string> RigStore::Tenants(const std::string& id) const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  if (auto it = rigs_.find(id); it != rigs_.end()) out.assign(it->second->tenants.begin(), it->second->tenants.end());
  std::sort(out.begin(), out.end());
  return out;
}

size_t RigStore::TenantCount(const StoredRig& rig) const {
  std::lock_guard lock(mu_);
  return rig.tenants.size();
}

std::vector<std::shared_ptr<StoredRig>> RigStore::List(const std::string& tenant, bool unsaved) const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<StoredRig>> out;
  for (auto& [id, r] : rigs_) {
    if (unsaved ? r->tenants.contains(tenant) : Visible(*r, tenant)) out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a->id < b->id; });
  return out;
}

std::vector<std::shared_ptr<StoredRig>> RigStore::List() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<StoredRig>> out;
  out.reserve(rigs_.size());
  for (auto& [id, r] : rigs_) out.push_back(r);
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a->id < b->id; });
  return out;
}

size_t RigStore::count() const {
  std::lock_guard lock(mu_);
  return rigs_.size();
}

size_t RigStore::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace sinew::server
