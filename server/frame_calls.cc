// The frame reactors: Deform (unary), StreamDeform and DeformClip. Each decodes its frames and
// hands them to the session's FrameBackend (server/frames.h), which completes them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/convert.h"
#include "server/echo_id.h"
#include "server/service.h"

namespace sinew::server {

// ---------------------------------------------------------------------------------------------
// Deform (unary): the frame runs on the worker pool, or here when it is small (RunsInline).

class Service::DeformCall final : public grpc::ServerUnaryReactor {
 public:
  DeformCall(grpc::CallbackServerContext* ctx, Service* svc, const v1::DeformRequest* req, v1::DeformResponse* resp,
             std::string tenant)
      : svc_(svc), req_(req), resp_(resp), tenant_(std::move(tenant)) {
    svc_->active_calls_.fetch_add(1);
    stop_.context = ctx;
    job_.stop = &stop_.fn;
    if (svc_->RunsInline(*req_, tenant_)) {
      Run(this);
    } else {
      queued_at_ = std::chrono::steady_clock::now();
      svc_->pool_.Submit(&DeformCall::Run, this);
    }
  }
  void OnDone() override {
    svc_->active_calls_.fetch_sub(1);
    delete this;
  }
  // The client gave up (or its deadline passed): a long frame stops (StopFlag).
  void OnCancel() override { stop_.wanted.store(true, std::memory_order_relaxed); }

