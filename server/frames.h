// The one frame path of the service. Deform, StreamDeform and DeformClip all decode a frame into
// their session's scratch and hand a FrameJob to the session's FrameBackend, which deforms it
// into the job's output buffers and calls job.done exactly once: before Run returns (the CPU
// backend, on the calling worker thread) or later from the device's completion thread (the GPU
// backend, whose batches gather the frames of many sessions; a frame with a quality report from
// its measuring thread). The caller owns the job and keeps it (and its buffers) alive until done.
//
// The caller locks the session, decodes the frame's inputs into the session's scratch and passes
// the lock to Run, which releases it once the inputs have been consumed: frames of one session
// never overlap on the CPU, and on the GPU the device keeps a stateful session's frames in
// submission order.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <grpcpp/server_context.h>

#include "core/parallel/thread_pool.h"
#include "gpu/backend.h"
#include "server/metrics.h"
#include "server/session_manager.h"
#include "server/shared_memory.h"
#include "sinew/v1/sinew.pb.h"

namespace sinew::server {

using FrameDone = void (*)(void* context, const absl::Status& status);
class GpuFrames;

// Where a frame's results go: the fields of a DeformResponse or a DeformClipResponse.
struct FrameTarget {
  std::string* positions = nullptr;      // 3 values per vertex in the session's encoding
  std::string* posed_cage = nullptr;     // extras: float32 x,y,z, when wanted
  std::string* rest_cage = nullptr;
  std::string* joints = nullptr;
  std::string* vertex_states = nullptr;  // one byte per vertex, when wanted
  std::string* normals = nullptr;        // per vertex in the wanted NormalEncoding
  std::string* base_points = nullptr;    // float32 x,y,z per vertex, when wanted
  v1::QualityReport* quality = nullptr;  // when wanted
  uint64_t compute_ns = 0;               // set before done
  uint32_t method = 0;                   // set before done: the method (wire id) that produced the frame
  bool from_rest = false;                // set before done: a stateful session's history began here
};

// A call's wish to stop its frames (FrameInput::stop): set when the client cancels the call or
// its deadline passes (the reactor's OnCancel), read by a long frame between its iterations (the
// elastic implicit method's relaxation rounds), which then ends CANCELLED and leaves its
// session's state as it was. A unary call's frame that runs inside its method handler (inline)
// asks the call's context as well: gRPC calls OnCancel only after the handler has returned.
// (Elastic implicit frames never run inline, Service::RunsInline; a CPU pbs frame may, and asks.)
// Owned by the call; neither copied nor moved.
struct StopFlag {
  std::atomic<bool> wanted{false};
  grpc::CallbackServerContext* context = nullptr;  // a unary call's, or null
  const StopFn fn{[this] {
    return wanted.load(std::memory_order_relaxed) || (context != nullptr && context->IsCancelled());
  }};
};

struct FrameJob {
  std::shared_ptr<Session> session;  // held until done (a stream's job lets go once its answer is built)
  FrameInput input;                  // points into the session's scratch
  bool reset = false;                // forget the session's history first
  uint64_t frame = 0;                // its number: the session's last_frame once applied
  v1::FrameOutputs want;             // extras wanted (null targets: none)
  FrameTarget out;
  FrameDone done = nullptr;
  void* context = nullptr;
  // Filled by the backend.
  std::chrono::steady_clock::time_point start;
  Metrics* metrics = nullptr;
  // GPU frames that want mesh normals: the device's float32 normals, encoded on completion
  // (kept by the caller's job from frame to frame, so that a stream allocates them once).
  std::vector<float> staging_normals;
  bool device_normals = false;
  // The frame's positions as float32 where the response carries something else: a quantized
  // encoding's input (see EncodeQuantizedPositions), a float16 device frame's quality report.
  std::vector<float> staging_positions;
  // FrameOutputs.shared_memory: the region (held while the frame runs) and where in it. A CPU
  // session's float32 frame is deformed straight there, and a GPU session's float32 or float16
  // frame is copied there from the device (shm_direct); others are copied there once encoded
  // (PlaceInSharedMemory).
  std::shared_ptr<SharedMemoryMapping> shm;
  uint64_t shm_offset = 0;
  bool shm_direct = false;
  // GPU frames: the session's submission count at this frame, the submission of the device
  // state it goes on from (the latest restart: itself, an earlier frame from rest, a clip's start
  // or SetSessionState), and whether its state can leave float's range there
  // (Session::device_lost). A frame whose base was left unusable by a frame before it (lost in
  // [device_from, device_seq)) ran, or would run, on that state: GpuFrames::Completed answers it
  // ABORTED.
  uint64_t device_seq = 0, device_from = 0;
  bool device_can_diverge = false;
  // The session's frames go on from a state the device keeps (Session::stateful, and
  // DeviceStage::state_on_device): a frame that fails there leaves it unusable. A stateful
  // session whose history stays on the host (supercages, swing-twist) took the frame into it when
  // it was submitted, and a device failure leaves that history as it is.
  bool device_stateful = false;
  bool host_history = false;  // stateful with its history on the host
  GpuFrames* gpu_frames = nullptr;  // the backend of a GPU frame (its completion)
  absl::Status device_result;       // a GPU frame's status from the device, for its encoding thread
  // Admission control (--max-queue-ms) for Deform and StreamDeform frames handed to the worker
  // pool: when that was, and how long the frame may wait in all, for a worker and, a GPU
  // session's frame, for the device. 0: never shed (DeformClip, frames run inline).
  std::chrono::steady_clock::time_point queued_at;
  uint32_t max_queue_ms = 0;
  bool device_sheddable = false;  // GpuFrames::Run gave the device a time to drop it at
  // The call's StopFlag::fn (null: none), kept from frame to frame (Fresh): DecodeFrame puts it
  // into input.stop. A CPU frame that stops leaves its session's state as it was; a device
  // frame's program (gpu::FrameOutput::stop) leaves it part way, so the session's next frame
  // starts from rest (Session::device_lost).
  const StopFn* stop = nullptr;
  // A GPU elastic frame's stop (gpu::FrameOutput::stop): its caller's, or a frame before it left
  // the state it goes on from part way. Made per frame by GpuFrames::Run.
  StopFn device_stop;

