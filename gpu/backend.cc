#include "gpu/backend.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/half.h"
#include "gpu/runtime/device_api.h"

namespace sinew::gpu {

// ---------------------------------------------------------------------------------------------
// One device: its byte budget, its resident rigs and sessions, and the dispatcher thread that
// turns the queued frames of all sessions into batches.

class Device {
 public:
  Device(std::shared_ptr<DeviceApi> api, int index, const GpuOptions& options)
      : api_(std::move(api)), index_(index), options_(options) {
    int major = 0, minor = 0;
    uint64_t total = 0;
    api_->Properties(index, &name_, &major, &minor, &total);
    major_ = major;
    minor_ = minor;
    total_ = total;
    limit_ = options.memory_limit_bytes ? std::min<uint64_t>(options.memory_limit_bytes, total)
                                        : total / 10 * 9;
    thread_ = std::thread([this] { Loop(); });
  }

  ~Device() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (Slot& s : slots_) {
      if (s.queue) api_->DestroyQueue(s.queue);
      api_->FreeHost(s.host_in);
      api_->FreeHost(s.host_out);
      api_->Free(index_, s.dev_in);
      api_->Free(index_, s.dev_out);
    }
  }

  int index() const { return index_; }
  DeviceApi& api() { return *api_; }

  uint64_t free_budget() {
    std::lock_guard lock(budget_mu_);
    return limit_ - used_;
  }
  bool Reserve(uint64_t bytes) {
    std::lock_guard lock(budget_mu_);
    if (used_ + bytes > limit_) return false;
    used_ += bytes;
    return true;
  }
  void Release(uint64_t bytes) {
    std::lock_guard lock(budget_mu_);
    used_ -= std::min(used_, bytes);
  }
  void CountRig(int d) { rigs_ += d; }
  void CountSession(int d) { sessions_ += d; }

  DeviceInfo Info() {
    DeviceInfo i;
    i.index = index_;
    i.name = name_;
    i.compute_major = major_;
    i.compute_minor = minor_;
    i.total_bytes = total_;
    i.limit_bytes = limit_;
    {
      std::lock_guard lock(budget_mu_);
      i.used_bytes = used_;
    }
    i.rigs = static_cast<uint32_t>(rigs_.load());
    i.sessions = static_cast<uint32_t>(sessions_.load());
    std::lock_guard lock(mu_);
    i.utilisation = utilisation_;
    i.frames = frames_;
    i.batches = batches_;
    return i;
  }

  struct Frame {
    BatchItem item;        // vertex_offset/param_offset filled when batched
    size_t param_floats;
    size_t arena_offset;   // where its parameters sit in the arena
    void* out;
    OutputFormat format;
    FrameDone done;
    void* context;
  };

  void Submit(const BatchItem& item, const float* params, size_t floats, void* out,
              OutputFormat format, FrameDone done, void* context) {
    {
      std::lock_guard lock(mu_);
      if (pending_.empty()) first_arrival_ = std::chrono::steady_clock::now();
      const size_t at = arena_.size();
      arena_.insert(arena_.end(), params, params + floats);
      pending_.push_back({item, floats, at, out, format, done, context});
      pending_vertices_ += item.vertex_count;
    }
    cv_.notify_one();
  }

 private:
  // Two batch slots, each with its own stream and buffers: while the device works on one
  // batch, the dispatcher packs and launches the next, then finishes the first (copies its
  // outputs to the callers and completes their calls).
  struct Slot {
    void* queue = nullptr;
    void *host_in = nullptr, *host_out = nullptr, *dev_in = nullptr, *dev_out = nullptr;
    size_t host_in_cap = 0, host_out_cap = 0, dev_in_cap = 0, dev_out_cap = 0;
    std::vector<Frame> frames;
    bool in_flight = false;
    absl::Status status;
  };

