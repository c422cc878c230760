#include "clients/lib/recovering_session.h"

#include <thread>

#include "sinew/v1/rig_id.h"

namespace sinew::client {
namespace {

// The server is gone, or does not know the session (or its rig): worth creating it again.
bool Lost(const absl::Status& st) {
  if (st.code() == absl::StatusCode::kUnavailable) return true;
  const std::string_view m(st.message().data(), st.message().size());
  return st.code() == absl::StatusCode::kNotFound && (m.starts_with("session_id:") || m.starts_with("rig_id:"));
}

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

absl::StatusOr<v1::DeformResponse> RecoveringSession::Deform(v1::DeformRequest request) {
  bool redone = false, shed = false;
  absl::Status last;
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(options_.retry_delay);
      if (!shed) {
        last = Create();
        if (!last.ok()) {
          if (Lost(last)) continue;  // the balancer has not moved us yet
          return last;
        }
        ++sessions_recreated_;
      }
    }
    request.set_session_id(session_id_);
    auto frame = client_.Deform(request);
    if (frame.ok()) return frame;
    shed = Shed(frame.status());
    if (!shed && !Lost(frame.status())) return frame;
    last = frame.status();
    if (!redone) {
      redone = true;
      ++frames_redone_;
    }
  }
  return last;
}

}  // namespace sinew::client
