// A session that outlives its server, for clients behind a balancer (deploy/haproxy.cfg): it
// keeps the rig's bytes and how the session was created, and when a frame finds the server gone
// (UNAVAILABLE) or the session unknown (NOT_FOUND: the balancer moved this client to another
// server, or the server restarted), it uploads the rig again (content-addressed: one small round
// trip where the rig is resident), creates the session again and sends the frame again, counting
// it as redone. A history-dependent method's session starts again from rest when re-created.
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
    int max_attempts = 40;                             // per frame, before its error is returned
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