  // Grows a pinned host buffer / device buffer to at least `bytes` (allocations happen only
  // while the batches grow).
  bool GrowHost(void*& p, size_t& cap, size_t bytes, std::string* error) {
    if (cap >= bytes) return true;
    api_->FreeHost(p);
    cap = std::max(bytes, cap * 2);
    p = api_->AllocHost(cap, error);
    return p != nullptr;
  }
  bool GrowDevice(void*& p, size_t& cap, size_t bytes, std::string* error) {
    if (cap >= bytes) return true;
    api_->Free(index_, p);
    cap = std::max(bytes, cap * 2);
    p = api_->Alloc(index_, cap, error);
    return p != nullptr;
  }

  void Loop() {
    std::vector<float> arena;
    size_t next = 0;  // the slot the next batch goes to
    for (;;) {
      Slot& slot = slots_[next];
      Slot& other = slots_[1 - next];
      {
        std::unique_lock lock(mu_);
        if (pending_.empty() && other.in_flight) {
          // Nothing new to overlap with: finish the batch in flight first.
          lock.unlock();
          Finish(other);
          continue;
        }
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        if (pending_.empty()) return;  // stopping, nothing queued or in flight
        // The batching window: wait for other sessions' frames, unless the batch is full.
        const auto deadline = first_arrival_ + options_.batch_window;
        cv_.wait_until(lock, deadline, [&] {
          return stop_ || pending_vertices_ >= options_.max_batch_vertices;
        });
        slot.frames.swap(pending_);
        arena.swap(arena_);
        pending_.clear();
        arena_.clear();
        pending_vertices_ = 0;
      }
      Launch(slot, arena);
      if (other.in_flight) Finish(other);
      next = 1 - next;
    }
  }

  // Packs the slot's frames (batch table, then joint data) and launches them.
  void Launch(Slot& s, const std::vector<float>& arena) {
    const size_t items_bytes = (sizeof(BatchItem) * s.frames.size() + 15) / 16 * 16;
    size_t param_floats = 0;
    uint32_t vertices = 0;
    for (Frame& f : s.frames) {
      f.item.param_offset = static_cast<uint32_t>(param_floats);
      f.item.vertex_offset = vertices;
      param_floats += (f.param_floats + 3) / 4 * 4;  // 16-byte aligned per item
      vertices += f.item.vertex_count;
    }
    const size_t in_bytes = items_bytes + sizeof(float) * param_floats;
    const size_t out_bytes = size_t{12} * vertices;
    std::string error;
    bool ok = (s.queue || (s.queue = api_->CreateQueue(index_, &error))) &&
              GrowHost(s.host_in, s.host_in_cap, in_bytes, &error) &&
              GrowHost(s.host_out, s.host_out_cap, out_bytes, &error) &&
              GrowDevice(s.dev_in, s.dev_in_cap, in_bytes, &error) &&
              GrowDevice(s.dev_out, s.dev_out_cap, out_bytes, &error);
    if (ok) {
      auto* items = static_cast<BatchItem*>(s.host_in);
      for (size_t i = 0; i < s.frames.size(); ++i) items[i] = s.frames[i].item;
      auto* joints = reinterpret_cast<float*>(static_cast<char*>(s.host_in) + items_bytes);
      for (const Frame& f : s.frames) {
        std::memcpy(joints + f.item.param_offset, arena.data() + f.arena_offset,
                    sizeof(float) * f.param_floats);
      }
      ok = api_->Launch(s.queue, s.host_in, s.dev_in, in_bytes, s.frames.size(), items_bytes, vertices,
                        s.dev_out, s.host_out, &error);
    }
    s.status = ok ? absl::OkStatus() : absl::InternalError(absl::StrCat("gpu ", index_, ": ", error));
    s.in_flight = true;
  }

