#include "server/rig_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace sinew::server {

std::shared_ptr<const VertexNormals> StoredRig::Normals() {
  std::lock_guard lock(prep_mu);
  if (!vertex_normals) {
    vertex_normals = std::make_shared<const VertexNormals>(*rig);
    prepared_bytes += vertex_normals->Bytes();
  }
  return vertex_normals;
}

std::string PreparationKey(const MethodInfo& method, const DeformerConfig& config) {
  return absl::StrCat(std::string(method.prepare_group.empty() ? method.name : method.prepare_group), " ",
                      method.prepare_key(config));
}

absl::StatusOr<std::shared_ptr<const Prepared>> StoredRig::PreparedIfDone(const std::string& key, bool* running) {
  std::lock_guard lock(prep_mu);
  *running = false;
  auto it = preparations.find(key);
  if (it == preparations.end()) return nullptr;
  if (!it->second->done) {
    *running = true;
    return nullptr;
  }
  if (!it->second->status.ok()) return it->second->status;
  return it->second->result;
}

absl::StatusOr<std::shared_ptr<const Prepared>> StoredRig::GetOrPrepare(
    const MethodInfo& method, const DeformerConfig& config, ThreadPool* pool, int64_t now_ms) {
  const std::string key = PreparationKey(method, config);
  std::shared_ptr<Preparation> prep;
  bool mine = false;
  {
    std::unique_lock lock(prep_mu);
    auto& slot = preparations[key];
    if (!slot) {
      slot = std::make_shared<Preparation>();
      slot->key = key;
      slot->started_ms = now_ms;
      mine = true;
    }
    prep = slot;
    if (!mine) {
      prep_cv.wait(lock, [&] { return prep->done; });
      if (!prep->status.ok()) return prep->status;
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
  };
  auto result = method.prepare(*rig, config, pool, progress);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (seconds >= 1) {
    std::fprintf(stderr, "sinew-server: rig %.12s: prepared %s in %.1f s\n", id.c_str(), key.c_str(), seconds);
  }
  {
    std::lock_guard lock(prep_mu);
    prep->done = true;
    prep->finished_ms = now_ms + static_cast<int64_t>(seconds * 1000);
    prep->progress = 1;
    if (result.ok()) {
      prep->result = *result;
      prepared_bytes += (*result)->Bytes();
    } else {
      // Sessions waiting now get the error; the next request tries again (the failure may
      // come from a part of the request the key does not cover, or be transient).
      prep->status = result.status();
      if (auto it = preparations.find(key); it != preparations.end() && it->second == prep) preparations.erase(it);
    }
  }
  prep_cv.notify_all();
  return result;
}

absl::StatusOr<std::shared_ptr<gpu::GpuRig>> StoredRig::OnGpu(gpu::GpuBackend& backend) {
  std::lock_guard lock(prep_mu);
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

std::shared_ptr<StoredRig> RigStore::Find(const std::string& id, int64_t now_ms) {
  std::lock_guard lock(mu_);
  auto it = rigs_.find(id);
  if (it == rigs_.end()) return nullptr;
  it->second->last_used_ms = now_ms;
  return it->second;
}

absl::StatusOr<std::shared_ptr<StoredRig>> RigStore::Insert(const std::string& id, Rig rig,
                                                            int64_t now_ms) {
  auto stored = std::make_shared<StoredRig>();
  stored->id = id;
  stored->bytes = rig.ResidentBytes();
  stored->rig = std::make_shared<const Rig>(std::move(rig));
  stored->last_used_ms = now_ms;

  std::lock_guard lock(mu_);
  if (auto it = rigs_.find(id); it != rigs_.end()) return it->second;
  if (bytes_ + stored->bytes > max_bytes_) {
    // Evict unused rigs, least recently used first, until the new one fits.
    std::vector<std::pair<int64_t, std::string>> idle;
    for (auto& [key, r] : rigs_) {
      if (r->sessions.load() == 0) idle.emplace_back(r->last_used_ms.load(), key);
    }
    std::sort(idle.begin(), idle.end());
    for (auto& [t, key] : idle) {
      if (bytes_ + stored->bytes <= max_bytes_) break;
      bytes_ -= rigs_[key]->bytes;
      rigs_.erase(key);
    }
    if (bytes_ + stored->bytes > max_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rig store: ", stored->bytes, " bytes for this rig, ", bytes_,
          " bytes held by rigs in use, limit ", max_bytes_, " (--max-store-bytes)"));
    }
  }
  bytes_ += stored->bytes;
  rigs_.emplace(id, stored);
  return stored;
}

absl::Status RigStore::Delete(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = rigs_.find(id);
  if (it == rigs_.end()) return absl::NotFoundError(absl::StrCat("rig_id: no rig ", id));
  if (int n = it->second->sessions.load(); n > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("rig_id: rig ", id, " is used by ", n, " sessions; close them first"));
  }
  bytes_ -= it->second->bytes;
  rigs_.erase(it);
  return absl::OkStatus();
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