  // Ready for the next frame: every field as new, the staging buffer keeping its capacity.
  void Fresh() {
    FrameJob next;
    next.staging_normals.swap(staging_normals);
    next.staging_positions.swap(staging_positions);
    next.stop = stop;
    *this = std::move(next);
  }
};

class FrameBackend {
 public:
  virtual ~FrameBackend() = default;
  virtual void Run(FrameJob& job, std::unique_lock<std::mutex> session_lock) = 0;
};

// Frames on the calling (worker) thread; the deformer parallelises over `pool`.
class CpuFrames final : public FrameBackend {
 public:
  CpuFrames(ThreadPool& pool, Metrics& metrics) : pool_(pool), metrics_(metrics) {}
  void Run(FrameJob& job, std::unique_lock<std::mutex> session_lock) override;

 private:
  ThreadPool& pool_;
  Metrics& metrics_;
};

// Everything but the per-vertex stage on the calling thread, the stage in the device's next batch.
// A frame completes on the device's dispatcher thread, which launches and completes every
// session's batches on that device, unless its encoding is work: a quantized encoding's
// (QUANTIZED16, DELTA) or its normals' is done, and the frame completed, on this backend's
// encoding threads (half the cores, at least one), so that the dispatcher goes on to the next
// batch meanwhile (until 2026-12-02 it encoded them itself: 8 sessions of 200k vertices on the
// emulated device reached three quarters of float32's frame rate in QUANTIZED16, the dispatcher's
// one core busy and the other idle). A frame that asks for a quality report (milliseconds to
// seconds of measuring) is measured and completed on this backend's measuring thread, one at a
// time in the order they are ready (a quantized frame's once its encoding thread is done, so not
// always the order they finish on the devices): it holds neither the device's other sessions nor
// the worker pool. Its compute_ns includes the measure (as on the CPU) and its wait for the
// thread.
class GpuFrames final : public FrameBackend {
 public:
  // `make_room`: frees the device copies no session holds (every rig's), returning the bytes
  // freed; asked when a frame's device data (the normals' adjacency) does not fit.
  GpuFrames(gpu::GpuBackend& gpu, Metrics& metrics, std::function<uint64_t()> make_room);
  // Encodes and measures the frames queued for it, then stops its threads (no frame is in flight
  // by then: their calls hold the service).
  ~GpuFrames() override;
  void Run(FrameJob& job, std::unique_lock<std::mutex> session_lock) override;