  // Waits for the slot's batch, copies every frame to its caller's buffer, completes it.
  void Finish(Slot& s) {
    double busy = 0;
    std::string error;
    if (s.status.ok() && !api_->Wait(s.queue, &busy, &error)) {
      s.status = absl::InternalError(absl::StrCat("gpu ", index_, ": ", error));
    }
    const float* out = static_cast<const float*>(s.host_out);
    for (const Frame& f : s.frames) {
      if (s.status.ok()) {
        const float* src = out + 3 * size_t{f.item.vertex_offset};
        const size_t n = 3 * size_t{f.item.vertex_count};
        if (f.format == OutputFormat::kFloat32) std::memcpy(f.out, src, sizeof(float) * n);
        else FloatsToHalves(src, static_cast<uint16_t*>(f.out), n);
      }
      f.done(f.context, s.status);
    }
    const size_t count = s.frames.size();
    s.frames.clear();
    s.in_flight = false;
    std::lock_guard lock(mu_);
    ++batches_;
    frames_ += count;
    // Utilisation: device-busy time over wall time, in windows of at least one second.
    busy_window_ms_ += busy;
    const auto now = std::chrono::steady_clock::now();
    const double window = std::chrono::duration<double, std::milli>(now - util_window_start_).count();
    if (window >= 1000) {
      utilisation_ = std::min(1.0, busy_window_ms_ / window);
      busy_window_ms_ = 0;
      util_window_start_ = now;
    }
  }

  std::shared_ptr<DeviceApi> api_;
  const int index_;
  const GpuOptions options_;
  std::string name_;
  int major_ = 0, minor_ = 0;
  uint64_t total_ = 0, limit_ = 0;

  std::mutex budget_mu_;
  uint64_t used_ = 0;
  std::atomic<int> rigs_{0}, sessions_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<Frame> pending_;
  std::vector<float> arena_;
  uint64_t pending_vertices_ = 0;
  std::chrono::steady_clock::time_point first_arrival_;
  uint64_t frames_ = 0, batches_ = 0;
  double utilisation_ = 0, busy_window_ms_ = 0;
  std::chrono::steady_clock::time_point util_window_start_ = std::chrono::steady_clock::now();

  Slot slots_[2];  // dispatcher-thread state
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------

namespace {

class GpuRigImpl final : public GpuRig {
 public:
  GpuRigImpl(Device* device, size_t vertices, size_t joints) : device_(device), vertices_(vertices), joints_(joints) {}
  ~GpuRigImpl() override {
    for (void* p : {static_cast<void*>(rest), static_cast<void*>(offsets), static_cast<void*>(joint_index),
                    static_cast<void*>(weights)}) {
      device_->api().Free(device_->index(), p);
    }
    device_->Release(bytes_);
    device_->CountRig(-1);
  }
  int device() const override { return device_->index(); }
  uint64_t bytes() const override { return bytes_; }
  size_t vertex_count() const override { return vertices_; }
  size_t joint_count() const override { return joints_; }

  Device* device_;
  size_t vertices_, joints_;
  uint64_t bytes_ = 0;
  float* rest = nullptr;
  uint32_t* offsets = nullptr;
  uint16_t* joint_index = nullptr;
  float* weights = nullptr;
};

class GpuCoefficientsImpl final : public GpuCoefficients {
 public:
  GpuCoefficientsImpl(Device* device, uint32_t cols, uint64_t bytes) : device_(device), cols_(cols), bytes_(bytes) {}
  ~GpuCoefficientsImpl() override {
    device_->api().Free(device_->index(), values);
    device_->Release(bytes_);
  }
  uint32_t cols() const override { return cols_; }
  uint64_t bytes() const override { return bytes_; }

