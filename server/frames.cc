#include "server/frames.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "server/clock.h"
#include "core/geometry/mesh_quality.h"
#include "core/normals/normals.h"
#include "core/util/finite.h"
#include "core/util/half.h"

namespace sinew::server {
namespace {

void Pack(const std::vector<float>& v, std::string* out) {
  out->assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

uint64_t Since(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

// Counts a finished frame on its session and in the metrics.
void Account(FrameJob& job, v1::Backend backend) {
  Session& s = *job.session;
  s.frames.fetch_add(1, std::memory_order_relaxed);
  s.last_used_ms = NowMs();
  // Under the method that produced the frame: a fallback's frames count as the fallback's.
  const MethodInfo* by = job.out.method ? FindMethodById(job.out.method) : nullptr;
  job.metrics->Frame(by ? by : s.method, backend, double(job.out.compute_ns) * 1e-9);
}

// Finite inputs can drive positions beyond float32's range (a translation of 3e38, a scale of
// 1e30) or float16's (65504; from 65520 a half is infinite): such a frame fails, naming its first
// vertex out of range, instead of sending inf or NaN with status OK (issue 17).
absl::Status OutOfRange(size_t index, double value, v1::OutputEncoding encoding) {
  const bool half = encoding == v1::OUTPUT_ENCODING_FLOAT16;
  return absl::OutOfRangeError(absl::StrCat(
      "positions: vertex ", index / 3, " coordinate ", absl::string_view("xyz" + index % 3, 1), " is ", value, ", beyond ",
      half ? "float16's range (65504; 65520 and beyond round to an infinite half; use OUTPUT_ENCODING_FLOAT32 "
             "or QUANTIZED16 for this rig or pose)"
           : "float32's range: the inputs (pose, cages) drive this vertex too far",
      "; the frame was not sent"));
}

absl::Status CheckRange(std::span<const float> positions, v1::OutputEncoding encoding, ThreadPool* pool) {
  // Float16: the positions' halves are finite (the device checks those halves themselves).
  const float limit = encoding == v1::OUTPUT_ENCODING_FLOAT16 ? kFloat16Finite : std::numeric_limits<float>::max();
  const size_t i = FirstBeyond(positions, limit, pool);
  return i == positions.size() ? absl::OkStatus() : OutOfRange(i, positions[i], encoding);
}

absl::Status CheckHalves(std::span<const uint16_t> halves) {
  for (size_t i = 0; i < halves.size(); ++i) {
    if ((halves[i] & 0x7c00) == 0x7c00) {  // infinity or NaN
      return OutOfRange(i, (halves[i] & 0x3ff) ? std::nan("") : std::copysign(INFINITY, (halves[i] & 0x8000) ? -1 : 1),
                        v1::OUTPUT_ENCODING_FLOAT16);
    }
  }
  return absl::OkStatus();
}

// Whether a device frame that failed its range check has a position that is not a finite float
// (a float32 one is beyond the range only so; a float16 one may be a finite float of 65520 or
// more, which says nothing of the state: only a NaN half counts there, what an infinite state
// makes).
bool LeftFloatRange(const FrameJob& job) {
  if (job.session->encoding != v1::OUTPUT_ENCODING_FLOAT16) return true;  // float32 (or its staging)
  const size_t floats = job.session->rig->rig->positions.size();
  const char* bytes = job.shm_direct ? job.shm->data + job.shm_offset : job.out.positions->data();
  const auto* halves = reinterpret_cast<const uint16_t*>(bytes);
  return std::any_of(halves, halves + floats, [](uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; });
}

// A frame of the session has been applied (its lock held).
void Applied(Session& s, uint64_t frame) {
  s.last_frame = frame;
  s.has_frame = true;
}

}  // namespace

// The wire id of the method that produced the session's last frame: its fallback's while the
// session serves one (Deformer::produced_by), else its own (0 for pipelines).
uint32_t ProducedBy(const Session& s) {
  const std::string_view fallback = s.deformer->produced_by();
  if (!fallback.empty()) {
    if (const MethodInfo* m = FindMethod(fallback)) return m->id;
  }
  return s.method ? s.method->id : 0;
}

void EncodeNormals(const std::vector<float>& normals, v1::NormalEncoding encoding, std::string* out) {
  switch (encoding) {
    case v1::NORMAL_ENCODING_FLOAT16:
      out->resize(normals.size() * sizeof(uint16_t));
      FloatsToHalves(normals.data(), reinterpret_cast<uint16_t*>(out->data()), normals.size());
      return;
    case v1::NORMAL_ENCODING_OCTAHEDRAL:
      out->resize(normals.size() / 3 * 2 * sizeof(int16_t));
      EncodeOctahedral(normals, std::span<int16_t>(reinterpret_cast<int16_t*>(out->data()), normals.size() / 3 * 2));
      return;
    default:
      Pack(normals, out);
  }
}

void MeshNormals(const VertexNormals& normals, v1::NormalEncoding encoding, std::span<const float> positions,
                 std::vector<float>& scratch, std::string* out, ThreadPool* pool) {
  scratch.resize(positions.size());
  normals.Compute(positions, scratch, pool);
  EncodeNormals(scratch, encoding, out);
}

void FillQuality(Session& session, std::span<const float> positions, v1::QualityReport* out, ThreadPool* pool) {
  const MeshQuality q = session.rig->QualityMeasure(pool)->Measure(positions, pool);
  out->set_inside_vertices(q.inside_vertices);
  out->set_rest_inside_vertices(q.rest_inside_vertices);
  out->set_new_inside_vertices(q.new_inside_vertices);
  out->set_new_max_depth(q.new_max_depth);
  out->set_exposed_vertices(q.exposed_vertices);
  if (q.new_deepest_vertex >= 0) {
    const Rig& rig = *session.rig->rig;
    out->set_new_deepest_vertex(static_cast<uint32_t>(q.new_deepest_vertex));
    const int32_t joint = HeaviestJoint(rig.weights, static_cast<size_t>(q.new_deepest_vertex));
    if (joint >= 0) out->set_new_deepest_joint(rig.skeleton.names[static_cast<size_t>(joint)]);
  }
  out->set_touching_vertices(q.touching_vertices);
  out->set_max_depth(q.max_depth);
  out->set_depth_tolerance(q.depth_tolerance);
  out->set_volume_ratio(q.volume_ratio);
  out->set_edge_stretch_min(q.edge_stretch_min);
  out->set_edge_stretch_max(q.edge_stretch_max);
}

absl::Status CheckOutputs(Session& session, const v1::FrameOutputs& want) {
  const bool mesh = session.rig->rig->triangle_count() > 0;
  if (want.quality() && !mesh) {
    return absl::InvalidArgumentError(
        "outputs.quality: this rig has no triangles (a point set): the quality report measures a mesh");
  }
  if (want.normals() && !v1::NormalEncoding_IsValid(want.normal_encoding())) {
    return absl::InvalidArgumentError(
        absl::StrCat("outputs.normal_encoding: unknown value ", static_cast<int>(want.normal_encoding())));
  }
  // A frame must not be applied and then refused for an output the method does not have (a
  // stateful session's history would have moved on, and the frame counted): the method says
  // which it has before the frame (Offers), for the extras FillExtras will ask it for. Until
  // 2026-12-01 only the two checks above came first. (The pointers only say what is wanted.)
  FrameExtras wanted;
  if (want.posed_cage()) wanted.posed_cage = &session.extra_posed_cage;
  if (want.rest_cage()) wanted.rest_cage = &session.extra_rest_cage;
  if (want.joints()) wanted.joints = &session.extra_joints;
  if (want.base_points()) wanted.base_points = &session.extra_base_points;
  if (want.vertex_states() && !session.device_states) wanted.vertex_states = &session.extra_states;
  if (want.normals() && !mesh) wanted.normals = &session.extra_normals;
  return session.deformer->Offers(wanted);
}

// The session's vertex normals' adjacency, made on first use; null for a rig without triangles.
const VertexNormals* SessionNormals(Session& session) {
  if (!session.normals && session.rig->rig->triangle_count() > 0) session.normals = session.rig->Normals();
  return session.normals.get();
}

absl::Status FillExtras(Session& session, const v1::FrameOutputs& want, FrameTarget& out,
                        std::span<const float> positions, ThreadPool* pool) {
  if (want.quality()) {
    // A device's positions arrive later: GpuFrames::Completed measures them.
    if (!positions.empty() && out.quality) FillQuality(session, positions, out.quality, pool);
  }
  if (want.normals()) {
    if (SessionNormals(session) != nullptr) {
      if (!positions.empty() && out.normals) {
        MeshNormals(*session.normals, want.normal_encoding(), positions, session.extra_normals, out.normals, pool);
      }
    } else {
      FrameExtras moved;
      moved.normals = &session.extra_normals;
      if (auto st = session.deformer->Extras(moved); !st.ok()) return st;
      if (out.normals) EncodeNormals(session.extra_normals, want.normal_encoding(), out.normals);
    }
  }
  // A device that makes the vertex states writes them itself (GpuFrames).
  const bool states = want.vertex_states() && !session.device_states;
  if (!want.posed_cage() && !want.rest_cage() && !want.joints() && !states && !want.base_points()) {
    return absl::OkStatus();
  }
  FrameExtras extras;
  if (want.base_points()) extras.base_points = &session.extra_base_points;
  if (states) extras.vertex_states = &session.extra_states;
  if (want.posed_cage()) extras.posed_cage = &session.extra_posed_cage;
  if (want.rest_cage()) extras.rest_cage = &session.extra_rest_cage;
  if (want.joints()) extras.joints = &session.extra_joints;
  if (auto st = session.deformer->Extras(extras); !st.ok()) return st;
  if (want.posed_cage() && out.posed_cage) Pack(session.extra_posed_cage, out.posed_cage);
  if (want.rest_cage() && out.rest_cage) Pack(session.extra_rest_cage, out.rest_cage);
  if (want.joints() && out.joints) Pack(session.extra_joints, out.joints);
  if (want.base_points() && out.base_points) Pack(session.extra_base_points, out.base_points);
  if (states && out.vertex_states) {
    out.vertex_states->assign(reinterpret_cast<const char*>(session.extra_states.data()), session.extra_states.size());
  }
  return absl::OkStatus();
}

void CpuFrames::Run(FrameJob& job, std::unique_lock<std::mutex> lock) {
  job.start = std::chrono::steady_clock::now();
  job.metrics = &metrics_;
  Session& s = *job.session;
  absl::Status st;
  {
    if (job.reset) s.deformer->Reset();
    job.out.from_rest = s.stateful && (job.reset || !s.has_frame.load());
    const size_t floats = s.rig->rig->positions.size();
    std::span<float> target;
    if (job.shm_direct) {  // straight into the client's shared memory
      target = std::span<float>(reinterpret_cast<float*>(job.shm->data + job.shm_offset), floats);
    } else if (s.encoding == v1::OUTPUT_ENCODING_FLOAT32) {  // straight into the response's bytes
      job.out.positions->resize(floats * sizeof(float));
      target = std::span<float>(reinterpret_cast<float*>(job.out.positions->data()), floats);
    } else if (Quantized(s.encoding)) {  // encoded by the call once the frame is done
      job.staging_positions.resize(floats);
      target = job.staging_positions;
    } else {
      target = s.positions;
    }
    st = s.deformer->Deform(job.input, target, &pool_);
    job.out.method = ProducedBy(s);
    // A session that went over from its fallback to its method holds the method's state now
    // (a few arithmetic operations: counted on every CPU frame rather than tracked).
    s.CountState();
    if (st.ok()) {
      Applied(s, job.frame);
      st = CheckRange(target, s.encoding, &pool_);
    }
    if (st.ok() && s.encoding == v1::OUTPUT_ENCODING_FLOAT16) {
      job.out.positions->resize(floats * sizeof(uint16_t));
      FloatsToHalves(s.positions.data(), reinterpret_cast<uint16_t*>(job.out.positions->data()), floats);
    }
    if (st.ok()) st = FillExtras(s, job.want, job.out, target, &pool_);
    job.out.compute_ns = Since(job.start);
    s.last_compute_ns.store(st.ok() ? job.out.compute_ns : UINT64_MAX, std::memory_order_relaxed);
    // Every frame is a use until its end, stamped before the session's lock is let go: the idle
    // sweep takes sessions it can lock, and between the unlock and Account's stamp it could close
    // one whose frame ran longer than the TTL (another frame waiting on the lock then refused
    // "closed before this frame ran", until 2026-12-03).
    s.last_used_ms = NowMs();
    lock.unlock();
  }
  if (st.ok()) Account(job, v1::BACKEND_CPU);
  job.done(job.context, st);
}

// Whether a GPU frame goes on from a device state that a frame before it left part way: one
// submitted at or after the restart this frame goes on from, and before this frame.
static bool BehindALoss(const FrameJob& job) {
  const uint64_t lost = job.session->device_lost.load(std::memory_order_acquire);
  return lost != 0 && lost >= job.device_from && lost < job.device_seq;
}

absl::Status Overloaded(std::chrono::steady_clock::duration waited, uint32_t max_queue_ms, bool device) {
  return absl::UnavailableError(absl::StrCat(
      "overloaded: the frame waited ", std::chrono::duration_cast<std::chrono::milliseconds>(waited).count(),
      " ms for ", device ? "a worker and the GPU" : "a worker", " (more than --max-queue-ms ", max_queue_ms,
      ") and was not deformed; send fewer frames or use more servers"));
}

void GpuFrames::Run(FrameJob& job, std::unique_lock<std::mutex> lock) {
  job.start = std::chrono::steady_clock::now();
  job.metrics = &metrics_;
  job.gpu_frames = this;
  job.out.method = ProducedBy(*job.session);
  const std::shared_ptr<Session> hold = job.session;  // the completion may end the call (and its job) first
  Session& s = *hold;
  // A frame whose caller gave up before it reached here (a stream's next frame, read while the
  // one before it ran) is not submitted: on the device it would start, find its stop and leave
  // the session's state part way, and a frame queued behind it by another call would be refused.
  if (job.input.stop != nullptr && (*job.input.stop)()) {
    lock.unlock();
    return job.done(job.context, absl::CancelledError(
                                     "frame: its call was cancelled before the frame reached the GPU; not deformed, the "
                                     "session's state is as it was"));
  }
  // From rest: asked, or the first frame after one that left the device's state unusable
  // (Completed) and no restart submitted since.
  job.device_seq = ++s.device_submitted;
  const uint64_t lost = s.device_lost.load(std::memory_order_acquire);
  const bool restart = job.reset || (lost != 0 && lost >= s.device_restarted);
  if (restart) s.deformer->Reset();
  job.out.from_rest = s.stateful && (restart || !s.has_frame.load());
  job.device_can_diverge = s.deformer->DeviceStateCanDiverge();
  job.device_stateful = s.stateful && s.state_on_device;
  job.host_history = s.stateful && !job.device_stateful;
  // A frame that fails before it reaches the device leaves a restart to the next frame (DeviceFrame
  // has taken the deformer's "from rest" into this frame's parameters).
  auto fail = [&](const absl::Status& st) {
    if (restart) s.deformer->Reset();
    lock.unlock();
    return job.done(job.context, st);
  };
  // Mesh normals: a device pass over the deformed positions; Completed encodes them. Their device
  // data (the rig's adjacency, the rows in the batch buffers) is had before the frame is applied,
  // so that a frame refused for room leaves a stateful session's history as it was.
  job.device_normals = job.want.normals() && job.out.normals != nullptr && SessionNormals(s) != nullptr;
  if (job.device_normals && !s.gpu_mesh) {
    // The rig's adjacency on the device and the session's normals rows in the batch buffers, tried
    // again once device copies no session holds have made room.
    auto on_device = [&]() -> absl::Status {
      auto mesh = s.rig->MeshOnGpu(gpu_);
      if (!mesh.ok()) return mesh.status();
      if (auto rows = gpu_.ReserveNormals(*s.gpu); !rows.ok()) return rows;
      s.gpu_mesh = std::move(*mesh);
      return absl::OkStatus();
    };
    absl::Status room = on_device();
    if (room.code() == absl::StatusCode::kResourceExhausted && make_room_ && make_room_() > 0) room = on_device();
    if (!room.ok()) return fail(room);
  }
  absl::Status st = s.deformer->DeviceFrame(job.input, s.device_params);
  if (st.ok()) {
    Applied(s, job.frame);  // the device keeps the session's frames in submission order
    st = FillExtras(s, job.want, job.out, {}, nullptr);
  }
  if (!st.ok()) return fail(st);
  const bool f16 = s.encoding == v1::OUTPUT_ENCODING_FLOAT16;
  const size_t vertices = s.rig->rig->vertex_count();
  gpu::FrameOutput output;
  if (Quantized(s.encoding)) {  // float32 into the staging, encoded by the call once the frame is done
    job.staging_positions.resize(3 * vertices);
    output.positions = reinterpret_cast<char*>(job.staging_positions.data());
  } else if (job.shm_direct) {  // from the device straight into the client's shared memory
    job.out.positions->clear();
    output.positions = job.shm->data + job.shm_offset;
  } else {
    job.out.positions->resize(3 * vertices * (f16 ? 2 : 4));
    output.positions = job.out.positions->data();
  }
  output.format = f16 ? gpu::OutputFormat::kFloat16 : gpu::OutputFormat::kFloat32;
  if (s.device_states && job.want.vertex_states() && job.out.vertex_states) {
    job.out.vertex_states->resize(vertices);  // made on the device, written with the positions
    output.states = reinterpret_cast<uint8_t*>(job.out.vertex_states->data());
  }
  // A quality report is measured on the measuring thread, which serves every session on the
  // device: its measure of the rest mesh (built on first use, seconds for a large mesh) is built
  // here, on this session's thread, instead.
  if (job.want.quality() && job.out.quality) s.rig->QualityMeasure(nullptr);
  if (job.device_normals) {
    job.staging_normals.resize(3 * vertices);
    output.normals = job.staging_normals.data();
    output.mesh = s.gpu_mesh.get();
  }
  // Admission control goes on in the device's queue, for sessions without history: a stateful
  // session's frame has been applied here (its deformer's history, its number), so it runs. The
  // frame may wait there what its wait for a worker left of --max-queue-ms; the work done here
  // (one-off: a quality measure or the mesh's upload, seconds on a large rig) is not waiting.
  if (job.max_queue_ms > 0 && !s.stateful) {
    job.queued_at += std::chrono::steady_clock::now() - job.start;  // from here on, only waits count
    output.shed_after = job.queued_at + std::chrono::milliseconds(job.max_queue_ms);
    job.device_sheddable = true;
  }
  if (restart) s.device_restarted = job.device_seq;
  job.device_from = s.device_restarted;
  // Only a frame whose cost follows the motion (elastic) is long enough to stop; a finished
  // history-independent item in the same batch must not be answered CANCELLED. It stops when its
  // caller gives up, or at once when a frame queued before it stopped part way (Completed).
  if (s.cost_follows_motion) {
    job.device_stop = [&job, caller = job.input.stop] { return (caller && (*caller)()) || BehindALoss(job); };
    output.stop = &job.device_stop;
  }
  // The parameters are copied before Submit returns; the lock keeps a stateful session's frames
  // in submission order.
  s.device_frames.fetch_add(1);
  gpu_.Submit(*s.gpu, s.device_params, output, &GpuFrames::Completed, &job);
  // Unlocked here, while `hold` keeps the session: the completion may have dropped the call's
  // reference already, and a session closed meanwhile then ends with `hold`. Until 2026-12-07 the
  // caller's lock (this by-value parameter, destroyed after `hold`) unlocked a freed mutex then.
  lock.unlock();
}

namespace {

// A finished GPU frame's quality report (FrameOutputs.quality), from its positions as sent, on the
// calling thread alone.
void MeasureQuality(FrameJob& job) {
  const size_t floats = job.session->rig->rig->positions.size();
  const std::string_view bytes =
      job.shm_direct ? std::string_view(job.shm->data + job.shm_offset,
                                        floats * (job.session->encoding == v1::OUTPUT_ENCODING_FLOAT16 ? 2 : 4))
                     : std::string_view(*job.out.positions);
  std::vector<float>& p = job.staging_positions;
  if (Quantized(job.session->encoding)) {
    // already float32 in the staging
  } else if (job.session->encoding == v1::OUTPUT_ENCODING_FLOAT16) {
    p.resize(bytes.size() / sizeof(uint16_t));
    HalvesToFloats(reinterpret_cast<const uint16_t*>(bytes.data()), p.data(), p.size());
  } else {
    p.resize(bytes.size() / sizeof(float));
    std::memcpy(p.data(), bytes.data(), p.size() * sizeof(float));
  }
  FillQuality(*job.session, p, job.out.quality, nullptr);
}

// The end of a GPU frame: its time, its count, its caller told.
void Complete(FrameJob& job, const absl::Status& status) {
  job.out.compute_ns = Since(job.start);
  if (status.ok()) Account(job, v1::BACKEND_GPU);
  // The call encodes the positions from the session (EncodeQuantizedPositions) in its callback;
  // `keep` holds the session past it, the callback may end the call and its job.
  const std::shared_ptr<Session> keep = job.session;
  // Its use ends here, answered OK or not (Account stamps the frames that succeed).
  if (!status.ok()) keep->last_used_ms = NowMs();
  keep->device_frames.fetch_sub(1);
  job.done(job.context, status);
}

}  // namespace

GpuFrames::GpuFrames(gpu::GpuBackend& gpu, Metrics& metrics, std::function<uint64_t()> make_room)
    : gpu_(gpu),
      metrics_(metrics),
      make_room_(std::move(make_room)),
      encoders_(std::make_unique<ThreadPool>(std::max(1u, std::thread::hardware_concurrency() / 2))) {}

void GpuFrames::Completed(void* arg, const absl::Status& result) {
  FrameJob& job = *static_cast<FrameJob*>(arg);
  job.device_result = result;
  // The device runs a session's frames one at a time, in submission order, and their completions
  // come here, on the device's thread, in that order. A frame that leaves the state unusable is
  // marked lost (Finish) before the next completes, or, stopped part way, before the next runs
  // (Finish runs here for a failed frame). So a frame that was queued on the device behind it
  // sees the loss (BehindALoss): it went on, or would go on, from that state, neither from rest
  // nor from the frame before, and is answered ABORTED; an elastic one stops before its first
  // step (its stop asks). (A frame whose positions left float's range is found in Finish, on an
  // encoder thread for a quantized encoding, maybe after the next frame completes here: that one
  // then fails the range check itself, on the same non-finite state.)
  if ((result.ok() || result.code() == absl::StatusCode::kCancelled) && BehindALoss(job)) {
    job.device_result = absl::AbortedError(
        "frame: it was queued on the GPU behind a frame of its session that left the device's state unusable "
        "(stopped part way by its caller, past float's range, or failed on the device); not deformed, but its number is used up (a GPU "
        "session's frames are applied when queued): send it again with a later number; the session starts again "
        "from rest at its next frame");
  }
  if (job.device_result.ok() && (Quantized(job.session->encoding) || job.device_normals)) {
    return job.gpu_frames->encoders_->Submit(&GpuFrames::Finish, &job);
  }
  Finish(&job);
}

void GpuFrames::Finish(void* arg) {
  FrameJob& job = *static_cast<FrameJob*>(arg);
  const absl::Status& result = job.device_result;
  absl::Status status = result;
  if (result.code() == absl::StatusCode::kDeadlineExceeded && job.device_sheddable) {  // shed_after passed
    job.metrics->frames_shed().Increment();
    status = Overloaded(std::chrono::steady_clock::now() - job.queued_at, job.max_queue_ms, true);
  }
  if (status.ok()) {  // the positions' range, as on the CPU (CheckRange)
    const v1::OutputEncoding encoding = job.session->encoding;
    const size_t floats = job.session->rig->rig->positions.size();
    if (Quantized(encoding)) {
      status = CheckRange(job.staging_positions, encoding, nullptr);
    } else {
      const char* bytes = job.shm_direct ? job.shm->data + job.shm_offset : job.out.positions->data();
      status = encoding == v1::OUTPUT_ENCODING_FLOAT16
                   ? CheckHalves({reinterpret_cast<const uint16_t*>(bytes), floats})
                   : CheckRange({reinterpret_cast<const float*>(bytes), floats}, encoding, nullptr);
    }
  }
  // The device's state is unusable after this frame: the next frame submitted starts from rest,
  // unless one already has since this one.
  auto lost = [&job] {
    Session& s = *job.session;
    uint64_t seen = s.device_lost.load(std::memory_order_relaxed);
    while (seen < job.device_seq &&
           !s.device_lost.compare_exchange_weak(seen, job.device_seq, std::memory_order_release)) {
    }
  };
  if (result.code() == absl::StatusCode::kCancelled && job.host_history) {
    // Stopped part way, its history on the host as the frame was submitted: nothing to restart.
    status = absl::CancelledError(absl::StrCat("frame: ", result.message()));
  } else if (result.code() == absl::StatusCode::kCancelled) {  // stopped part way (gpu::FrameOutput::stop)
    lost();
    status = absl::CancelledError(absl::StrCat("frame: ", result.message(), ": the session starts again from rest at its next frame"));
  }
  if (!result.ok() && result.code() != absl::StatusCode::kCancelled && job.device_stateful &&
      !(result.code() == absl::StatusCode::kDeadlineExceeded && job.device_sheddable)) {
    // Failed on the device (its memory, a launch) or refused behind a loss: the session's history
    // was taken into this frame when it was submitted (from rest or not), but its state on the
    // device is not this frame's. Until 2026-12-03 the next frame went on from whatever the
    // device held (zeros, for a first frame: particles pulled to the origin).
    lost();
    if (result.code() != absl::StatusCode::kAborted) {
      status = absl::Status(result.code(),
                            absl::StrCat(result.message(), "; the session starts again from rest at its next frame"));
    }
  }
  if (status.code() == absl::StatusCode::kOutOfRange && result.ok() && job.device_can_diverge &&
      LeftFloatRange(job)) {
    // The device's state left float's range (the CPU's pbs says so itself and starts again).
    lost();
    status = absl::OutOfRangeError(absl::StrCat(
        status.message(), "; the session's dynamics left float's range there (time steps that change by orders of "
                          "magnitude from frame to frame do this): the session starts again from rest at its next frame"));
  }
  if (status.ok() && job.device_normals) EncodeNormals(job.staging_normals, job.want.normal_encoding(), job.out.normals);
  if (status.ok() && job.want.quality() && job.out.quality) return job.gpu_frames->Measure(job);
  Complete(job, status);
}

void GpuFrames::Measure(FrameJob& job) {
  {
    std::lock_guard lock(measure_mu_);
    if (!measurer_.joinable()) measurer_ = std::thread([this] { MeasureLoop(); });
    measure_queue_.push_back(&job);
  }
  measure_cv_.notify_one();
}

void GpuFrames::MeasureLoop() {
  std::unique_lock lock(measure_mu_);
  for (;;) {
    measure_cv_.wait(lock, [&] { return stop_measuring_ || !measure_queue_.empty(); });
    if (measure_queue_.empty()) return;  // stopping, every queued frame measured
    FrameJob& job = *measure_queue_.front();
    measure_queue_.pop_front();
    lock.unlock();
    MeasureQuality(job);
    Complete(job, absl::OkStatus());
    lock.lock();
  }
}

GpuFrames::~GpuFrames() {
  encoders_.reset();
  {
    std::lock_guard lock(measure_mu_);
    stop_measuring_ = true;
  }
  measure_cv_.notify_all();
  if (measurer_.joinable()) measurer_.join();
}

absl::Status PlaceInSharedMemory(FrameJob& job, const v1::SharedMemoryTarget& asked, v1::SharedMemoryTarget* placement) {
  uint64_t bytes = 0;
  if (job.shm_direct) {
    const bool f16 = job.session->encoding == v1::OUTPUT_ENCODING_FLOAT16;
    bytes = job.session->rig->rig->positions.size() * (f16 ? sizeof(uint16_t) : sizeof(float));
    job.out.positions->clear();  // a reused response may hold an earlier frame's
  } else {
    bytes = job.out.positions->size();
    if (bytes > job.shm->bytes - job.shm_offset) {
      return absl::OutOfRangeError(absl::StrCat("outputs.shared_memory: the positions take ", bytes, " bytes; the region has ",
                                                job.shm->bytes - job.shm_offset, " after offset ", job.shm_offset));
    }
    std::memcpy(job.shm->data + job.shm_offset, job.out.positions->data(), bytes);
    job.out.positions->clear();
  }
  if (job.shm->Shrunk()) return ShrunkRegionError(asked.region_id());
  placement->set_region_id(asked.region_id());
  placement->set_offset(job.shm_offset);
  placement->set_bytes(bytes);
  return absl::OkStatus();
}

absl::Status EncodeQuantizedPositions(FrameJob& job, StreamEncoder* stream, bool key_frame,
                                      v1::Quantization* quantization) {
  const Session& s = *job.session;
  wire::Quantization q;
  absl::Status st;
  if (s.encoding == v1::OUTPUT_ENCODING_QUANTIZED16) {
    st = wire::EncodeQuantized16(job.staging_positions, q, *job.out.positions);
  } else if (s.encoding == v1::OUTPUT_ENCODING_DELTA) {
    if (stream == nullptr) {
      wire::DeltaEncoder once(s.grid, 1);
      st = once.Encode(job.staging_positions, true, q, *job.out.positions);
    } else {
      if (!stream->delta || stream->session.lock() != job.session) {
        stream->delta.emplace(s.grid, s.key_frame_interval);
        stream->session = job.session;
      }
      st = stream->delta->Encode(job.staging_positions, key_frame, q, *job.out.positions);
    }
  } else {
    return absl::OkStatus();
  }
  if (!st.ok()) return st;
  quantization->set_offset_x(q.offset[0]);
  quantization->set_offset_y(q.offset[1]);
  quantization->set_offset_z(q.offset[2]);
  quantization->set_scale_x(q.scale[0]);
  quantization->set_scale_y(q.scale[1]);
  quantization->set_scale_z(q.scale[2]);
  quantization->set_key_frame(q.key_frame);
  quantization->set_since_key_frame(q.since_key_frame);
  return absl::OkStatus();
}

}  // namespace sinew::server