 private:
  static void Run(void* arg) {
    auto* self = static_cast<DeformCall*>(arg);
    self->svc_->StartDeform(*self->req_, *self->resp_, self->job_, &DeformCall::Done, self, self->tenant_,
                            self->queued_at_);
  }
  static void Done(void* arg, const absl::Status& status) {
    auto* self = static_cast<DeformCall*>(arg);
    absl::Status st = status;
    if (st.ok() && Quantized(self->job_.session->encoding)) {
      st = EncodeQuantizedPositions(self->job_, nullptr, true, self->resp_->mutable_quantization());
    }
    if (st.ok() && self->job_.shm) {
      st = PlaceInSharedMemory(self->job_, self->req_->outputs().shared_memory(), self->resp_->mutable_shared_positions());
    }
    if (!st.ok()) self->svc_->metrics_.FrameError(static_cast<grpc::StatusCode>(st.code()));
    self->resp_->set_compute_ns(self->job_.out.compute_ns);
    self->resp_->set_method(static_cast<v1::Method>(self->job_.out.method));
    self->resp_->set_from_rest(self->job_.out.from_rest);
    self->Finish(self->svc_->ToGrpc("Deform", st));
  }
  Service* svc_;
  const v1::DeformRequest* req_;
  v1::DeformResponse* resp_;
  const std::string tenant_;
  FrameJob job_;
  StopFlag stop_;
  std::chrono::steady_clock::time_point queued_at_;  // handed to the pool (default: ran inline)
};

// ---------------------------------------------------------------------------------------------
// StreamDeform. Responses go out in request order. While a frame is in the backend the stream
// reads ahead: the next request waits as `pending_`, so that the transport of one frame overlaps
// the compute of another. For a session created with latest_pose_wins, a newer request of the
// same session replaces a pending one (never a reset), which is answered `skipped`. Bounded: one
// frame in the backend, one pending, one more read, and at most kMaxOut answers with positions
// and kMaxSkips skipped ones waiting to be written (then the stream stops reading and starting
// frames until the client reads). An idle
// stream waits in a pending read and holds no thread. gRPC operations are started outside mu_.

class Service::StreamCall final
    : public grpc::ServerBidiReactor<v1::DeformRequest, v1::DeformResponse>,
      public Service::Drainable {
 public:
  // `tenant`: the caller's, or why it has none (the stream then ends with that status).
  StreamCall(Service* svc, grpc::CallbackServerContext* ctx, absl::StatusOr<std::string> tenant)
      : svc_(svc), ctx_(ctx) {
    svc_->active_calls_.fetch_add(1);
    job_.stop = &stop_.fn;
    if (!tenant.ok()) {  // before Register: no drain reaches this call
      finished_ = true;
      Finish(svc_->ToGrpc("StreamDeform", tenant.status()));
      return;
    }
    tenant_ = std::move(*tenant);
    if (!svc_->Register(this)) {
      finished_ = true;
      Finish(grpc::Status(grpc::UNAVAILABLE, "server is shutting down"));
      return;
    }
    // Registered, a drain may step this call from now on: the first read starts under mu_'s
    // say (until 2026-12-03 these fields were written after Register without it, racing Drain).
    {
      std::lock_guard lock(mu_);
      if (finished_) return;  // a drain finished it meanwhile
      reading_ = true;
    }
    StartRead(&read_);
  }

  // The client gave up on the stream (or its deadline passed): the frame in the backend stops if
  // it is a long one (StopFlag); the stream then ends as its reads and writes fail.
  void OnCancel() override { stop_.wanted.store(true, std::memory_order_relaxed); }

  void OnReadDone(bool ok) override {
    // Whether the request may be replaced while it waits: looked up before taking mu_.
    bool replaceable = false, keeps_cages = false;
    // Not a frame that says more than a pose: a reset, or a cage edit the session keeps (until
    // 2026-12-03 a skipped frame's edit was never applied).
    if (ok && !read_.reset() && !read_.has_posed_cage()) {
      const auto session = svc_->sessions_.Find(read_.session_id(), NowMs(), tenant_);
      replaceable = session && session->latest_pose_wins;
      if (replaceable) {
        // Whether its method keeps `cages` (SuperCages' rest cage C); other methods take a
        // frame's cages for that frame alone. Under config_mu (UpdateSession changes it).
        std::lock_guard config(session->config_mu);
        keeps_cages = session->config.method() == v1::METHOD_SUPERCAGES;
        for (const auto& stage : session->config.stages()) keeps_cages |= stage.method() == v1::METHOD_SUPERCAGES;
      }
    }
    // Its token removed from --token-file (SIGHUP) since: this frame and those waiting are
    // answered with an error and the stream ends UNAUTHENTICATED, as a drain ends it.
    const bool revoked = ok && !svc_->tokens_.StillHolds(*ctx_, tenant_, &auth_seen_);
    Actions act;
    {
      std::lock_guard lock(mu_);
      reading_ = false;
      if (finished_) return;
      if (revoked) revoked_ = draining_ = true;
      if (ok && read_.close_with_stream()) Bind(read_.session_id());
      if (!ok) {
        half_closed_ = true;  // the client sent its last frame, or went away
      } else if (!has_pending_) {
        pending_.Swap(&read_);
        has_pending_ = true;
        pending_replaceable_ = replaceable;
        svc_->metrics_.frames_waiting().Increment();
      } else if (pending_replaceable_ && pending_.session_id() == read_.session_id()) {
        // What the skipped frame asked that its pose does not carry goes on with its successor: a
        // key frame (a client that lost its decoder asked for one), and its time step (seconds
        // since the frame before it: a jiggling session's clock would fall behind), and its pose
        // where the successor has none (a cage frame's "the last pose").
        if (pending_.key_frame()) read_.set_key_frame(true);
        // The steps add up (capped at the largest a frame may ask, 60 s: until 2026-12-07 two
        // skipped 40 s steps made the successor fail with a step its client never sent), but not
        // into a reset frame, which starts from rest (it took them). Where either leaves it to
        // the method (0) its length is not known here: the successor's stands.
        if (pending_.time_step() > 0 && read_.time_step() > 0 && !read_.reset()) {
          read_.set_time_step(std::min(read_.time_step() + pending_.time_step(), kMaxTimeStep));
        }
        if (pending_.has_pose() && !read_.has_pose()) *read_.mutable_pose() = pending_.pose();
        // A SuperCages session keeps its rest cage C from `cages`: a skipped frame's cage edit
        // goes on with a successor that has none (until 2026-12-07 it was lost). Other methods'
        // cages, and spheres, are the frame's own.
        if (keeps_cages && pending_.cages_size() > 0 && read_.cages_size() == 0) {
          read_.mutable_cages()->Swap(pending_.mutable_cages());
        }
        Skip(pending_.frame());
        pending_.Swap(&read_);
        pending_replaceable_ = replaceable;
        // read_ now holds the skipped request, reused by the next read: one far larger than
        // frames need is let go of (until 2026-12-07 an idle stream held it, up to
        // --max-message-bytes, as the in-flight request is let go of after its frame).
        if (read_.SpaceUsedLong() > kKeptRequestBytes) read_ = v1::DeformRequest();
      } else {
        read_full_ = true;  // waits in read_ until the pending one starts
        read_replaceable_ = replaceable;
      }
      Step(act);
    }
    Apply(act, /*may_inline=*/true);
  }

  void OnWriteDone(bool ok) override {
    Actions act;
    {
      std::lock_guard lock(mu_);
      writing_ = false;
      if (out_.front()->skipped()) --skips_;
      spare_.push_back(std::move(out_.front()));
      out_.pop_front();
      if (!ok) write_failed_ = true;
      Step(act);
    }
    Apply(act);
  }

  // Called by BeginDrain (under streams_mu_): the frame in the backend is answered, requests
  // read but not started are answered with an UNAVAILABLE error (exactly one answer per request,
  // as the proto promises), then the stream ends with UNAVAILABLE.
  void Drain() override {
    Actions act;
    {
      std::lock_guard lock(mu_);
      draining_ = true;
      Step(act);
    }
    Apply(act);
  }

  void OnDone() override {
    if (has_pending_) svc_->metrics_.frames_waiting().Decrement();
    for (const std::string& id : bound_) (void)svc_->sessions_.Close(id, tenant_);  // gone already: fine
    if (!bound_.empty()) svc_->UpdateGauges();
    svc_->Unregister(this);
    svc_->active_calls_.fetch_sub(1);
    delete this;
  }

 private:
  // Answers with positions (or errors) waiting to be written, and skipped answers (a few bytes
  // each) waiting: a slow frame under a fast client skips many frames meanwhile, and counting
  // those against kMaxOut stopped the stream's reading, so that the client's newer poses queued
  // in the transport for seconds instead of replacing the pending one.
  static constexpr size_t kMaxOut = 4;
  static constexpr size_t kMaxSkips = 64;
  // close_with_stream: the session is closed when the stream ends. Only open sessions of the
  // stream's tenant are kept, and those closed meanwhile are dropped whenever the set doubles, so
  // it holds at most about twice the tenant's open sessions however many a long stream binds
  // (until 2026-12-01 a fixed 1 024 ids, the ones past it ignored without a word).
  void Bind(const std::string& id) {
    if (bound_.contains(id) || !svc_->sessions_.Has(id, tenant_)) return;
    if (bound_.size() >= prune_at_) {
      absl::erase_if(bound_, [&](const std::string& b) { return !svc_->sessions_.Has(b, tenant_); });
      prune_at_ = std::max<size_t>(kFirstPrune, 2 * bound_.size());
    }
    bound_.insert(id);
  }
  static constexpr size_t kFirstPrune = 64;

  // gRPC operations and work decided under mu_, started after it is released.
  struct Actions {
    bool run = false, read = false;
    bool idle = false;  // with `run`: no answer of the stream is waiting or being written
    v1::DeformResponse* write = nullptr;
    std::optional<grpc::Status> finish;
  };

  // `may_inline`: a frame may run on this thread (RunsInline) — only from OnReadDone, so that an
  // inline frame's Done, which runs the next pending frame, never nests another frame on the
  // stack — and only when the stream has no answer in transit (a client with one frame in
  // flight): with more, the hand-off to a worker overlaps gRPC's writing of the previous answer
  // (measured: inline there lost 0.05–0.1 of the echo rate). The read starts first, to overlap
  // the frame's compute; Step does not touch current_ while busy_.
  void Apply(const Actions& act, bool may_inline = false) {
    if (act.read) StartRead(&read_);
    if (act.write) StartWrite(act.write);
    if (act.finish) Finish(*act.finish);
    if (act.run) {
      if (may_inline && act.idle && svc_->RunsInline(current_, tenant_)) {
        queued_at_ = {};
        Run(this);
      } else {
        queued_at_ = std::chrono::steady_clock::now();
        svc_->pool_.Submit(&StreamCall::Run, this);
      }
    }
  }

  std::unique_ptr<v1::DeformResponse> TakeResponse() {
    if (spare_.empty()) return std::make_unique<v1::DeformResponse>();
    auto r = std::move(spare_.back());
    spare_.pop_back();
    return r;
  }

  // An empty answer to frame `frame` (a spare response cleared).
  std::unique_ptr<v1::DeformResponse> Answer(uint64_t frame) {
    auto r = TakeResponse();
    r->Clear();
    r->set_frame(frame);
    return r;
  }

  // Answers frame `frame` as skipped (mu_ held): after the frame in the backend, if there is one.
  void Skip(uint64_t frame) {
    auto r = Answer(frame);
    r->set_skipped(true);
    if (busy_) {
      deferred_.push_back(std::move(r));
    } else {
      out_.push_back(std::move(r));
    }
    ++skips_;
    svc_->metrics_.frames_skipped().Increment();
  }

  // Answers frame `frame`, read but never started, with the drain's error (mu_ held, !busy_).
  void Refuse(uint64_t frame) {
    auto r = Answer(frame);
    r->mutable_error()->set_code(revoked_ ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::UNAVAILABLE);
    r->mutable_error()->set_message(revoked_ ? std::string(kRevoked) + "; this frame was not deformed"
                                             : "server is shutting down; this frame was not deformed");
    out_.push_back(std::move(r));
  }
  static constexpr std::string_view kRevoked = "authorization: this call's token was revoked (--token-file reloaded)";

  // What happens next (mu_ held).
  void Step(Actions& act) {
    // A cancelled stream starts no frame it read ahead (until 2026-12-03 it did: a GPU elastic one
    // then ran from rest to its first stop and left the session's device state part way, so that
    // a frame another call had queued behind it was refused).
    const bool cancelled = stop_.wanted.load(std::memory_order_relaxed);
    const bool stopping = draining_ || write_failed_ || cancelled;
    // out_ holds the skips_ skipped answers not in deferred_ besides the full ones.
    const bool room = out_.size() + deferred_.size() - skips_ < kMaxOut && skips_ < kMaxSkips;
    if (!busy_ && has_pending_ && !stopping && room) {
      current_.Swap(&pending_);
      has_pending_ = false;
      svc_->metrics_.frames_waiting().Decrement();
      if (read_full_) {
        pending_.Swap(&read_);
        has_pending_ = true;
        pending_replaceable_ = read_replaceable_;
        read_full_ = false;
        svc_->metrics_.frames_waiting().Increment();
      }
      busy_ = true;
      response_ = TakeResponse();
      act.run = true;
      act.idle = out_.empty() && deferred_.empty() && !writing_;
    }
    if (!reading_ && !read_full_ && !half_closed_ && !stopping && room && (!has_pending_ || pending_replaceable_)) {
      reading_ = true;
      act.read = true;
    }
    if (draining_ && !write_failed_ && !busy_) {
      // After the frame in the backend (its answer and deferred skips are in out_ by now).
      if (has_pending_) {
        Refuse(pending_.frame());
        has_pending_ = false;
        svc_->metrics_.frames_waiting().Decrement();
      }
      if (read_full_) {
        Refuse(read_.frame());
        read_full_ = false;
      }
    }
    if (!writing_ && !out_.empty()) {
      writing_ = true;
      act.write = out_.front().get();
    }
    if (!finished_ && !busy_ && !writing_ && out_.empty() &&
        (stopping || (half_closed_ && !has_pending_ && !read_full_))) {
      finished_ = true;
      act.finish = write_failed_ ? grpc::Status(grpc::CANCELLED, "stream: the client stopped reading")
                   : revoked_    ? grpc::Status(grpc::UNAUTHENTICATED, std::string(kRevoked))
                   : draining_   ? grpc::Status(grpc::UNAVAILABLE, "server is shutting down")
                   : cancelled   ? grpc::Status(grpc::CANCELLED, "stream: cancelled by the client")
                                 : grpc::Status::OK;
    }
  }

  static void Run(void* arg) {
    auto* self = static_cast<StreamCall*>(arg);
    self->svc_->StartDeform(self->current_, *self->response_, self->job_, &StreamCall::Done, self, self->tenant_,
                            self->queued_at_);
  }

  static void Done(void* arg, const absl::Status& status) {
    auto* self = static_cast<StreamCall*>(arg);
    v1::DeformResponse& resp = *self->response_;
    absl::Status st = status;
    if (st.ok() && Quantized(self->job_.session->encoding)) {
      st = EncodeQuantizedPositions(self->job_, &self->encoder_, self->current_.key_frame(), resp.mutable_quantization());
    }
    if (st.ok() && self->job_.shm) {
      st = PlaceInSharedMemory(self->job_, self->current_.outputs().shared_memory(), resp.mutable_shared_positions());
      // A DELTA frame encoded but not delivered (it did not fit the region) is taken back: the next
      // is a delta against the last frame delivered (until 2026-12-03 later deltas were
      // undecodable; until 2026-12-07 the encoder was reset and the next frame was a key frame,
      // the largest kind). A key frame that is due (key_frame_interval) and does not fit stays due.
      if (!st.ok() && self->job_.session->encoding == v1::OUTPUT_ENCODING_DELTA && self->encoder_.delta) {
        self->encoder_.delta->Undo();
      }
    }
    // A key frame asked for by a frame that failed is not lost with it: the client asked because
    // it cannot decode deltas (until 2026-12-07 the deltas after the failed frame came back
    // undecodable). The encoder of the session that asked starts again: its next frame is a key
    // frame (another session's encoder is left alone; a stream starts each session it switches
    // to with a key frame anyway).
    if (!st.ok() && self->current_.key_frame()) {
      const std::shared_ptr<const Session> encoded = self->encoder_.session.lock();
      if (!encoded || encoded->id == self->current_.session_id()) self->encoder_.delta.reset();
    }
    if (st.ok()) {
      resp.clear_error();
      resp.set_compute_ns(self->job_.out.compute_ns);
      resp.set_method(static_cast<v1::Method>(self->job_.out.method));
      resp.set_from_rest(self->job_.out.from_rest);
    } else {
      // A bad frame does not end the stream: its response carries its number and the error,
      // nothing else (responses are reused: an earlier frame's method, timing or extras would
      // otherwise be left in it). Clear keeps the buffers' capacity.
      const uint64_t frame = resp.frame();
      resp.Clear();
      resp.set_frame(frame);
      resp.mutable_error()->set_code(static_cast<int>(st.code()));
      resp.mutable_error()->set_message(std::string(st.message()));
      self->svc_->metrics_.FrameError(static_cast<grpc::StatusCode>(st.code()));
    }
    // The answer is built: the stream no longer holds the session or its shared memory region
    // (until 2026-12-03 an idle stream kept its last session, rig, device memory and mapping
    // alive after they were closed, past every limit that counts them). A request far larger than
    // frames need (a refused one) is not kept for reuse either: parsed messages keep their
    // fields' capacity.
    self->job_.Fresh();
    // (Its allocated size: a large request that was skipped, then reused for small ones, kept its
    // capacity under a small ByteSizeLong, until 2026-12-03.)
    if (self->current_.SpaceUsedLong() > kKeptRequestBytes) self->current_ = v1::DeformRequest();
    Actions act;
    {
      std::lock_guard lock(self->mu_);
      self->out_.push_back(std::move(self->response_));
      for (auto& r : self->deferred_) self->out_.push_back(std::move(r));
      self->deferred_.clear();
      self->busy_ = false;
      self->Step(act);
    }
    self->Apply(act);
  }

  static constexpr size_t kKeptRequestBytes = size_t{4} << 20;
  Service* svc_;
  grpc::CallbackServerContext* ctx_;  // the call's, for its token (valid until OnDone)
  uint64_t auth_seen_ = 0;            // TokenTable::StillHolds's record, read and written in OnReadDone only
  std::string tenant_;
  v1::DeformRequest read_;     // the read in progress, or one waiting behind pending_ (read_full_)
  v1::DeformRequest pending_;  // read, waiting for the frame in the backend
  v1::DeformRequest current_;  // in the backend
  std::unique_ptr<v1::DeformResponse> response_;  // current_'s
  std::deque<std::unique_ptr<v1::DeformResponse>> out_;       // to write, in request order
  std::vector<std::unique_ptr<v1::DeformResponse>> deferred_;  // skips to write after response_
  size_t skips_ = 0;  // skipped answers in out_ and deferred_
  absl::flat_hash_set<std::string> bound_;  // sessions to close when the stream ends (Bind)
  size_t prune_at_ = kFirstPrune;
  std::vector<std::unique_ptr<v1::DeformResponse>> spare_;     // reused: buffers keep their capacity
  FrameJob job_;
  StopFlag stop_;
  std::chrono::steady_clock::time_point queued_at_;  // current_ handed to the pool (default: inline)
  StreamEncoder encoder_;  // OUTPUT_ENCODING_DELTA
  std::mutex mu_;
  bool reading_ = false, read_full_ = false, read_replaceable_ = false;
  bool has_pending_ = false, pending_replaceable_ = false;
  bool busy_ = false, writing_ = false;
  bool half_closed_ = false, draining_ = false, write_failed_ = false, finished_ = false;
  bool revoked_ = false;  // its token was removed by a reload: ended as a drain ends it, UNAUTHENTICATED
};

// ---------------------------------------------------------------------------------------------
// DeformClip: a batch. Frames are produced one at a time on the worker pool; the next one starts
// when the previous response has been written, so a slow client slows the batch instead of
// filling memory.

class Service::ClipCall final : public grpc::ServerWriteReactor<v1::DeformClipResponse>,
                                public Service::Drainable {
 public:
  ClipCall(Service* svc, grpc::CallbackServerContext* ctx, const v1::DeformClipRequest* req,
           absl::StatusOr<std::string> tenant)
      : svc_(svc), req_(req), ctx_(ctx) {
    svc_->active_calls_.fetch_add(1);
    if (!tenant.ok()) {
      End(svc_->ToGrpc("DeformClip", tenant.status()));
      return;
    }
    tenant_ = std::move(*tenant);
    if (auto st = Prepare(); !st.ok()) {
      End(svc_->ToGrpc("DeformClip", st));
      return;
    }
    // Registered once Prepare has taken the session: a drain ending the call from now on
    // releases what it took. (Until 2026-12-03 it was registered first, and a drain between the
    // two released nothing; Prepare then took the history and a batch count for good.) Only a
    // registered batch starts its session from rest, under the drain's lock so that no drain
    // comes between: one refused by the drain leaves the history as it was, for a client moving
    // its sessions away with GetSessionState (until 2026-12-03 Prepare reset it, and the refusal
    // came after).
    std::unique_lock streams(svc_->streams_mu_);
    if (!svc_->Register(this)) {
      streams.unlock();
      End(grpc::Status(grpc::UNAVAILABLE, "server is shutting down"));
      return;
    }
    if (reset_history_) {
      std::lock_guard lock(session_->mu);
      // A history-dependent method plays the clip from its rest state, and a resumed batch
      // replays the frames before first_frame without sending them, so that its frames equal
      // those of an uninterrupted run. Its frames are numbered from 0 again.
      session_->deformer->Reset();
      // A device session's restart after a state that left float's range (GpuFrames::Run) is
      // this one: one still in flight that fails later must not restart the clip part way.
      session_->device_restarted = ++session_->device_submitted;
      session_->has_frame = false;
    }
    streams.unlock();
    Continue();
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard lock(mu_);
      if (finished_) return;
      writing_ = false;
    }
    if (!ok) return End(grpc::Status(grpc::CANCELLED, "batch: the client stopped reading"));
    Continue();
  }