  Device* device_;
  uint32_t cols_;
  uint64_t bytes_;
  float* values = nullptr;
};

class GpuSessionImpl final : public GpuSession {
 public:
  GpuSessionImpl(std::shared_ptr<GpuRigImpl> rig, GpuMethod method, uint64_t bytes,
                 std::shared_ptr<GpuCoefficientsImpl> coefficients, bool with_rest)
      : rig_(std::move(rig)), method_(method), bytes_(bytes), coefficients_(std::move(coefficients)),
        with_rest_(with_rest) {
    rig_->device_->CountSession(1);
  }
  size_t param_count() const override {
    const size_t cage = coefficients_ ? 3 * size_t{coefficients_->cols()} : 0;
    const size_t joints = kJointFloats * rig_->joint_count();
    switch (method_) {
      case GpuMethod::kLbs:
      case GpuMethod::kDqs: return joints;
      case GpuMethod::kCage: return cage;
      default: return cage + joints;
    }
  }
  ~GpuSessionImpl() override {
    rig_->device_->Release(bytes_);
    rig_->device_->CountSession(-1);
  }
  int device() const override { return rig_->device(); }
  uint64_t bytes() const override { return bytes_; }
  GpuMethod method() const override { return method_; }

  std::shared_ptr<GpuRigImpl> rig_;
  GpuMethod method_;
  uint64_t bytes_;
  std::shared_ptr<GpuCoefficientsImpl> coefficients_;
  bool with_rest_;
};

}  // namespace

GpuBackend::GpuBackend(std::vector<std::unique_ptr<Device>> devices) : devices_(std::move(devices)) {}
GpuBackend::~GpuBackend() = default;

absl::StatusOr<std::unique_ptr<GpuBackend>> GpuBackend::Create(const GpuOptions& options) {
  std::shared_ptr<DeviceApi> api = options.emulate_devices > 0
                                       ? MakeEmulatedApi(options.emulate_devices, options.emulate_bytes)
                                       : MakeCudaApi();
  if (!api) return absl::UnavailableError("no GPU backend: Sinew was built without CUDA (nvcc not found)");
  std::string error;
  const int n = api->Count(&error);
  if (n <= 0) return absl::UnavailableError(absl::StrCat("no usable GPU: ", error.empty() ? "no device" : error));
  std::vector<std::unique_ptr<Device>> devices;
  for (int i = 0; i < n; ++i) devices.push_back(std::make_unique<Device>(api, i, options));
  return std::unique_ptr<GpuBackend>(new GpuBackend(std::move(devices)));
}

std::vector<DeviceInfo> GpuBackend::Devices() const {
  std::vector<DeviceInfo> out;
  for (const auto& d : devices_) out.push_back(d->Info());
  return out;
}

absl::StatusOr<std::shared_ptr<GpuRig>> GpuBackend::Upload(const Rig& rig) {
  const size_t n = rig.vertex_count(), e = rig.weights.joints.size();
  const uint64_t bytes = sizeof(float) * rig.positions.size() + sizeof(uint32_t) * rig.weights.offsets.size() +
                         sizeof(uint16_t) * e + sizeof(float) * e;
  // The least-loaded device: the one with the most free budget.
  Device* best = nullptr;
  for (const auto& d : devices_) {
    if (!best || d->free_budget() > best->free_budget()) best = d.get();
  }
  if (!best || !best->Reserve(bytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "gpu: the rig needs %d bytes of device memory; the freest device has %d left within its "
        "limit (--gpu-memory-limit)", bytes, best ? best->free_budget() : 0));
  }
  best->CountRig(1);
  auto g = std::make_shared<GpuRigImpl>(best, n, rig.joint_count());
  g->bytes_ = bytes;
  DeviceApi& api = best->api();
  std::string error;
  auto put = [&](auto*& dst, const auto& v) {
    using T = std::remove_pointer_t<std::remove_reference_t<decltype(dst)>>;
    const size_t size = sizeof(T) * std::max<size_t>(v.size(), 1);
    dst = static_cast<T*>(api.Alloc(best->index(), size, &error));
    return dst != nullptr && (v.empty() || api.Upload(best->index(), dst, v.data(), sizeof(T) * v.size(), &error));
  };
  if (!put(g->rest, rig.positions) || !put(g->offsets, rig.weights.offsets) ||
      !put(g->joint_index, rig.weights.joints) || !put(g->weights, rig.weights.weights)) {
    return absl::ResourceExhaustedError(absl::StrCat("gpu ", best->index(), ": uploading the rig: ", error));
  }
  return std::shared_ptr<GpuRig>(std::move(g));
}

