#include "clients/lib/recovering_session.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"

#include "sinew/v1/rig_id.h"

namespace sinew::client {
namespace {

// The server answering does not know the session (or its rig): worth creating it again.
bool Unknown(const absl::Status& st) {
  const std::string_view m(st.message().data(), st.message().size());
  return st.code() == absl::StatusCode::kNotFound && (m.starts_with("session_id:") || m.starts_with("rig_id:"));
}

// That, or no server answered: worth trying again.
bool Lost(const absl::Status& st) { return st.code() == absl::StatusCode::kUnavailable || Unknown(st); }

// The server is there and has the session, but answered the frame without deforming it
// (admission control, server flag --max-queue-ms): worth sending again, later.
bool Shed(const absl::Status& st) {
  const std::string_view m(st.message().data(), st.message().size());
  return st.code() == absl::StatusCode::kUnavailable && m.starts_with("overloaded:");
}

// A stateful session's frame sent again after its answer was lost: the server had applied it.
bool AlreadyApplied(const absl::Status& st) {
  const std::string_view m(st.message().data(), st.message().size());
  return st.code() == absl::StatusCode::kFailedPrecondition && m.starts_with("frame:") &&
         m.find("was already applied") != std::string_view::npos;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecoveringSession>> RecoveringSession::Open(Client& client, const v1::Rig& rig,
                                                                           v1::CreateSessionRequest request,
                                                                           Options options) {
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_attempts: ", options.max_attempts, "; each frame needs at least one attempt"));
  }
  if (options.retry_delay.count() < 0 || options.max_retry_delay.count() < 0 || options.retry_timeout.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("retry_delay, max_retry_delay, retry_timeout: ",
                                                   options.retry_delay.count(), ", ", options.max_retry_delay.count(),
                                                   ", ", options.retry_timeout.count(), " ms; expected ≥ 0"));
  }
  if (options.checkpoint_every < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_every: ", options.checkpoint_every, "; 0 (off) or a number of frames"));
  }
  std::unique_ptr<RecoveringSession> s(
      new RecoveringSession(client, v1::SerializeRigDeterministic(rig), std::move(request), options));
  if (auto st = s->Create(); !st.ok()) return st;
  return s;
}

std::chrono::nanoseconds RecoveringSession::RetryBackoff(const Options& options, int retry, double unit) {
  const double first = std::chrono::duration<double>(options.retry_delay).count();
  const double cap = std::chrono::duration<double>(options.max_retry_delay).count();
  const double nominal = std::min(first * std::exp2(std::min(std::max(retry, 1) - 1, 64)), cap);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(nominal * (0.75 + 0.5 * std::clamp(unit, 0.0, 1.0))));
}

std::chrono::milliseconds RecoveringSession::RetryBudget(const Options& options) {
  if (options.retry_timeout.count() <= 0) return std::chrono::milliseconds(0);
  return std::max(options.retry_timeout, options.retry_delay * std::max(options.max_attempts, 1));
}

absl::Status RecoveringSession::Create() {
  auto up = client_.UploadSerializedRig(rig_bytes_);
  if (!up.ok()) return up.status();
  create_.set_rig_id(up->rig_id());
  // A kept state continues only on the backend kind it was saved on: ask for that one where the
  // session left the choice to the server, and take what the server has if it has not that kind.
  absl::StatusOr<v1::Session> session = absl::UnknownError("not created");
  if (checkpoint_.has_value() && history_ && create_.backend() == v1::BACKEND_AUTO) {
    v1::CreateSessionRequest same = create_;
    same.set_backend(checkpoint_->backend());
    session = client_.CreateSession(same);
  }
  if (!session.ok() && !Lost(session.status())) session = client_.CreateSession(create_);
  if (!session.ok()) return session.status();
  session_id_ = session->session_id();
  return absl::OkStatus();
}