  // A frame on the pool or a write in flight ends the call when it completes (Continue,
  // OnWriteDone); otherwise it ends here. A frame being replayed (unsent) is noticed by Continue:
  // without this a cancelled resumed batch replayed up to kMaxFrames frames for nobody.
  void OnCancel() override {
    stop_.wanted.store(true, std::memory_order_relaxed);  // a long frame in the backend stops (StopFlag)
    EndUnlessBusy(grpc::Status(grpc::CANCELLED, "batch: cancelled by the client"), &cancelled_);
  }

  void Drain() override { EndUnlessBusy(grpc::Status(grpc::UNAVAILABLE, "server is shutting down"), &draining_); }
  bool batch() const override { return true; }

  void OnDone() override {
    svc_->Unregister(this);
    svc_->active_calls_.fetch_sub(1);
    delete this;
  }

 private:
  absl::Status Prepare() {
    session_ = svc_->sessions_.Find(req_->session_id(), NowMs(), tenant_);
    if (!session_) {
      return absl::NotFoundError(absl::StrCat("session_id: no session \"", EchoId(req_->session_id()),
                                              "\" (closed or expired)"));
    }
    auto batch = ClipBatchFromProto(*req_, session_->rig->rig->joint_count(), kMaxFrames);
    if (!batch.ok()) return batch.status();
    clip_ = std::move(batch->clip);
    fps_ = batch->fps;
    time_step_ = batch->time_step;
    response_.set_total_frames(batch->total);
    next_ = batch->first;
    end_ = batch->end;
    std::lock_guard lock(session_->mu);
    if (session_->stateful && next_ < end_ && next_ > kMaxFrames) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "first_frame: ", next_, "; this history-dependent session replays the frames before first_frame, at most ",
          kMaxFrames));
    }
    if (session_->stateful && next_ < end_) {
      // One writer of a history: a second batch would reset the state under the first one, and
      // frames of other calls would interleave with its own.
      const void* none = nullptr;
      if (!session_->history_owner.compare_exchange_strong(none, this)) {
        return HistoryHeld(req_->session_id(), "wait for it to end, or play this clip on another session");
      }
      owns_history_ = true;
      reset_history_ = true;  // once registered (the constructor)
      replay_end_ = next_;
      next_ = 0;
    }
    session_->batches.fetch_add(1);
    holds_session_ = true;
    return absl::OkStatus();
  }

  // Lets go of the session before the call's status is sent, so that a client that has it may
  // use the session at once: the batch was its last use.
  void ReleaseSession() {
    if (owns_history_) session_->history_owner.store(nullptr);
    if (holds_session_) {
      session_->last_used_ms = NowMs();
      session_->batches.fetch_sub(1);
    }
    owns_history_ = holds_session_ = false;
  }

  // Sets *flag; ends the call unless a frame or a write is in flight (it ends it then). A call
  // waiting for its quota is woken to end.
  void EndUnlessBusy(const grpc::Status& status, bool* flag) {
    {
      std::lock_guard lock(mu_);
      *flag = true;
      if (waiting_ != 0) svc_->delays_.Expedite(waiting_);
      if (finished_ || writing_ || running_) return;
    }
    End(status);
  }

  // After the constructor, a written frame or a replayed one: the next frame on the pool, or
  // the end. running_ is set before the frame is queued, under mu_, so that Drain and OnCancel
  // leave the ending to it: the call cannot end (and be deleted) while a frame is queued. A
  // frame to be sent takes a token of the tenant's max_frames_per_second first, and waits for
  // one (DelayQueue, running_ held) when there is none: a batch is paced to the quota, not
  // failed by it. Replayed frames are not counted (each resume replays them again).
  void Continue() {
    std::optional<grpc::Status> end;
    double wait = 0;
    {
      std::lock_guard lock(mu_);
      running_ = false;
      waiting_ = 0;
      if (finished_) return;
      if (cancelled_) end = grpc::Status(grpc::CANCELLED, "batch: cancelled by the client");
      else if (draining_) end = grpc::Status(grpc::UNAVAILABLE, "server is shutting down");
      else if (next_ >= end_) end = grpc::Status::OK;
      else if (!svc_->tokens_.StillHolds(*ctx_, tenant_, &auth_seen_)) {  // removed by a reload (SIGHUP)
        end = grpc::Status(grpc::UNAUTHENTICATED, "authorization: this call's token was revoked (--token-file reloaded)");
      }
      else running_ = true;
      if (running_ && next_ >= replay_end_ && !svc_->tokens_.TakeFrameOrWait(tenant_, &wait)) {
        waiting_ = svc_->delays_.After(std::chrono::duration_cast<DelayQueue::Clock::duration>(
                                           std::chrono::duration<double>(std::min(wait, 3600.0))),
                                       [this] { Continue(); });
        return;
      }
      if (end) finished_ = true;  // decided here, in this section: see End
    }
    if (end) {
      ReleaseSession();
      return Finish(*end);
    }
    svc_->pool_.Submit(&ClipCall::Run, this);
  }

  static void Run(void* arg) { static_cast<ClipCall*>(arg)->NextFrame(); }

  // Poses the next frame and hands it to the session's backend; FrameDone continues.
  void NextFrame() {
    frame_ = next_++;
    std::unique_lock lock(session_->mu);
    if (!session_->open) {
      lock.unlock();
      return End(svc_->ToGrpc("DeformClip", absl::NotFoundError(absl::StrCat(
                                                 "session_id: session \"", EchoId(req_->session_id()),
                                                 "\" was closed while this batch played it (CloseSession, or a stream that bound it "
                                                 "with close_with_stream ended); it stopped before frame ",
                                                 frame_))));
    }
    Pose& pose = session_->pose;
    absl::Status st;
    if (req_->has_clip()) {
      const double t = double(frame_) / fps_;
      SampleClip(clip_, session_->rig->rig->skeleton, t, pose);
      response_.set_time_seconds(t);
    } else {
      st = PoseFromProto(req_->poses().poses(static_cast<int>(frame_)), pose);
    }
    if (!st.ok()) {
      lock.unlock();
      return FrameDone(this, st);
    }
    job_.Fresh();
    job_.session = session_;
    job_.input = {&pose, {}};
    job_.input.time_step = time_step_;
    job_.input.stop = &stop_.fn;
    job_.frame = frame_;
    job_.out.positions = response_.mutable_positions();
    job_.done = &ClipCall::FrameDone;
    job_.context = this;
    session_->runner->Run(job_, std::move(lock));
  }

  static void FrameDone(void* arg, const absl::Status& status) {
    auto* self = static_cast<ClipCall*>(arg);
    absl::Status st = status;
    if (!st.ok() && self->req_->has_poses()) {
      // A pose's field ("pose.rotations: ...") as the list's ("poses.poses[3].rotations: ...").
      const absl::string_view m = st.message();
      st = absl::Status(st.code(), absl::StartsWith(m, "pose.")
                                       ? absl::StrCat("poses.poses[", self->frame_, "].", m.substr(5))
                                       : absl::StrCat("poses.poses[", self->frame_, "]: ", m));
    } else if (!st.ok()) {
      st = absl::Status(st.code(), absl::StrCat("clip frame ", self->frame_, " (", double(self->frame_) / self->fps_,
                                                " s): ", st.message()));
    }
    if (st.ok() && self->frame_ >= self->replay_end_ && Quantized(self->session_->encoding)) {
      st = EncodeQuantizedPositions(self->job_, &self->encoder_, false, self->response_.mutable_quantization());
      if (!st.ok()) st = absl::Status(st.code(), absl::StrCat("frame ", self->frame_, ": ", st.message()));
    }
    if (!st.ok()) {
      // running_ stays set until End clears it with finished_ (see End).
      self->svc_->metrics_.FrameError(static_cast<grpc::StatusCode>(st.code()));
      return self->End(self->svc_->ToGrpc("DeformClip", st));
    }
    if (self->frame_ < self->replay_end_) {
      // A stateful method replays the frames before first_frame, unsent: the next one, on the
      // pool (never recursively: a CPU frame completes before Run returns). A client that asked
      // hears of it now and then (until 2026-12-03 a long replay sent nothing, and a proxy's
      // idle timeout cut it, again at every resume).
      const uint32_t every_ms = self->req_->replay_progress_ms();
      const auto now = std::chrono::steady_clock::now();
      if (every_ms > 0 && (self->frame_ == 0 || now - self->last_sent_ >= std::chrono::milliseconds(every_ms))) {
        self->last_sent_ = now;
        self->progress_.set_total_frames(self->response_.total_frames());
        self->progress_.set_replayed(self->frame_ + 1);
        {
          std::lock_guard lock(self->mu_);
          self->running_ = false;
          self->writing_ = true;
        }
        return self->StartWrite(&self->progress_);
      }
      return self->Continue();
    }
    self->response_.set_frame(self->frame_);
    self->response_.set_vertex_count(static_cast<uint32_t>(self->session_->rig->rig->vertex_count()));
    self->response_.set_encoding(self->session_->encoding);
    self->response_.set_method(static_cast<v1::Method>(self->job_.out.method));
    {
      std::lock_guard lock(self->mu_);
      self->running_ = false;
      self->writing_ = true;
    }
    self->StartWrite(&self->response_);
  }

  // Ends the call unless it has ended. running_ is cleared and finished_ set in one critical
  // section: a frame's completion runs on a worker thread gRPC does not know of, and until
  // 2026-12-07 it cleared running_, let go of mu_ and then ended the call, so that a drain or a
  // cancel in between (EndUnlessBusy) ended it too, gRPC deleted the call (OnDone), and the
  // worker went on in freed memory. The caller does nothing with the call after this.
  void End(const grpc::Status& status) {
    {
      std::lock_guard lock(mu_);
      running_ = false;
      if (finished_) return;
      finished_ = true;
    }
    ReleaseSession();
    Finish(status);
  }

  static constexpr uint64_t kMaxFrames = 10'000'000;
  Service* svc_;
  const v1::DeformClipRequest* req_;
  std::shared_ptr<Session> session_;
  Clip clip_;
  double fps_ = 0;
  double time_step_ = 0;  // seconds per frame: 1 / fps_, or the request's for pose lists
  uint64_t replay_end_ = 0;  // frames before this one are computed but not sent
  v1::DeformClipResponse progress_;  // a replay's progress message (replay_progress_ms)
  std::chrono::steady_clock::time_point last_sent_ = std::chrono::steady_clock::now();
  uint64_t next_ = 0, end_ = 0;
  uint64_t frame_ = 0;  // the frame in flight
  grpc::CallbackServerContext* ctx_;  // the call's, for its token (valid until OnDone)
  uint64_t auth_seen_ = 0;            // TokenTable::StillHolds's record (under mu_)
  std::string tenant_;
  FrameJob job_;
  StopFlag stop_;
  StreamEncoder encoder_;  // OUTPUT_ENCODING_DELTA
  v1::DeformClipResponse response_;
  std::mutex mu_;
  // running_: a frame queued, waiting for a quota token (waiting_: its DelayQueue task) or in the
  // backend; writing_: its answer being written.
  bool draining_ = false, cancelled_ = false, writing_ = false, running_ = false, finished_ = false;
  uint64_t waiting_ = 0;
  // Prepare took the session (Session::batches) and, for a history-dependent one, its history
  // (Session::history_owner); ReleaseSession gives both back.
  bool holds_session_ = false, owns_history_ = false;
  bool reset_history_ = false;  // Prepare took a history-dependent session: the constructor resets it
};

