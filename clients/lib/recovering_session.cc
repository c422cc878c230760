#include "clients/lib/recovering_session.h"

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

}  // namespace

absl::StatusOr<std::unique_ptr<RecoveringSession>> RecoveringSession::Open(Client& client, const v1::Rig& rig,
                                                                           v1::CreateSessionRequest request,
                                                                           Options options) {
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_attempts: ", options.max_attempts, "; each frame needs at least one attempt"));
  }
  std::unique_ptr<RecoveringSession> s(
      new RecoveringSession(client, v1::SerializeRigDeterministic(rig), std::move(request), options));
  if (auto st = s->Create(); !st.ok()) return st;
  return s;
}

absl::Status RecoveringSession::Create() {
  auto up = client_.UploadSerializedRig(rig_bytes_);
  if (!up.ok()) return up.status();
  create_.set_rig_id(up->rig_id());
  auto session = client_.CreateSession(create_);
  if (!session.ok()) return session.status();
  session_id_ = session->session_id();
  return absl::OkStatus();
}

absl::StatusOr<v1::Session> RecoveringSession::Update(const v1::DeformerConfig& deformer) {
  auto updated = client_.UpdateSession(session_id_, deformer);
  if (updated.ok()) *create_.mutable_deformer() = deformer;
  return updated;
}

absl::StatusOr<v1::DeformResponse> RecoveringSession::Deform(v1::DeformRequest request) {
  bool redone = false, recreate = false;
  absl::Status last;
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(options_.retry_delay);
      if (recreate) {
        last = Create();
        if (!last.ok()) {
          if (Lost(last)) continue;  // the balancer has not moved us yet
          return last;
        }
        recreate = false;
        ++sessions_recreated_;
      }
    }
    request.set_session_id(session_id_);
    auto frame = client_.Deform(request);
    if (frame.ok()) return frame;
    if (!Shed(frame.status()) && !Lost(frame.status())) return frame;
    // Shed, or the server out of reach: the same session again (a transport blip, or a server
    // restarted with --state-dir, still has it; a server that is gone answers through the
    // balancer's next one, which does not know it). Unknown: a new one.
    recreate = Unknown(frame.status());
    last = frame.status();
    if (!redone) {
      redone = true;
      ++frames_redone_;
    }
  }
  return last;
}

}  // namespace sinew::client