absl::StatusOr<std::shared_ptr<GpuCoefficients>> GpuBackend::UploadCoefficients(
    const GpuRig& rig, const std::vector<float>& values, uint32_t cols) {
  const auto& r = static_cast<const GpuRigImpl&>(rig);
  if (cols == 0 || values.size() != size_t{cols} * r.vertex_count()) {
    return absl::InvalidArgumentError("gpu: coefficient matrix does not have one row per vertex");
  }
  const uint64_t bytes = sizeof(float) * values.size();
  if (!r.device_->Reserve(bytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "gpu %d: the coefficients need %d bytes of device memory, %d left within the limit "
        "(--gpu-memory-limit)", r.device(), bytes, r.device_->free_budget()));
  }
  auto c = std::make_shared<GpuCoefficientsImpl>(r.device_, cols, bytes);
  std::string error;
  c->values = static_cast<float*>(r.device_->api().Alloc(r.device(), bytes, &error));
  if (!c->values || !r.device_->api().Upload(r.device(), c->values, values.data(), bytes, &error)) {
    return absl::ResourceExhaustedError(absl::StrCat("gpu ", r.device(), ": uploading coefficients: ", error));
  }
  return std::shared_ptr<GpuCoefficients>(std::move(c));
}

absl::StatusOr<std::unique_ptr<GpuSession>> GpuBackend::CreateSession(
    std::shared_ptr<GpuRig> rig, GpuMethod method, std::shared_ptr<GpuCoefficients> coefficients,
    bool with_rest) {
  auto impl = std::static_pointer_cast<GpuRigImpl>(rig);
  auto coeffs = std::static_pointer_cast<GpuCoefficientsImpl>(coefficients);
  const bool cage = method != GpuMethod::kLbs && method != GpuMethod::kDqs;
  if (cage && !coeffs) return absl::InternalError("gpu: a cage stage needs its coefficients");
  // The session's share of the batch buffers: its parameters and its output, both ways.
  const uint64_t params = sizeof(float) * (kJointFloats * impl->joint_count() + (coeffs ? 3 * coeffs->cols() : 0));
  const uint64_t bytes = sizeof(BatchItem) + params + uint64_t{12} * impl->vertex_count();
  if (!impl->device_->Reserve(bytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "gpu %d: a session on this rig needs %d bytes of device memory, %d left within the "
        "limit (--gpu-memory-limit)", impl->device(), bytes, impl->device_->free_budget()));
  }
  return std::unique_ptr<GpuSession>(new GpuSessionImpl(std::move(impl), method, bytes, std::move(coeffs), with_rest));
}

void GpuBackend::Submit(GpuSession& session, const float* params, void* out, OutputFormat format,
                        FrameDone done, void* context) {
  auto& s = static_cast<GpuSessionImpl&>(session);
  const GpuRigImpl& r = *s.rig_;
  BatchItem item{};
  item.rest = s.with_rest_ ? r.rest : nullptr;
  item.offsets = r.offsets;
  item.joints = r.joint_index;
  item.weights = r.weights;
  item.coeffs = s.coefficients_ ? s.coefficients_->values : nullptr;
  item.coeff_cols = s.coefficients_ ? s.coefficients_->cols() : 0;
  item.vertex_count = static_cast<uint32_t>(r.vertex_count());
  item.method = static_cast<uint32_t>(s.method());
  r.device_->Submit(item, params, s.param_count(), out, format, done, context);
}

}  // namespace sinew::gpu
