#include "gpu/backend.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/half.h"
#include "gpu/kernels.h"
#include "gpu/normals/normals.cuh"
#include "gpu/normals/normals_pass.h"
#include "gpu/runtime/device_api.h"
#include "gpu/runtime/program.h"

namespace sinew::gpu {

// ---------------------------------------------------------------------------------------------
// One device: its byte budget, its resident rigs and sessions, and the dispatcher thread that
// turns the queued frames of all sessions into batches.
//
// The budget (--gpu-memory-limit) covers every device byte Sinew allocates, the batch buffers
// too. Rigs, coefficients, meshes, models and program states reserve what they allocate. Each
// session reserves room for one of its frames in each of the two batch slots (its share, twice);
// the shares of all sessions are the pool. A batch is cut where its bytes would exceed the pool
// (a batch of one frame always goes), so a slot's buffers grow to at most the pool, and both
// slots to twice the pool, which the sessions reserved. What the buffers hold beyond that (after
// sessions have gone, until a reservation needs the room and idle slots are freed; or a device
// program's frame larger than its share) is charged to the budget as well, so nothing reserved
// after it can push the device past the limit, and a batch that cannot fit fails with
// RESOURCE_EXHAUSTED.

namespace {

// Bytes aligning the batch's tables to 16 (Launch), per frame: at most 15 a table, and a batch
// has its item table, one per program and one for normals.
constexpr uint64_t kAlignSlack = 64;

// The device bytes one frame takes in a batch's buffers: input (its batch item, its program's
// item, its normals item, its parameters padded to 16 bytes) and output (positions, normals, and
// a state byte per vertex, which every frame of a batch with a device program's frame has).
uint64_t FrameBatchBytes(uint64_t vertices, uint64_t param_floats, uint64_t program_item_bytes, bool normals) {
  const uint64_t in = sizeof(BatchItem) + program_item_bytes + (normals ? sizeof(NormalsItem) : 0) +
                      sizeof(float) * ((param_floats + 3) / 4 * 4);
  const uint64_t out = 13 * vertices + (normals ? 12 * vertices : 0);
  return in + out + kAlignSlack;
}

}  // namespace

class Device final : public ProgramDevice {
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

  int index() const override { return index_; }
  DeviceApi& api() override { return *api_; }

  // Why the device is unusable until the server restarts (DeviceApi::Broken); empty while it is.
  std::string failed() const { return api_->Broken(index_); }
  // A failed frame's status: the error, and what it means for the device when it is broken.
  absl::Status FrameError(const std::string& error) const {
    const std::string broken = failed();
    if (broken.empty()) return absl::InternalError(absl::StrCat("gpu ", index_, ": ", error));
    return absl::FailedPreconditionError(absl::StrCat(
        "gpu ", index_, ": ", error, "; the device is unusable until the server restarts (", broken,
        "): close this session and open another (BACKEND_AUTO opens it on the CPU)"));
  }