// ---------------------------------------------------------------------------------------------

// A frame's arrays are copied into the session's buffers, which keep their size: larger ones
// than the rig takes are refused before that (until 2026-12-03 a rejected 60 MB pose stayed in
// every session it was sent to, uncounted). Smaller ones are the methods' to name.
static absl::Status WithinTheRig(const v1::DeformRequest& req, const Rig& rig) {
  const auto over = [](absl::string_view field, size_t bytes, size_t per, size_t count, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", bytes, " bytes, ", bytes / double(per), " ", what,
                                                   "; this rig takes at most ", count, " (", per, " bytes each)"));
  };
  if (req.has_pose()) {
    if (auto st = PoseWithinJoints(req.pose(), rig.joint_count(), "pose"); !st.ok()) return st;
  }
  // A cage's positions against its cage (in core's words: ValidateCageFrames).
  const auto cage = [&](const v1::CagePose& c, const std::string& field) -> absl::Status {
    if (c.positions().empty()) return absl::OkStatus();
    if (c.cage() >= rig.cages.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".cage: index ", c.cage(), " but the rig has ", rig.cages.size(), " cages"));
    }
    const size_t vertices = rig.cages[c.cage()].vertex_count();
    if (c.positions().size() > 12 * vertices) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".positions: ", c.positions().size() / 12.0,
                                                     " vertices, cage ", c.cage(), " has ", vertices,
                                                     " (12 bytes per vertex)"));
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < req.cages_size() && i < int(kMaxRigCages); ++i) {
    if (auto st = cage(req.cages(i), absl::StrCat("cages[", i, "]")); !st.ok()) return st;
  }
  if (req.has_posed_cage()) {
    if (auto st = cage(req.posed_cage(), "posed_cage"); !st.ok()) return st;
  }
  if (req.has_spheres()) {
    const size_t spheres = std::max(rig.sphere_mesh.sphere_count(), rig.sphere_mesh.bones.size() / 2);
    const v1::SphereMeshPose& sp = req.spheres();
    if (sp.centers().size() > 12 * spheres) return over("spheres.centers", sp.centers().size(), 12, spheres, "spheres");
    if (sp.radii().size() > 4 * spheres) return over("spheres.radii", sp.radii().size(), 4, spheres, "spheres");
    if (sp.twists().size() > 4 * spheres) return over("spheres.twists", sp.twists().size(), 4, spheres, "spheres");
  }
  return absl::OkStatus();
}