absl::StatusOr<v1::Session> RecoveringSession::Update(const v1::DeformerConfig& deformer) {
  // A history still being rebuilt on the session (a frame gave up part-way) first: the
  // checkpoint below must see it whole.
  if (restore_pending_) {
    if (auto st = Restore(); !st.ok()) return st;
  }
  auto updated = client_.UpdateSession(session_id_, deformer);
  if (updated.ok()) {
    *create_.mutable_deformer() = deformer;
    // The frames kept so far ran under the old parameters: the history goes on from here (and
    // the new ones may make a stateless session history-dependent: pbs's jiggle).
    if (options_.checkpoint_every > 0) {
      stateless_ = false;
      Checkpoint(/*required=*/true);
    }
  }
  return updated;
}

void RecoveringSession::LoseHistory() {
  checkpoint_.reset();
  since_.clear();
  history_ = false;
  restore_pending_ = false;
}

void RecoveringSession::StartHistory() {
  checkpoint_.reset();
  since_.clear();
  history_ = true;
  restore_pending_ = false;
}

void RecoveringSession::Checkpoint(bool required) {
  untried_ = 0;
  auto state = client_.GetSessionState(session_id_);
  if (!state.ok()) {
    // Kept frames are bounded: past twice the interval the history is given up, and the next
    // checkpoint that succeeds starts a new one.
    if (required || since_.size() >= 2 * size_t(options_.checkpoint_every)) LoseHistory();
    return;
  }
  ++checkpoints_;
  StartHistory();
  stateless_ = state->method_state().empty();
  if (!stateless_) checkpoint_ = std::move(*state);
}

bool RecoveringSession::ByFallback(const v1::DeformResponse& frame) const {
  return frame.method() != v1::METHOD_UNSPECIFIED && frame.method() != create_.deformer().method();
}

void RecoveringSession::Applied(const v1::DeformRequest& request, const v1::DeformResponse& frame) {
  // A fallback's frame is no history of the method's (it starts from rest after them).
  session_has_history_ = !ByFallback(frame);
  if (options_.checkpoint_every == 0 || stateless_) return;
  // A frame of the fallback (the method still preparing) is no part of the method's history,
  // which starts from rest at the first frame the method serves; a reset frame starts it too.
  if (ByFallback(frame)) {
    StartHistory();
    untried_ = 0;
    return;
  }
  if (request.reset()) StartHistory();
  if (history_) {
    since_.push_back(request);
    since_.back().clear_outputs();
    since_.back().clear_session_id();
  }
  if (++untried_ >= options_.checkpoint_every) Checkpoint(/*required=*/false);
}

absl::Status RecoveringSession::Restore() {
  if (checkpoint_.has_value()) {
    if (auto set = client_.SetSessionState(session_id_, *checkpoint_); !set.ok()) return set.status();
  }
  for (size_t i = 0; i < since_.size(); ++i) {
    v1::DeformRequest again = since_[i];
    again.set_session_id(session_id_);
    // Without a checkpoint the history starts at the session's creation: the first frame kept
    // starts it from rest again (the session may be the one that had gone on past it).
    if (i == 0 && !checkpoint_.has_value()) again.set_reset(true);
    auto frame = client_.Deform(again);
    if (!frame.ok()) return frame.status();
    ++frames_replayed_;
    if (ByFallback(*frame)) {  // a fresh server whose method is still preparing: later, from the start
      return absl::UnavailableError("the method is still preparing on this server; the history is rebuilt once it serves");
    }
  }
  restore_pending_ = false;
  // A checkpoint of a session that had applied no frame yet (taken at an Update) is no history.
  session_has_history_ = (checkpoint_.has_value() && checkpoint_->has_last_frame()) || !since_.empty();
  return absl::OkStatus();
}