  // Nothing on a broken device: new rigs go to another, or fail for room (BACKEND_AUTO: the CPU).
  uint64_t free_budget() {
    if (!failed().empty()) return 0;
    std::lock_guard lock(budget_mu_);
    return limit_ - std::min(limit_, ChargedLocked());
  }
  bool Reserve(uint64_t bytes) { return ReserveBytes(bytes, 0); }
  // A session's share of the batch buffers (FrameBatchBytes of one frame), reserved for both
  // slots; what the pool gains may cover buffers already charged beyond it.
  absl::Status ReserveShare(uint64_t share, std::string_view what) {
    if (ReserveBytes(2 * share, share)) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "gpu %d: %s needs %d bytes of device memory (its room in both batch buffers), %d left within the "
        "limit (--gpu-memory-limit)", index_, what, 2 * share, free_budget()));
  }
  // Returns a share. Batch buffers beyond what the remaining shares cover stay, charged, for the
  // next batches (freeing and allocating them again on every close would cost a device
  // synchronisation each), until a reservation needs the room (Reserve) or the last session has
  // gone: then they are freed where their slot is idle, else when its batch is finished.
  void ReleaseShare(uint64_t share) {
    bool trim = false;
    {
      std::lock_guard lock(budget_mu_);
      used_ -= std::min(used_, 2 * share);
      pool_ -= std::min(pool_, share);
      trim = pool_ == 0 && buffers_ > 0;
    }
    if (trim) TrimIdle();
  }
  // Reserve, or RESOURCE_EXHAUSTED saying what needed the bytes and naming the flag.
  absl::Status Reserve(uint64_t bytes, std::string_view what) override {
    if (Reserve(bytes)) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "gpu %d: %s needs %d bytes of device memory, %d left within the limit (--gpu-memory-limit)", index_, what,
        bytes, free_budget()));
  }
  void Release(uint64_t bytes) override {
    std::lock_guard lock(budget_mu_);
    used_ -= std::min(used_, bytes);
  }
  void CountRig(int d) { rigs_ += d; }
  void CountSession(int d) { sessions_ += d; }

  absl::StatusOr<std::shared_ptr<const void>> Shared(const void* key, const MakeShared& make) override {
    std::lock_guard lock(shared_mu_);
    std::weak_ptr<const void>& slot = shared_[key];
    if (auto held = slot.lock()) return held;
    auto made = make();
    if (!made.ok()) return made.status();
    slot = *made;
    return made;
  }

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
      i.used_bytes = ChargedLocked();
    }
    i.rigs = static_cast<uint32_t>(rigs_.load());
    i.sessions = static_cast<uint32_t>(sessions_.load());
    std::lock_guard lock(mu_);
    i.utilisation = utilisation_;
    i.frames = frames_;
    i.batches = batches_;
    i.queued_frames = static_cast<uint32_t>(pending_.size());
    i.running_frames = static_cast<uint32_t>(running_);
    i.failed = failed();
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
    // Device programs: the program and the session's state, which also keys "one frame of this
    // session at a time"; where the per-vertex states go (null: not wanted).
    const DeviceProgram* program = nullptr;
    const ProgramState* state = nullptr;
    uint8_t* states = nullptr;
    // Normals wanted: the rig's adjacency on the device (offsets, around, triangles) and where
    // they go; `normal_row` filled when batched.
    NormalsItem normals{};
    float* normals_out = nullptr;
    uint32_t normal_row = 0;
    // Load shedding (FrameOutput::shed_after; sessions without device state only) and when it
    // was queued.
    std::chrono::steady_clock::time_point shed_after = std::chrono::steady_clock::time_point::max();
    std::chrono::steady_clock::time_point queued;
    // FrameOutput::stop, and the frame's item in its program's table (filled when batched).
    const StopFn* stop = nullptr;
    uint32_t program_item = 0;
  };

  void Submit(const Frame& frame, const float* params) {
    {
      std::lock_guard lock(mu_);
      if (pending_.empty()) first_arrival_ = std::chrono::steady_clock::now();
      Frame f = frame;
      f.queued = std::chrono::steady_clock::now();
      f.arena_offset = arena_.size();
      arena_.insert(arena_.end(), params, params + f.param_floats);
      pending_.push_back(f);
      pending_vertices_ += f.item.vertex_count;
      if (f.state) ++outstanding_[f.state];
    }
    cv_.notify_one();
  }

  // Waits until the session with device state `state` has no frame queued or in flight.
  void Quiesce(const ProgramState* state) {
    std::unique_lock lock(mu_);
    quiet_cv_.wait(lock, [&] { return !outstanding_.contains(state); });
  }

 private:
  // A program's stops in one batch (FrameOutput::stop), by item: what the program asks, and
  // where it stopped each (-1: not stopped). Written by the thread that runs the program, read
  // by Finish once the batch has been waited for (the same dispatcher thread).
  struct Stops final : ProgramStops {
    std::vector<const StopFn*> asks;
    std::vector<int64_t> stopped_at;
    void Reset(uint32_t items) {
      asks.assign(items, nullptr);
      stopped_at.assign(items, -1);
    }
    bool GivenUp(uint32_t item) const override { return asks[item] != nullptr && (*asks[item])(); }
    void Stopped(uint32_t item, uint32_t step) override { stopped_at[item] = step; }
  };

  // Two batch slots, each with its own stream and buffers: while the device works on one
  // batch, the dispatcher packs and launches the next, then finishes the first (copies its
  // outputs to the callers and completes their calls).
  struct Slot {
    void* queue = nullptr;
    void *host_in = nullptr, *host_out = nullptr, *dev_in = nullptr, *dev_out = nullptr;
    size_t host_in_cap = 0, host_out_cap = 0, dev_in_cap = 0, dev_out_cap = 0;
    std::vector<Frame> frames;
    uint32_t vertices = 0;  // of all its frames: the output rows, then the state bytes
    // The device programs of its frames: their limits (kept until the batch is waited for) and
    // their runs, in order of first appearance.
    struct Program {
      const DeviceProgram* program = nullptr;
      uint32_t items = 0;
      size_t table_offset = 0;
      std::vector<std::max_align_t> limits;
      Stops stops;
    };
    std::vector<Program> programs;
    std::vector<ProgramRun> runs;
    uint32_t normal_rows = 0;  // of its frames that want normals (the normals pass's limits)
    bool in_flight = false;  // written under slots_mu_
    absl::Status status;
  };

  // What the batch buffers hold beyond the sessions' shares (both slots' room). budget_mu_ held.
  static uint64_t Excess(uint64_t buffers, uint64_t pool) { return buffers > 2 * pool ? buffers - 2 * pool : 0; }
  uint64_t ChargedLocked() const { return used_ + Excess(buffers_, pool_); }

  // Reserves `bytes`, `share` of them for the pool. Where they are not there but idle batch
  // buffers hold more than the shares cover (sessions have closed since they grew), those buffers
  // are freed and it is tried again.
  bool ReserveBytes(uint64_t bytes, uint64_t share) {
    for (int attempt = 0;; ++attempt) {
      {
        std::lock_guard lock(budget_mu_);
        if (used_ + bytes + Excess(buffers_, pool_ + share) <= limit_) {
          used_ += bytes;
          pool_ += share;
          return true;
        }
        if (attempt > 0 || buffers_ <= 2 * (pool_ + share)) return false;
      }
      TrimIdle();
    }
  }

  // Grows a pinned host buffer to at least `bytes` (allocations happen only while the batches
  // grow; host memory is outside the device budget).
  bool GrowHost(void*& p, size_t& cap, size_t bytes, std::string* error) {
    if (cap >= bytes) return true;
    api_->FreeHost(p);
    cap = std::max(bytes, cap * 2);
    p = api_->AllocHost(cap, error);
    if (p == nullptr) cap = 0;  // a failed growth leaves nothing: the next batch allocates again
    return p != nullptr;
  }

  // Frees a slot's device buffers (not in flight) and uncharges them. slots_mu_ held.
  void FreeDevice(Slot& s) {
    api_->Free(index_, s.dev_in);
    api_->Free(index_, s.dev_out);
    s.dev_in = s.dev_out = nullptr;
    std::lock_guard lock(budget_mu_);
    buffers_ -= std::min<uint64_t>(buffers_, s.dev_in_cap + s.dev_out_cap);
    s.dev_in_cap = s.dev_out_cap = 0;
  }

  // Frees idle slots' device buffers while they hold more than the sessions' shares cover, so
  // that the budget gets those bytes back; a slot in flight is trimmed when its batch is
  // finished. Any thread; never called with slots_mu_ held.
  void TrimIdle() {
    std::lock_guard slots(slots_mu_);
    trim_after_flight_ = false;
    for (Slot& s : slots_) {
      if (s.dev_in_cap + s.dev_out_cap == 0) continue;
      {
        std::lock_guard lock(budget_mu_);
        if (buffers_ <= 2 * pool_) return;
      }
      if (s.in_flight) trim_after_flight_ = true;
      else FreeDevice(s);
    }
  }

  // Makes the slot's device buffers hold `in` and `out` bytes within the budget. Tried in turn:
  // the buffers that are large enough kept and the others grown by up to an eighth more than
  // this batch needs, then by nothing more, as long as the slot stays within the pool (or this
  // batch); else both made exactly this batch's size. Where none fits, the other slot's buffers
  // are freed if it is idle; if it is in flight, *finish_other is set and nothing changes (Launch
  // finishes it and calls again). slots_mu_ held.
  absl::Status FitDevice(Slot& s, Slot& other, size_t in, size_t out, bool* finish_other) {
    *finish_other = false;
    if (s.dev_in_cap >= in && s.dev_out_cap >= out) return absl::OkStatus();
    size_t in_cap = s.dev_in_cap, out_cap = s.dev_out_cap;
    bool fits = false;
    for (int attempt = 0; attempt < 2 && !fits; ++attempt) {
      if (attempt == 1) {
        if (other.dev_in_cap + other.dev_out_cap == 0) break;
        if (other.in_flight) {
          *finish_other = true;
          return absl::ResourceExhaustedError("the other batch slot is in flight");
        }
        FreeDevice(other);
      }
      std::lock_guard lock(budget_mu_);
      const uint64_t bound = std::max<uint64_t>(pool_, in + out);
      // {divisor of the headroom (0: none), whether a buffer large enough is kept}
      for (const auto& [headroom, keep] : {std::pair{8, true}, std::pair{0, true}, std::pair{0, false}}) {
        const auto size = [&](size_t cap, size_t need) {
          return keep && cap >= need ? cap : need + (headroom ? need / headroom : 0);
        };
        in_cap = size(s.dev_in_cap, in);
        out_cap = size(s.dev_out_cap, out);
        if (keep && in_cap + out_cap > bound) continue;
        const uint64_t buffers = buffers_ - (s.dev_in_cap + s.dev_out_cap) + (in_cap + out_cap);
        if (used_ + Excess(buffers, pool_) <= limit_) {
          buffers_ = buffers;  // charged before the allocations, so no reservation races them
          fits = true;
          break;
        }
      }
    }
    if (!fits) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "gpu %d: a batch needs %d bytes of device buffers, more than fits within the limit "
          "(--gpu-memory-limit) beside the rigs and sessions on the device", index_, in + out));
    }
    std::string error;
    // Both buffers that change are freed before either is allocated: the budget charged their
    // new sizes together, and a buffer grown while the other still held its old size held more
    // than that (until 2026-12-07: near the limit a batch could fail for that moment's excess).
    if (s.dev_in_cap != in_cap) {
      api_->Free(index_, s.dev_in);
      s.dev_in = nullptr;
      s.dev_in_cap = 0;
    }
    if (s.dev_out_cap != out_cap) {
      api_->Free(index_, s.dev_out);
      s.dev_out = nullptr;
      s.dev_out_cap = 0;
    }
    auto resize = [&](void*& p, size_t& cap, size_t want) {
      if (cap == want) return true;
      p = api_->Alloc(index_, want, &error);
      cap = p ? want : 0;
      if (p == nullptr) {  // a failed allocation leaves nothing: the next batch allocates again
        std::lock_guard lock(budget_mu_);
        buffers_ -= std::min<uint64_t>(buffers_, want);
      }
      return p != nullptr;
    };
    const bool in_ok = resize(s.dev_in, s.dev_in_cap, in_cap);
    const bool out_ok = resize(s.dev_out, s.dev_out_cap, out_cap);
    if (in_ok && out_ok) return absl::OkStatus();
    // Within the budget but not on the device: its memory is used past what the budget counts
    // (the CUDA context, kernels' local memory, other processes). A shortage, said as one
    // (until 2026-12-03 INTERNAL), naming the limit to lower.
    return absl::ResourceExhaustedError(absl::StrCat(
        "gpu ", index_, ": the device could not allocate a batch's buffers within --gpu-memory-limit (", error,
        "); other users of the device's memory are not counted: lower the limit"));
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
          return stop_ || backlog_ || pending_vertices_ >= options_.max_batch_vertices;
        });
        Take(slot, other, arena);
      }
      // Frames dropped by Take (past their shed_after), completed outside the lock.
      for (const Frame& f : shed_) {
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(shed_at_ - f.queued).count();
        f.done(f.context, absl::DeadlineExceededError(absl::StrCat(
                              "gpu ", index_, ": not run: the frame was still queued for the device after ", waited,
                              " ms, past the time it was to be run by")));
      }
      shed_.clear();
      if (slot.frames.empty()) {
        // Every queued frame waits for its session's previous frame, in flight in the other slot.
        if (other.in_flight) Finish(other);
        continue;
      }
      // A batch with a device program (implicit skinning) runs its host loop inside Launch on a
      // CUDA device, for as long as its frames take: the other slot's frames, done on the device
      // meanwhile or soon, are answered first rather than after it (the emulated device runs the
      // program in Wait, where this order changes nothing).
      if (other.in_flight && std::any_of(slot.frames.begin(), slot.frames.end(),
                                         [](const Frame& f) { return f.program != nullptr; })) {
        Finish(other);
      }
      Launch(slot, other, arena);
      if (other.in_flight) Finish(other);
      next = 1 - next;
    }
  }

  // Moves the queued frames that may run now into the slot (their parameters into `arena`). A
  // session with device state has at most one frame in a batch and none while its previous
  // frame is in flight; its later frames stay queued, in order. Called with mu_ held.
  void Take(Slot& slot, const Slot& other, std::vector<float>& arena) {
    slot.frames.clear();
    arena.swap(arena_);
    arena_.clear();
    busy_.clear();
    if (other.in_flight) {
      for (const Frame& f : other.frames) {
        if (f.state) busy_.insert(f.state);
      }
    }
    kept_.clear();
    pending_vertices_ = 0;
    // A batch holds at most max_batch_vertices, and at most the pool's bytes (or one frame): its
    // buffers grow to the largest batch within the budget, and its row offsets are 32-bit. Once
    // full, every later frame waits, in order.
    uint64_t room = 0;
    {
      std::lock_guard lock(budget_mu_);
      room = pool_;
    }
    uint64_t taken = 0, bytes = 0, params = 0;
    bool full = false;
    // Row and parameter offsets are 32-bit (BatchItem): a batch stops short of either passing
    // 2^32 − 1, whatever max_batch_vertices says (until 2026-12-07 an option above it wrapped);
    // its rows, a block short of that: the kernels' thread index and block count are 32-bit too.
    constexpr uint64_t kOffsetLimit = std::numeric_limits<uint32_t>::max();
    constexpr uint64_t kRowLimit = kOffsetLimit - 1024;
    shed_at_ = std::chrono::steady_clock::now();
    for (Frame& f : pending_) {
      if (f.state == nullptr && f.shed_after < shed_at_) {  // load shedding: Loop completes it
        shed_.push_back(f);
        continue;
      }
      const uint64_t frame_bytes = FrameBatchBytes(f.item.vertex_count, f.param_floats,
                                                   f.program ? f.program->item_bytes() : 0, f.normals_out != nullptr);
      const uint64_t frame_params = (f.param_floats + 3) / 4 * 4;
      full = full || (!slot.frames.empty() &&
                      (taken + f.item.vertex_count > std::min(options_.max_batch_vertices, kRowLimit) ||
                       params + frame_params > kOffsetLimit || bytes + frame_bytes > room));
      if (!full && (f.state == nullptr || busy_.insert(f.state).second)) {
        slot.frames.push_back(f);
        taken += f.item.vertex_count;
        bytes += frame_bytes;
        params += frame_params;
        continue;
      }
      const size_t at = arena_.size();
      arena_.insert(arena_.end(), arena.begin() + f.arena_offset, arena.begin() + f.arena_offset + f.param_floats);
      f.arena_offset = at;
      pending_vertices_ += f.item.vertex_count;
      kept_.push_back(f);
    }
    // first_arrival_ stays: the kept frames go with the next batch, at once where this one was
    // full (they were gathered within a window already).
    backlog_ = full && !kept_.empty();
    pending_.swap(kept_);
    running_ += slot.frames.size();
  }

  // Packs the slot's frames (batch table, each program's item table, then the parameters) and
  // launches them. `other`: the other slot, finished and freed first where the budget needs it.
  void Launch(Slot& s, Slot& other, const std::vector<float>& arena) {
    const auto align = [](size_t bytes) { return (bytes + 15) / 16 * 16; };
    size_t param_floats = 0;
    uint32_t vertices = 0;
    bool programs = false;
    for (Slot::Program& p : s.programs) p.items = 0;
    uint32_t normal_items = 0;
    s.normal_rows = 0;
    for (Frame& f : s.frames) {
      f.item.param_offset = static_cast<uint32_t>(param_floats);
      f.item.vertex_offset = vertices;
      param_floats += (f.param_floats + 3) / 4 * 4;  // 16-byte aligned per item
      vertices += f.item.vertex_count;
      if (f.program) {
        programs = true;
        ProgramOf(s, f.program).items++;
      }
      if (f.normals_out) {
        f.normal_row = s.normal_rows;
        s.normal_rows += f.item.vertex_count;
        ++normal_items;
      }
    }
    s.vertices = vertices;
    size_t offset = align(sizeof(BatchItem) * s.frames.size());
    s.runs.clear();
    for (Slot::Program& p : s.programs) {
      if (p.items == 0) continue;
      p.table_offset = offset;
      offset += align(p.program->item_bytes() * p.items);
      p.limits.resize((p.program->limits_bytes() + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
      p.program->BeginBatch(p.limits.data());
      p.stops.Reset(p.items);
      s.runs.push_back(ProgramRun{p.program, p.table_offset, p.items, p.limits.data(), &p.stops});
      p.items = 0;  // counts the packed items below
    }
    // The normals pass runs last, over the positions every stage has written.
    const size_t normals_offset = offset;
    offset += align(sizeof(NormalsItem) * normal_items);
    if (normal_items) s.runs.push_back(ProgramRun{&NormalsPass(), normals_offset, normal_items, &s.normal_rows});
    const size_t params_offset = offset;
    const size_t in_bytes = params_offset + sizeof(float) * param_floats;
    // Output: positions, then normals (3 floats per row each), then (with programs) state bytes.
    const size_t out_bytes = size_t{12} * vertices + size_t{12} * s.normal_rows + (programs ? vertices : 0);
    // Held until the batch is in flight, so that no other thread's TrimIdle frees its buffers.
    std::unique_lock slots(slots_mu_);
    bool finish_other = false;
    absl::Status fit = FitDevice(s, other, in_bytes, out_bytes, &finish_other);
    if (finish_other) {  // its buffers are needed for this batch's
      slots.unlock();    // Finish completes calls, whose callbacks may close sessions (TrimIdle)
      Finish(other);
      slots.lock();
      fit = FitDevice(s, other, in_bytes, out_bytes, &finish_other);
    }
    std::string error;
    bool ok = fit.ok() && (s.queue || (s.queue = api_->CreateQueue(index_, &error))) &&
              GrowHost(s.host_in, s.host_in_cap, in_bytes, &error) &&
              GrowHost(s.host_out, s.host_out_cap, out_bytes, &error);
    LaunchSpec spec;
    if (ok) {
      char* in = static_cast<char*>(s.host_in);
      auto* items = reinterpret_cast<BatchItem*>(in);
      auto* params = reinterpret_cast<float*>(in + params_offset);
      auto* normal_items_at = reinterpret_cast<NormalsItem*>(in + normals_offset);
      float* dev_positions = static_cast<float*>(s.dev_out);
      float* dev_normals = dev_positions + 3 * size_t{vertices};
      uint32_t n = 0;
      for (size_t i = 0; i < s.frames.size(); ++i) {
        Frame& f = s.frames[i];
        items[i] = f.item;
        spec.baseline = spec.baseline || f.item.method == static_cast<uint32_t>(GpuMethod::kBaseline);
        if (f.normals_out) {
          NormalsItem& it = normal_items_at[n++];
          it = f.normals;
          it.positions = dev_positions + 3 * size_t{f.item.vertex_offset};
          it.normals = dev_normals + 3 * size_t{f.normal_row};
          it.row_offset = f.normal_row;
          it.vertex_count = f.item.vertex_count;
        }
        const float* frame_params = arena.data() + f.arena_offset;
        std::memcpy(params + f.item.param_offset, frame_params, sizeof(float) * f.param_floats);
        if (!f.program) continue;
        Slot::Program& p = ProgramOf(s, f.program);
        f.program_item = p.items;
        p.stops.asks[p.items] = f.stop;
        void* item = in + p.table_offset + f.program->item_bytes() * p.items++;
        f.program->Pack(*f.state, frame_params, f.item.vertex_offset, f.item.param_offset, item, p.limits.data());
      }
      // The programs' item tables as packed, for their host loops (kept with the slot's input
      // until the batch is waited for).
      for (ProgramRun& r : s.runs) r.host_table = in + r.table_offset;
      spec.in = s.host_in;
      spec.din = s.dev_in;
      spec.in_bytes = in_bytes;
      spec.items = static_cast<uint32_t>(s.frames.size());
      spec.params_offset = params_offset;
      spec.total_vertices = vertices;
      spec.programs = s.runs.data();
      spec.program_count = static_cast<uint32_t>(s.runs.size());
      spec.dout = s.dev_out;
      spec.out = s.host_out;
      spec.out_bytes = out_bytes;
      spec.states_offset = size_t{12} * vertices + size_t{12} * s.normal_rows;  // after the normals
    }
    // In flight from here on (TrimIdle leaves its buffers), and the lock let go before the launch:
    // on a CUDA device a batch with a device program (implicit skinning) runs its host loop inside
    // Launch, thousands of kernels, and until 2026-12-03 held slots_mu_ through it, blocking
    // TrimIdle's callers (a session closing, a device reservation) for a whole elastic frame.
    // (The emulated device runs the work later, in Wait, so it never showed.)
    s.in_flight = true;
    slots.unlock();
    if (ok) ok = api_->Launch(s.queue, spec, &error);
    s.status = !fit.ok() ? fit : ok ? absl::OkStatus() : FrameError(error);
  }

  // The slot's entry for `program` (made on its first batch; a handful of programs exist).
  static Slot::Program& ProgramOf(Slot& s, const DeviceProgram* program) {
    for (Slot::Program& p : s.programs) {
      if (p.program == program) return p;
    }
    Slot::Program& p = s.programs.emplace_back();
    p.program = program;
    return p;
  }

  // Waits for the slot's batch, copies every frame to its caller's buffer, completes it.
  void Finish(Slot& s) {
    double busy = 0;
    std::string error;
    // A failed launch left nothing running (DeviceApi::Launch): only a launched batch is waited for.
    if (s.status.ok() && !api_->Wait(s.queue, &busy, &error)) s.status = FrameError(error);
    // Its device buffers are free for other batches, or to be given back (sessions that went
    // while it ran).
    bool trim = false;
    {
      std::lock_guard slots(slots_mu_);
      s.in_flight = false;
      trim = trim_after_flight_;
    }
    if (trim) TrimIdle();
    // The batch is counted before its frames complete, so that a caller who sees its frame done
    // also sees the batch in Info().
    {
      std::lock_guard lock(mu_);
      ++batches_;
      frames_ += s.frames.size();
      running_ -= s.frames.size();
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
    const float* out = static_cast<const float*>(s.host_out);
    const float* normals = out + 3 * size_t{s.vertices};
    const uint8_t* states = reinterpret_cast<const uint8_t*>(normals + 3 * size_t{s.normal_rows});
    for (const Frame& f : s.frames) {
      absl::Status status = s.status;
      if (status.ok() && f.program) {
        const int64_t step = ProgramOf(s, f.program).stops.stopped_at[f.program_item];
        if (step >= 0) {
          status = absl::CancelledError(absl::StrCat("gpu ", index_, ": the frame was stopped by its caller in step ",
                                                     step + 1, " of its device program; its outputs are not written "
                                                     "and its session's device state is left part way"));
        }
      }
      if (status.ok()) {
        const float* src = out + 3 * size_t{f.item.vertex_offset};
        const size_t n = 3 * size_t{f.item.vertex_count};
        if (f.format == OutputFormat::kFloat32) std::memcpy(f.out, src, sizeof(float) * n);
        else FloatsToHalves(src, static_cast<uint16_t*>(f.out), n);
        if (f.states) std::memcpy(f.states, states + f.item.vertex_offset, f.item.vertex_count);
        if (f.normals_out) std::memcpy(f.normals_out, normals + 3 * size_t{f.normal_row}, sizeof(float) * n);
      }
      // The session's state is settled before its caller hears (which may ask for the state).
      if (f.state != nullptr) {
        {
          std::lock_guard lock(mu_);
          auto it = outstanding_.find(f.state);
          if (it != outstanding_.end() && --it->second == 0) outstanding_.erase(it);
        }
        quiet_cv_.notify_all();
      }
      f.done(f.context, status);
    }
    s.frames.clear();
  }

  std::shared_ptr<DeviceApi> api_;
  const int index_;
  const GpuOptions options_;
  std::string name_;
  int major_ = 0, minor_ = 0;
  uint64_t total_ = 0, limit_ = 0;

  std::mutex budget_mu_;
  uint64_t used_ = 0;     // reserved: rigs, coefficients, meshes, models, states, 2 x the pool
  uint64_t pool_ = 0;     // the sessions' shares: one frame of each in a batch
  uint64_t buffers_ = 0;  // the slots' device buffers

  std::atomic<int> rigs_{0}, sessions_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<Frame> pending_;
  std::vector<Frame> kept_;                  // Take's scratch
  std::vector<Frame> shed_;                  // dropped by Take, completed by Loop (dispatcher thread)
  std::chrono::steady_clock::time_point shed_at_;  // when Take dropped them
  absl::flat_hash_set<const ProgramState*> busy_;  // Take's scratch
  std::vector<float> arena_;
  // Frames of device-program sessions submitted and not yet finished, by session state (Quiesce).
  absl::flat_hash_map<const ProgramState*, int> outstanding_;
  std::condition_variable quiet_cv_;
  uint64_t pending_vertices_ = 0;
  bool backlog_ = false;  // the last batch was full and left frames queued
  std::chrono::steady_clock::time_point first_arrival_;
  uint64_t frames_ = 0, batches_ = 0;
  size_t running_ = 0;  // frames taken into a batch and not yet completed (under mu_)
  double utilisation_ = 0, busy_window_ms_ = 0;
  std::chrono::steady_clock::time_point util_window_start_ = std::chrono::steady_clock::now();

  std::mutex shared_mu_;
  absl::flat_hash_map<const void*, std::weak_ptr<const void>> shared_;  // Shared()

  // Dispatcher-thread state, but for the slots' device buffers and `in_flight`, which TrimIdle
  // (any thread) reads and frees under slots_mu_.
  std::mutex slots_mu_;
  Slot slots_[2];
  bool trim_after_flight_ = false;  // TrimIdle met a slot in flight (slots_mu_)
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

class GpuMeshImpl final : public GpuMesh {
 public:
  GpuMeshImpl(Device* device, uint64_t bytes) : device_(device), bytes_(bytes) {}
  ~GpuMeshImpl() override {
    for (uint32_t* p : {offsets, around, triangles}) device_->api().Free(device_->index(), p);
    device_->Release(bytes_);
  }
  uint64_t bytes() const override { return bytes_; }

  Device* device_;
  uint64_t bytes_;
  uint32_t *offsets = nullptr, *around = nullptr, *triangles = nullptr;
  uint32_t vertex_count = 0;
};

// A device program's per-rig model (shared); it points into the rig's arrays.
class GpuModelImpl final : public GpuModel {
 public:
  GpuModelImpl(std::shared_ptr<GpuRigImpl> rig, GpuMethod kernel, const DeviceProgram* program,
               std::shared_ptr<ProgramModel> model)
      : rig_(std::move(rig)), kernel_(kernel), program_(program), model_(std::move(model)) {}
  int device() const override { return rig_->device(); }
  uint64_t bytes() const override { return model_->bytes(); }

  std::shared_ptr<GpuRigImpl> rig_;
  GpuMethod kernel_;
  const DeviceProgram* program_;
  std::shared_ptr<ProgramModel> model_;
};

class GpuSessionImpl final : public GpuSession {
 public:
  GpuSessionImpl(std::shared_ptr<GpuRigImpl> rig, const SessionSpec& spec, const KernelInfo& kernel, uint64_t share)
      : rig_(std::move(rig)),
        kernel_(kernel),
        share_(share),
        coefficients_(std::static_pointer_cast<GpuCoefficientsImpl>(spec.coefficients)),
        model_(spec.model),
        with_rest_(spec.with_rest),
        frame_floats_(spec.frame_floats) {
    rig_->device_->CountSession(1);
  }
  ~GpuSessionImpl() override {
    state_.reset();  // returns its bytes before the session is uncounted
    rig_->device_->ReleaseShare(share_ + normals_share_);
    rig_->device_->CountSession(-1);
  }
  size_t param_count() const override {
    if (state_) return state_->frame_floats();
    if (kernel_.method_frame) return frame_floats_;
    const size_t cage = kernel_.cage_points && coefficients_ ? 3 * size_t{coefficients_->cols()} : 0;
    return cage + kernel_.joint_blocks * kJointFloats * rig_->joint_count();
  }
  int device() const override { return rig_->device(); }
  uint64_t bytes() const override {
    std::lock_guard lock(normals_mu_);
    return 2 * (share_ + normals_share_) + (state_ ? state_->bytes() : 0);
  }
  // Adds the normals' rows to the session's share, once (the first frame that wants normals).
  absl::Status ReserveNormals() {
    std::lock_guard lock(normals_mu_);
    if (normals_share_) return absl::OkStatus();
    const uint64_t n = rig_->vertex_count();
    const uint64_t rows = FrameBatchBytes(n, 0, 0, true) - FrameBatchBytes(n, 0, 0, false);
    if (auto st = rig_->device_->ReserveShare(rows, "normals for a session on this rig"); !st.ok()) return st;
    normals_share_ = rows;
    return absl::OkStatus();
  }
  GpuMethod method() const override { return kernel_.kernel; }

  std::shared_ptr<GpuRigImpl> rig_;
  const KernelInfo& kernel_;
  const uint64_t share_;  // room for one of its frames in a batch (without normals)
  mutable std::mutex normals_mu_;
  uint64_t normals_share_ = 0;  // the normals' rows, once a frame wanted them
  std::shared_ptr<GpuCoefficientsImpl> coefficients_;
  // Held so that the server's cache of models (which frees those no session holds) sees it used;
  // the program's state holds the device data itself.
  std::shared_ptr<GpuModel> model_;
  bool with_rest_;
  uint32_t frame_floats_;                // method_frame kernels
  std::unique_ptr<ProgramState> state_;  // device programs
};

}  // namespace

GpuBackend::GpuBackend(std::vector<std::unique_ptr<Device>> devices) : devices_(std::move(devices)) {}
GpuBackend::~GpuBackend() = default;

absl::StatusOr<std::unique_ptr<GpuBackend>> GpuBackend::Create(const GpuOptions& options) {
  std::shared_ptr<DeviceApi> api = options.emulate_devices > 0
                                       ? MakeEmulatedApi(options.emulate_devices, options.emulate_bytes,
                                                         options.emulate_broken_after_launches)
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

std::string GpuBackend::DeviceFailed(int index) const {
  for (const auto& d : devices_) {
    if (d->index() == index) return d->failed();
  }
  return "";
}

absl::StatusOr<std::shared_ptr<GpuRig>> GpuBackend::Upload(const Rig& rig) {
  const size_t n = rig.vertex_count(), e = rig.weights.joints.size();
  const uint64_t bytes = sizeof(float) * rig.positions.size() + sizeof(uint32_t) * rig.weights.offsets.size() +
                         sizeof(uint16_t) * e + sizeof(float) * e;
  // The kernels index vertices with 32 bits and widen before multiplying by 3; the frames' vertex
  // counts are 32 bits. (Above the server's default --max-vertices of 10 million by far.)
  if (n > std::numeric_limits<uint32_t>::max() / 3) {
    return absl::InvalidArgumentError(absl::StrCat("gpu: a rig of ", n, " vertices; the GPU backend takes at most ",
                                                   std::numeric_limits<uint32_t>::max() / 3));
  }
  // The least-loaded device: the one with the most free budget; where a concurrent upload took
  // its room meanwhile, the next (until 2026-12-07 the upload was refused though another device
  // had room).
  std::vector<std::pair<uint64_t, Device*>> usable;  // free budget as read once (sorted by it)
  std::string broken;
  for (const auto& d : devices_) {
    if (std::string why = d->failed(); !why.empty()) {  // unusable until the server restarts
      broken = absl::StrCat("gpu ", d->index(), ": ", why);
      continue;
    }
    usable.emplace_back(d->free_budget(), d.get());
  }
  if (usable.empty() && !broken.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("gpu: no device can take the rig: each is unusable until the server restarts (", broken, ")"));
  }
  std::stable_sort(usable.begin(), usable.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  Device* best = nullptr;
  for (const auto& [budget, d] : usable) {
    if (d->Reserve(bytes)) {
      best = d;
      break;
    }
  }
  if (!best) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "gpu: the rig needs %d bytes of device memory; the freest device has %d left within its "
        "limit (--gpu-memory-limit)", bytes, usable.empty() ? 0 : usable.front().second->free_budget()));
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
  if (auto st = r.device_->Reserve(bytes, "the cage coefficients"); !st.ok()) return st;
  auto c = std::make_shared<GpuCoefficientsImpl>(r.device_, cols, bytes);
  std::string error;
  c->values = static_cast<float*>(r.device_->api().Alloc(r.device(), bytes, &error));
  if (!c->values || !r.device_->api().Upload(r.device(), c->values, values.data(), bytes, &error)) {
    return absl::ResourceExhaustedError(absl::StrCat("gpu ", r.device(), ": uploading coefficients: ", error));
  }
  return std::shared_ptr<GpuCoefficients>(std::move(c));
}

absl::StatusOr<std::shared_ptr<GpuMesh>> GpuBackend::UploadMesh(const GpuRig& rig, const VertexNormals& normals) {
  const auto& r = static_cast<const GpuRigImpl&>(rig);
  if (normals.empty() || normals.offsets().size() != r.vertex_count() + 1) {
    return absl::InternalError("gpu: the mesh adjacency is empty or of another rig");
  }
  const uint64_t bytes =
      sizeof(uint32_t) * (normals.offsets().size() + normals.around().size() + normals.triangles().size());
  if (auto st = r.device_->Reserve(bytes, "the rig's triangle adjacency (normals)"); !st.ok()) return st;
  auto m = std::make_shared<GpuMeshImpl>(r.device_, bytes);
  m->vertex_count = static_cast<uint32_t>(r.vertex_count());
  DeviceApi& api = r.device_->api();
  std::string error;
  auto put = [&](uint32_t*& dst, std::span<const uint32_t> v) {
    dst = static_cast<uint32_t*>(api.Alloc(r.device(), sizeof(uint32_t) * v.size(), &error));
    return dst != nullptr && api.Upload(r.device(), dst, v.data(), sizeof(uint32_t) * v.size(), &error);
  };
  if (!put(m->offsets, normals.offsets()) || !put(m->around, normals.around()) ||
      !put(m->triangles, normals.triangles())) {
    return absl::ResourceExhaustedError(absl::StrCat("gpu ", r.device(), ": uploading the triangle adjacency: ", error));
  }
  return std::shared_ptr<GpuMesh>(std::move(m));
}

absl::StatusOr<std::shared_ptr<GpuModel>> GpuBackend::UploadModel(std::shared_ptr<GpuRig> rig, GpuMethod kernel,
                                                                   const Prepared& prepared) {
  auto r = std::static_pointer_cast<GpuRigImpl>(rig);
  const KernelInfo* k = FindKernel(kernel);
  if (!k || !k->program) {
    return absl::InternalError(absl::StrCat("gpu: kernel ", uint32_t(kernel), " is not a device program"));
  }
  const DeviceProgram* program = k->program();
  RigOnDevice view;
  view.rest = r->rest;
  view.offsets = r->offsets;
  view.joints = r->joint_index;
  view.weights = r->weights;
  view.vertex_count = static_cast<uint32_t>(r->vertex_count());
  view.joint_count = static_cast<uint32_t>(r->joint_count());
  auto model = program->UploadModel(*r->device_, view, prepared);
  if (!model.ok()) return model.status();
  return std::shared_ptr<GpuModel>(std::make_shared<GpuModelImpl>(r, kernel, program, std::move(*model)));
}

absl::StatusOr<std::unique_ptr<GpuSession>> GpuBackend::CreateSession(std::shared_ptr<GpuRig> rig,
                                                                      const SessionSpec& spec) {
  auto impl = std::static_pointer_cast<GpuRigImpl>(rig);
  auto coeffs = std::static_pointer_cast<GpuCoefficientsImpl>(spec.coefficients);
  auto model = std::static_pointer_cast<GpuModelImpl>(spec.model);
  // No new session on a broken device: "no room", so that BACKEND_AUTO opens it on the CPU.
  if (const std::string broken = impl->device_->failed(); !broken.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat("gpu ", impl->device_->index(),
                                                     ": the device is unusable until the server restarts (", broken, ")"));
  }
  const KernelInfo* kernel = FindKernel(spec.method);
  if (!kernel) return absl::InternalError(absl::StrCat("gpu: no kernel ", uint32_t(spec.method)));
  // Only the cage kernels can go without the rest positions (their term is added or not); the
  // others read them for every vertex (until 2026-12-07 accepted, and the first frame read null).
  if (!spec.with_rest && !kernel->cage_points) {
    return absl::InvalidArgumentError(absl::StrCat("gpu: kernel ", std::string(kernel->name),
                                                   " reads the rest positions; with_rest = false is for cage stages"));
  }
  if (kernel->coefficients && !coeffs) return absl::InternalError("gpu: this stage needs its coefficients");
  if (const char* need = kernel->coefficients && kernel->check_cols ? kernel->check_cols(coeffs->cols()) : nullptr) {
    return absl::InternalError(absl::StrCat("gpu: kernel ", std::string(kernel->name), " needs ", need, ", not ",
                                            coeffs->cols(), " columns"));
  }
  const DeviceProgram* program = kernel->program ? kernel->program() : nullptr;
  if (program && (!model || model->rig_ != impl || model->program_ != program)) {
    return absl::InternalError("gpu: a device program's session needs its model on this rig");
  }
  // The session's share of the batch buffers (FrameBatchBytes, reserved for both slots; normals'
  // rows are added by the first frame that wants them); the program's state reserves its own.
  const uint64_t cage_floats = kernel->cage_points && coeffs ? 3 * coeffs->cols() : 0;
  uint64_t param_floats = kernel->joint_blocks * kJointFloats * impl->joint_count() + cage_floats;
  if (kernel->method_frame) {
    if (spec.frame_floats == 0) {
      return absl::InternalError(absl::StrCat("gpu: kernel ", std::string(kernel->name), " needs the method's frame size"));
    }
    param_floats = spec.frame_floats;
  }
  std::unique_ptr<ProgramState> state;
  if (program) {
    auto made = program->CreateState(*impl->device_, spec.method, model->model_, spec.params.get());
    if (!made.ok()) return made.status();
    state = std::move(*made);
    param_floats = state->frame_floats();
  }
  const uint64_t share =
      FrameBatchBytes(impl->vertex_count(), param_floats, program ? program->item_bytes() : 0, false);
  if (auto st = impl->device_->ReserveShare(share, "a session on this rig"); !st.ok()) return st;
  auto session = std::make_unique<GpuSessionImpl>(impl, spec, *kernel, share);
  session->state_ = std::move(state);
  return std::unique_ptr<GpuSession>(std::move(session));
}