absl::Status Service::DecodeFrame(const v1::DeformRequest& req, Session& session, FrameJob& job) {
  if (auto st = WithinTheRig(req, *session.rig->rig); !st.ok()) return st;
  if (auto st = FrameInputFromProto(req, session.pose, session.cages, session.posed_cage, session.spheres, job.input);
      !st.ok()) {
    return st;
  }
  job.input.stop = job.stop;
  job.reset = req.reset();
  job.frame = req.frame();
  job.want = req.outputs();
  if (auto st = CheckOutputs(session, job.want); !st.ok()) return st;
  if (req.outputs().has_shared_memory()) {
    const v1::SharedMemoryTarget& t = req.outputs().shared_memory();
    job.shm = shared_memory_.Find(t.region_id(), session.tenant, NowMs());
    if (!job.shm) {
      return absl::NotFoundError(absl::StrCat("outputs.shared_memory.region_id: no region \"",
                                              EchoId(t.region_id()),
                                              "\" (register it first; unused for the idle TTL, it was released)"));
    }
    // A region found shrunk (by an earlier frame) is refused before the frame is deformed: a
    // stateful session's frames into it were applied, then failed, until 2026-12-07, and the same
    // frame sent again elsewhere was "already applied".
    if (job.shm->Shrunk()) return ShrunkRegionError(t.region_id());
    const size_t floats = session.rig->rig->positions.size();
    // DELTA's size is known once encoded: at least one byte of bit widths per block of 16 vertices
    // for each axis.
    const uint64_t vertices = floats / 3;
    const uint64_t fixed = session.encoding == v1::OUTPUT_ENCODING_FLOAT32 ? 4 * floats
                           : session.encoding == v1::OUTPUT_ENCODING_DELTA  ? 3 * ((vertices + 15) / 16)
                                                                            : 2 * floats;
    if (t.offset() % 4 != 0 || t.offset() > job.shm->bytes) {
      return absl::InvalidArgumentError(absl::StrCat("outputs.shared_memory.offset: ", t.offset(),
                                                     " is not a multiple of 4 inside the region's ", job.shm->bytes,
                                                     " bytes"));
    }
    if (fixed > job.shm->bytes - t.offset()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs.shared_memory.offset: ", t.offset(), " leaves ", job.shm->bytes - t.offset(), " of the region's ",
          job.shm->bytes, " bytes; the positions take ",
          session.encoding == v1::OUTPUT_ENCODING_DELTA ? "at least " : "", fixed));
    }
    job.shm_offset = t.offset();
    job.shm_direct = session.backend == v1::BACKEND_GPU ? !Quantized(session.encoding)
                                                        : session.encoding == v1::OUTPUT_ENCODING_FLOAT32;
  }
  if (session.stateful && session.history_owner.load() != nullptr) {
    return HistoryHeld(req.session_id(), "its frames are refused until the batch ends");
  }
  const uint64_t last = session.last_frame;
  if (session.stateful && !job.reset && session.has_frame && job.frame <= last) {
    return absl::FailedPreconditionError(
        absl::StrCat("frame: ", job.frame,
                     job.frame == last ? " was already applied (or failed after it was)" : " arrives after frame ",
                     job.frame == last ? std::string() : std::to_string(last),
                     "; this stateful session applies frames strictly in increasing order of their numbers (set "
                     "reset to start again)"));
  }
  return absl::OkStatus();
}