absl::StatusOr<v1::DeformResponse> RecoveringSession::Deform(v1::DeformRequest request) {
  const bool checkpointing = options_.checkpoint_every > 0;
  bool redone = false, restored_lost_answer = false, restored_from_rest = false, create = false;
  absl::Status last;
  const auto started = std::chrono::steady_clock::now();
  const std::chrono::milliseconds budget = RetryBudget(options_);
  bool final_attempt = false;  // the last wait was cut to end at the budget
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    if (attempt > 0) {
      if (final_attempt) break;
      std::chrono::nanoseconds wait = RetryBackoff(options_, attempt, unit(random_));
      if (budget.count() > 0) {
        const auto left = started + budget - std::chrono::steady_clock::now();
        if (left <= std::chrono::nanoseconds::zero()) break;  // no attempt past the budget
        if (wait >= left) {  // the last attempt, at the end of the budget
          wait = std::chrono::duration_cast<std::chrono::nanoseconds>(left);
          final_attempt = true;
        }
      }
      std::this_thread::sleep_for(wait);
    }
    if (create) {
      last = Create();
      if (!last.ok()) {
        if (Lost(last)) continue;  // the balancer has not moved us yet
        return last;
      }
      create = false;
      ++sessions_recreated_;
      session_has_history_ = false;
      if (checkpointing && !stateless_) {
        if (history_) {
          restore_pending_ = true;
        } else {
          ++histories_lost_;  // nothing kept to go on from: this frame starts a new history
          StartHistory();
        }
      }
    }
    // A frame that starts from rest itself needs no history (a kept one is not lost).
    if (restore_pending_ && request.reset()) StartHistory();
    if (restore_pending_) {
      last = Restore();
      if (!last.ok()) {
        if (Unknown(last)) {  // the session went with its server: a new one
          create = true;
          continue;
        }
        // No server, or the method still preparing: again, later (by the next call too, when
        // this one runs out of attempts).
        if (Lost(last)) continue;
        // Refused (a server of another backend kind): this frame starts the history again.
        ++histories_lost_;
        StartHistory();
        request.set_reset(true);
      } else if (!checkpoint_.has_value() && since_.empty()) {
        request.set_reset(true);  // the history is this frame's, from rest
      }
    }
    request.set_session_id(session_id_);
    auto frame = client_.Deform(request);
    if (frame.ok()) {
      // The session had a history and the server started this frame from rest all the same: it
      // lost the history (restarted without its kept state, e.g. after a crash, the session
      // reopened from its record). The kept history is set again and the frame sent again (once).
      if (frame->from_rest() && !request.reset() && session_has_history_ && checkpointing && history_ &&
          !stateless_ && !restored_from_rest) {
        restored_from_rest = true;
        restore_pending_ = true;
        last = absl::UnavailableError(absl::StrCat("frame ", request.frame(), ": answered from rest although the session had "
                                                   "a history (the server lost it); the history is set again and the "
                                                   "frame sent again"));
        if (!redone) {
          redone = true;
          ++frames_redone_;
        }
        continue;
      }
      Applied(request, *frame);
      return frame;
    }
    // Our earlier attempt was applied and its answer lost: rebuild the history on this session
    // and ask again (once; a frame numbered at or below the last by the caller is its error).
    if (redone && checkpointing && history_ && !stateless_ && !restored_lost_answer &&
        AlreadyApplied(frame.status())) {
      restored_lost_answer = true;
      restore_pending_ = true;
      last = frame.status();
      continue;
    }
    if (!Shed(frame.status()) && !Lost(frame.status())) {
      // Refused, but perhaps after it changed the history (a refused reset frame has forgotten
      // it; a frame computed and then not sent has been applied): the server's word on it.
      if (checkpointing && !stateless_) Checkpoint(/*required=*/true);
      return frame;
    }
    // Shed, or the server out of reach: the same session again (a transport blip, or a server
    // restarted with --state-dir, still has it; a server that is gone answers through the
    // balancer's next one, which does not know it). Unknown: a new one.
    if (Unknown(frame.status())) create = true;
    last = frame.status();
    if (!redone) {
      redone = true;
      ++frames_redone_;
    }
  }
  return last;
}

}  // namespace sinew::client