absl::StatusOr<std::unique_ptr<GpuSession>> GpuBackend::CreateSession(
    std::shared_ptr<GpuRig> rig, GpuMethod method, std::shared_ptr<GpuCoefficients> coefficients,
    bool with_rest) {
  SessionSpec spec;
  spec.method = method;
  spec.coefficients = std::move(coefficients);
  spec.with_rest = with_rest;
  return CreateSession(std::move(rig), spec);
}

absl::StatusOr<std::vector<float>> GpuBackend::ReadState(GpuSession& session) {
  auto& impl = static_cast<GpuSessionImpl&>(session);
  const ProgramState* state = impl.state_.get();
  if (state == nullptr || state->resident() == nullptr || state->resident_bytes() == 0) {
    return absl::UnimplementedError("gpu: this session's kernel keeps no state that can be saved");
  }
  Device& device = *impl.rig_->device_;
  device.Quiesce(state);
  std::vector<float> out(state->resident_bytes() / sizeof(float));
  std::string error;
  if (!device.api().Download(device.index(), out.data(), state->resident(), state->resident_bytes(), &error)) {
    return absl::InternalError(absl::StrCat("gpu ", device.index(), ": reading a session's state: ", error));
  }
  return out;
}

absl::Status GpuBackend::WriteState(GpuSession& session, std::span<const float> floats) {
  auto& impl = static_cast<GpuSessionImpl&>(session);
  ProgramState* state = impl.state_.get();
  if (state == nullptr || state->resident() == nullptr || state->resident_bytes() == 0) {
    return absl::UnimplementedError("gpu: this session's kernel keeps no state that can be restored");
  }
  if (floats.size_bytes() != state->resident_bytes()) {
    return absl::InternalError(absl::StrCat("gpu: ", floats.size(), " floats for a session state of ",
                                            state->resident_bytes() / sizeof(float)));
  }
  Device& device = *impl.rig_->device_;
  device.Quiesce(state);
  std::string error;
  if (!device.api().Upload(device.index(), state->resident(), floats.data(), floats.size_bytes(), &error)) {
    return absl::InternalError(absl::StrCat("gpu ", device.index(), ": writing a session's state: ", error));
  }
  return absl::OkStatus();
}