bool Service::RunsInline(const v1::DeformRequest& req, const std::string& tenant) {
  if (options_.inline_frame_us == 0 || req.outputs().quality()) return false;
  const std::shared_ptr<Session> session = sessions_.Find(req.session_id(), NowMs(), tenant);
  bool inline_frame =
      session && session->backend == v1::BACKEND_CPU && !session->cost_follows_motion &&
      session->last_compute_ns.load(std::memory_order_relaxed) < uint64_t{options_.inline_frame_us} * 1000;
  // Not behind a frame running now (a quality frame, another caller's): this thread would wait
  // for its lock, however small this frame (until 2026-12-03 only the last finished frame's time
  // was looked at). A probe, not a promise: a frame taking the lock after it waits as before.
  if (inline_frame) inline_frame = std::unique_lock(session->mu, std::try_to_lock).owns_lock();
  if (inline_frame) metrics_.frames_inline().Increment();  // its callers run it at once
  return inline_frame;
}

void Service::StartDeform(const v1::DeformRequest& req, v1::DeformResponse& resp, FrameJob& job, FrameDone done,
                          void* context, const std::string& tenant, std::chrono::steady_clock::time_point queued_at) {
  resp.set_frame(req.frame());
  resp.clear_posed_cage();  // streams reuse the response: nothing of the last frame may remain
  resp.clear_rest_cage();
  resp.clear_joints();
  resp.clear_vertex_states();
  resp.clear_normals();
  resp.clear_base_points();
  resp.clear_quality();
  resp.clear_quantization();
  resp.clear_skipped();
  resp.clear_shared_positions();
  job.Fresh();
  if (options_.max_queue_ms > 0 && queued_at != std::chrono::steady_clock::time_point{}) {
    const auto waited = std::chrono::steady_clock::now() - queued_at;
    if (waited > std::chrono::milliseconds(options_.max_queue_ms)) {
      metrics_.frames_shed().Increment();
      return done(context, Overloaded(waited, options_.max_queue_ms, false));
    }
    job.queued_at = queued_at;  // a GPU session's frame: the rest of the wait is the device's
    job.max_queue_ms = options_.max_queue_ms;
  }
  if (auto st = tokens_.TakeFrame(tenant); !st.ok()) return done(context, st);
  job.session = sessions_.Find(req.session_id(), NowMs(), tenant);
  if (!job.session) {
    return done(context, absl::NotFoundError(absl::StrCat("session_id: no session \"", EchoId(req.session_id()),
                                                          "\" (closed or expired)")));
  }
  Session& session = *job.session;
  std::unique_lock lock(session.mu);
  if (!session.open.load()) {  // closed while this frame waited for it (CloseSession, the idle TTL)
    lock.unlock();
    return done(context, absl::NotFoundError(absl::StrCat("session_id: session \"", EchoId(req.session_id()),
                                                          "\" was closed before this frame ran")));
  }
  if (auto st = DecodeFrame(req, session, job); !st.ok()) {
    // A reset frame refused for its input has still forgotten the history, as the proto says (not
    // during a batch, which owns it): until 2026-12-03 only a refusal inside the method's frame
    // did, and a reset refused here left the next frame going on from the old state.
    if (req.reset() && session.stateful && session.history_owner.load() == nullptr) session.deformer->Reset();
    lock.unlock();
    return done(context, st);
  }
  resp.set_vertex_count(static_cast<uint32_t>(session.rig->rig->vertex_count()));
  resp.set_encoding(session.encoding);
  job.out.positions = resp.mutable_positions();
  job.out.posed_cage = resp.mutable_posed_cage();
  job.out.rest_cage = resp.mutable_rest_cage();
  job.out.joints = resp.mutable_joints();
  job.out.vertex_states = resp.mutable_vertex_states();
  job.out.normals = resp.mutable_normals();
  job.out.base_points = resp.mutable_base_points();
  job.out.quality = req.outputs().quality() ? resp.mutable_quality() : nullptr;
  job.done = done;
  job.context = context;
  session.runner->Run(job, std::move(lock));
}

grpc::ServerUnaryReactor* Service::Deform(grpc::CallbackServerContext* ctx,
                                          const v1::DeformRequest* req, v1::DeformResponse* resp) {
  if (draining()) return Done(ctx, "Deform", ShuttingDown());
  auto tenant = tokens_.Tenant(*ctx);
  if (!tenant.ok()) return Done(ctx, "Deform", tenant.status());
  return new DeformCall(ctx, this, req, resp, std::move(*tenant));
}

grpc::ServerBidiReactor<v1::DeformRequest, v1::DeformResponse>* Service::StreamDeform(
    grpc::CallbackServerContext* ctx) {
  return new StreamCall(this, ctx, tokens_.Tenant(*ctx));
}

grpc::ServerWriteReactor<v1::DeformClipResponse>* Service::DeformClip(
    grpc::CallbackServerContext* ctx, const v1::DeformClipRequest* req) {
  return new ClipCall(this, ctx, req, tokens_.Tenant(*ctx));
}

}  // namespace sinew::server