 private:
  // The device's answer (on the dispatcher thread): Finish here, or on the encoding threads.
  static void Completed(void* job, const absl::Status& status);
  // The frame's checks, encodings and completion (job.device_result: the device's answer).
  static void Finish(void* job);
  // Queues the job's quality measure and completion for the measuring thread (started on first use).
  void Measure(FrameJob& job);
  void MeasureLoop();
  gpu::GpuBackend& gpu_;
  Metrics& metrics_;
  std::function<uint64_t()> make_room_;
  std::mutex measure_mu_;
  std::condition_variable measure_cv_;
  std::deque<FrameJob*> measure_queue_;  // guarded by measure_mu_
  bool stop_measuring_ = false;          // guarded by measure_mu_
  std::thread measurer_;
  std::unique_ptr<ThreadPool> encoders_;  // reset first on destruction: it may queue measures
};

// The answer to a frame shed by admission control: it waited `waited` (for a worker, or for
// the device) and was not deformed.
absl::Status Overloaded(std::chrono::steady_clock::duration waited, uint32_t max_queue_ms, bool device);

// Whether the session's encoding is made from float32 positions after the frame (QUANTIZED16,
// DELTA): its backend leaves them in the job's staging_positions.
inline bool Quantized(v1::OutputEncoding e) {
  return e == v1::OUTPUT_ENCODING_QUANTIZED16 || e == v1::OUTPUT_ENCODING_DELTA;
}

// A call's DELTA state (StreamDeform, DeformClip): the encoder of the session whose frames it
// last sent. A frame of another session starts a new one (a key frame).
struct StreamEncoder {
  std::weak_ptr<const Session> session;
  std::optional<wire::DeltaEncoder> delta;
};

// A finished frame of a quantized encoding: its float32 positions (job.staging_positions) into
// job.out.positions and `quantization`, through the call's `stream` (null: a unary call, whose
// frames are key frames); `key_frame`: make it one. Called once per frame sent, in the order
// sent. A non-finite or off-grid vertex fails the frame (the stream's state unchanged).
absl::Status EncodeQuantizedPositions(FrameJob& job, StreamEncoder* stream, bool key_frame,
                                      v1::Quantization* quantization);

// A finished frame that asked for shared memory: its positions (already there, or the encoded
// bytes in job.out.positions, moved there) and `placement` saying where. A frame whose encoded
// positions do not fit fails with OUT_OF_RANGE.
absl::Status PlaceInSharedMemory(FrameJob& job, const v1::SharedMemoryTarget& asked, v1::SharedMemoryTarget* placement);

// The requested outputs that can be refused before the frame is deformed (a quality report of a
// point set, an unknown normal encoding, an extra the method does not have: Deformer::Offers): a
// frame refused here does not count.
absl::Status CheckOutputs(Session& session, const v1::FrameOutputs& want);
// The extras a frame asked for (posed cage, rest cage, joints, vertex states unless the device
// makes them, normals), from the session's deformer into `out`. Mesh normals come from
// `positions` (float32, the frame's result); with none given they are left to the device
// (GpuFrames). The session's lock is held; `want` passed CheckOutputs (DecodeFrame).
absl::Status FillExtras(Session& session, const v1::FrameOutputs& want, FrameTarget& out,
                        std::span<const float> positions, ThreadPool* pool);
// Normals of the deformed mesh from `positions`, encoded as wanted into `out`.
void MeshNormals(const VertexNormals& normals, v1::NormalEncoding encoding, std::span<const float> positions,
                 std::vector<float>& scratch, std::string* out, ThreadPool* pool);
// Float32 normals encoded as wanted into `out`.
void EncodeNormals(const std::vector<float>& normals, v1::NormalEncoding encoding, std::string* out);

}  // namespace sinew::server