absl::Status GpuBackend::ReserveNormals(GpuSession& session) {
  return static_cast<GpuSessionImpl&>(session).ReserveNormals();
}

void GpuBackend::Submit(GpuSession& session, std::span<const float> params, void* out, OutputFormat format,
                        FrameDone done, void* context, uint8_t* states) {
  FrameOutput output;
  output.positions = out;
  output.format = format;
  output.states = states;
  Submit(session, params, output, done, context);
}

void GpuBackend::Submit(GpuSession& session, std::span<const float> params, const FrameOutput& output, FrameDone done,
                        void* context) {
  auto& s = static_cast<GpuSessionImpl&>(session);
  const GpuRigImpl& r = *s.rig_;
  Device::Frame f{};
  f.item.rest = s.with_rest_ ? r.rest : nullptr;
  f.item.offsets = r.offsets;
  f.item.joints = r.joint_index;
  f.item.weights = r.weights;
  f.item.coeffs = s.coefficients_ ? s.coefficients_->values : nullptr;
  f.item.coeff_cols = s.coefficients_ ? s.coefficients_->cols() : 0;
  f.item.vertex_count = static_cast<uint32_t>(r.vertex_count());
  f.item.joint_count = static_cast<uint32_t>(r.joint_count());
  f.item.method = static_cast<uint32_t>(s.method());
  f.param_floats = params.size();
  f.out = output.positions;
  f.format = output.format;
  f.done = done;
  f.context = context;
  f.shed_after = output.shed_after;
  f.stop = output.stop;
  if (output.normals) {
    const auto* mesh = static_cast<const GpuMeshImpl*>(output.mesh);
    if (!mesh || mesh->device_ != r.device_ || mesh->vertex_count != r.vertex_count()) {
      return done(context, absl::InternalError("gpu: normals wanted without the rig's mesh on its device"));
    }
    if (auto st = s.ReserveNormals(); !st.ok()) return done(context, st);
    f.normals.offsets = mesh->offsets;
    f.normals.around = mesh->around;
    f.normals.triangles = mesh->triangles;
    f.normals_out = output.normals;
  }
  if (s.state_) {
    const DeviceProgram* program = s.kernel_.program();
    if (auto st = program->CheckFrame(*s.state_, params); !st.ok()) return done(context, st);
    f.program = program;
    f.state = s.state_.get();
    f.states = output.states;
  } else if (params.size() != s.param_count()) {
    return done(context, absl::InternalError(absl::StrCat("gpu: a frame of ", params.size(), " parameters, the stage takes ",
                                                          s.param_count())));
  }
  r.device_->Submit(f, params.data());
}

}  // namespace sinew::gpu
