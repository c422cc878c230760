// A session that outlives its server, for clients behind a balancer (deploy/haproxy.cfg): it
// keeps the rig's bytes and how the session was created. When a frame finds no server
// (UNAVAILABLE), it is sent again on the same session after the retry delay: a transport blip,
// or a server restarted with --state-dir, keeps the session (and its history). When the server
// answering does not know the session (NOT_FOUND: the balancer moved this client to another
// server, or the server restarted without its state), it uploads the rig again
// (content-addressed: one small round trip where the rig is resident), creates the session again
// and sends the frame again. Either way the frame counts as redone. A history-dependent method's
// session starts again from rest when re-created, with the parameters it was last given
// (Open's, or Update's; a state set with SetSessionState is not carried over). A stateful
// session's frame that the server applied but whose answer was lost is refused when sent again
// ("was already applied"): that error is returned.
// A frame the server shed under load (UNAVAILABLE "overloaded: ...", --max-queue-ms) is not a
// lost server: it is sent again, after the retry delay, on the same session (redone, nothing
// re-created: a new session per shed frame would leave the old one open and add to the load).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "clients/lib/client.h"

namespace sinew::client {

class RecoveringSession {
 public:
  struct Options {
    int max_attempts = 40;                             // per frame, before its error is returned (≥ 1)
    std::chrono::milliseconds retry_delay{100};        // between attempts (the balancer's checks
                                                       // take a moment to see a server gone)
  };
  // Uploads `rig` (unless resident) and creates the session `request` describes (its rig_id is
  // set here).
  static absl::StatusOr<std::unique_ptr<RecoveringSession>> Open(Client& client, const v1::Rig& rig,
                                                                 v1::CreateSessionRequest request, Options options);
  static absl::StatusOr<std::unique_ptr<RecoveringSession>> Open(Client& client, const v1::Rig& rig,
                                                                 v1::CreateSessionRequest request) {
    return Open(client, rig, std::move(request), Options{});
  }

  // One frame (its session_id is set here), recovered as above when needed.
  absl::StatusOr<v1::DeformResponse> Deform(v1::DeformRequest request);
  // UpdateSession on the session, and the parameters a re-created session is given from then on.
  // Not retried: its error (UNAVAILABLE with the server gone) is returned, the parameters kept
  // as they were.
  absl::StatusOr<v1::Session> Update(const v1::DeformerConfig& deformer);

  const std::string& session_id() const { return session_id_; }
  uint64_t frames_redone() const { return frames_redone_; }
  uint64_t sessions_recreated() const { return sessions_recreated_; }

 private:
  RecoveringSession(Client& client, std::string rig_bytes, v1::CreateSessionRequest create, Options options)
      : client_(client), rig_bytes_(std::move(rig_bytes)), create_(std::move(create)), options_(options) {}
  absl::Status Create();

  Client& client_;
  std::string rig_bytes_;
  v1::CreateSessionRequest create_;
  Options options_;
  std::string session_id_;
  uint64_t frames_redone_ = 0, sessions_recreated_ = 0;
};

}  // namespace sinew::client
