// A session that outlives its server, for clients behind a balancer (deploy/haproxy.cfg): it
// keeps the rig's bytes and how the session was created. When a frame finds no server
// (UNAVAILABLE), it is sent again on the same session after a wait (Options): a transport blip,
// or a server restarted with --state-dir, keeps the session (and its history). When the server
// answering does not know the session (NOT_FOUND: the balancer moved this client to another
// server, or the server restarted without its state), it uploads the rig again
// (content-addressed: one small round trip where the rig is resident), creates the session again
// and sends the frame again. Either way the frame counts as redone. A re-created session has the
// parameters it was last given (Open's, or Update's). Without Options::checkpoint_every a
// history-dependent method's re-created session starts again from rest (a state set with
// SetSessionState is not carried over), and a stateful session's frame that the server applied
// but whose answer was lost is refused when sent again ("was already applied"): that error is
// returned.
// A frame the server shed under load (UNAVAILABLE "overloaded: ...", --max-queue-ms) is not a
// lost server: it is sent again, after a wait, on the same session (redone, nothing
// re-created: a new session per shed frame would leave the old one open and add to the load).
// The waits between a frame's attempts back off exponentially with jitter, within a total time
// (Options): until 2026-12-07 they were a fixed 100 ms, 40 attempts (about 4 s, less than a
// server takes to reload a large --state-dir, and in step across a fleet of clients).
// One thread at a time; a stateful session's frames have one writer (see FrameStream): no stream
// of session_id() while Deform is used.
// With Options::checkpoint_every set, a history-dependent session does not start again from
// rest: the history is carried over (below).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/lib/client.h"

namespace sinew::client {

class RecoveringSession {
 public:
  struct Options {
    // Per frame, before its error is returned (≥ 1), unless retry_timeout ends it first.
    int max_attempts = 40;
    // The wait before a frame's second attempt (the balancer's checks take a moment to see a
    // server gone), doubled before each later one up to max_retry_delay; each wait is drawn at
    // random within ±25 % of that, so that a fleet of clients that lost one server does not
    // retry in lockstep (RetryBackoff).
    std::chrono::milliseconds retry_delay{50};
    // History-dependent methods (elastic-implicit, supercages, pbs with jiggle, swing-twist
    // unwrapping): every this many applied frames the session's state is fetched
    // (GetSessionState, one call) and kept, with the requests of the frames applied since (their
    // outputs cleared; at most 2 × checkpoint_every of them while checkpoints fail, then the
    // history is given up until the next one). A session created again is given that state
    // (SetSessionState) and those frames again, in order, before the frame at hand: its history
    // goes on where it was, bit for bit on a server of the backend kind the state was saved on
    // (asked for at the re-creation when the session was opened with BACKEND_AUTO; a server
    // without that kind gets AUTO). While the new server's method still prepares (SetSessionState
    // UNAVAILABLE, or frames from its fallback) the rebuild is tried again after a wait,
    // and by the next call when this one runs out of attempts. A frame the server answers
    // `from_rest` although the session had a history and the frame asked for no reset (a server
    // with --state-dir restarted after a crash reopens the session from rest; also one restarted
    // cleanly whose own kept state waits for the method's preparation, pbs's tets: the client's
    // is set once the method serves, the call retrying meanwhile) is sent again, once per call,
    // after the kept history is set again on the session. Once per call, a frame whose answer
    // was lost after the server applied it (resent, it "was already applied") is answered the same
    // way on its own session. Frames a fallback served are no part of the history (the method
    // starts from rest after them); after a refused frame (which may have changed the history: a
    // refused reset) a checkpoint is taken. When the state is refused (no server of that backend
    // kind) or nothing usable was kept, the session starts again from rest and histories_lost()
    // counts it. A session whose state is empty (a stateless method) stops checkpointing until
    // Update. 0: off (a session created again starts from rest; lost answers come back as errors).
    int checkpoint_every = 0;
    std::chrono::milliseconds max_retry_delay{2000};  // the longest wait between attempts (±25 %)
    // A frame's attempts in all: none starts later than this after its first (the last wait is
    // cut to end here); then the last error is returned. Long enough for a server to restart and
    // reload its --state-dir, or a balancer to move the client. Where max_attempts × retry_delay
    // is longer (what a caller who set them asked for before the backoff: the fixed waits' total)
    // that is the bound. 0: no bound of time (max_attempts alone).
    std::chrono::milliseconds retry_timeout{30000};
  };
  // The total time a frame's attempts may take under `options` (0: no bound): retry_timeout, or
  // max_attempts × retry_delay where that is longer.
  static std::chrono::milliseconds RetryBudget(const Options& options);
  // The wait before attempt `retry` + 1 of a frame (retry ≥ 1): retry_delay × 2^(retry - 1), at
  // most max_retry_delay, times 0.75 + 0.5 × `unit` (`unit`: uniform in [0, 1), drawn per wait).
  static std::chrono::nanoseconds RetryBackoff(const Options& options, int retry, double unit);
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
  // as they were. With checkpoint_every, a checkpoint is taken right after it (the history goes
  // on under the new parameters); if that fails, the history is given up until the next one.
  absl::StatusOr<v1::Session> Update(const v1::DeformerConfig& deformer);

  const std::string& session_id() const { return session_id_; }
  uint64_t frames_redone() const { return frames_redone_; }
  uint64_t sessions_recreated() const { return sessions_recreated_; }
  // checkpoint_every: frames sent again to rebuild a history, checkpoints taken, and sessions
  // that started again from rest although a history was kept or wanted.
  uint64_t frames_replayed() const { return frames_replayed_; }
  uint64_t checkpoints() const { return checkpoints_; }
  uint64_t histories_lost() const { return histories_lost_; }

 private:
  RecoveringSession(Client& client, std::string rig_bytes, v1::CreateSessionRequest create, Options options)
      : client_(client), rig_bytes_(std::move(rig_bytes)), create_(std::move(create)), options_(options),
        random_(std::random_device{}()) {}
  absl::Status Create();
  // checkpoint_every: `request` was applied (answered by `frame`); keeps it, and checkpoints when due.
  void Applied(const v1::DeformRequest& request, const v1::DeformResponse& frame);
  // `frame` came from the method's fallback (its preparation still running on that server).
  bool ByFallback(const v1::DeformResponse& frame) const;
  // The history starts again from rest (a reset, the method's first frame, a new checkpoint).
  void StartHistory();
  // GetSessionState now; `required`: the kept frames no longer describe the history (Update), so
  // a failure gives the history up.
  void Checkpoint(bool required);
  // Gives the kept history up (the session itself goes on): a session created again before the
  // next checkpoint starts from rest, counted in histories_lost().
  void LoseHistory();
  // Brings the current session to the kept history: the checkpoint, then the frames since.
  absl::Status Restore();

  Client& client_;
  std::string rig_bytes_;
  v1::CreateSessionRequest create_;
  Options options_;
  std::string session_id_;
  uint64_t frames_redone_ = 0, sessions_recreated_ = 0;
  // checkpoint_every: the last checkpoint (none: the session as created or reset), the frames
  // applied after it, whether the two still give the session's history, whether the last
  // checkpoint was empty (a stateless method), and frames since the last GetSessionState.
  std::optional<v1::SessionState> checkpoint_;
  std::vector<v1::DeformRequest> since_;
  // restore_pending_: the current session does not have the kept history yet (re-created, or a
  // lost answer); kept across calls, so that a call that runs out of attempts leaves it to the next.
  bool history_ = true, stateless_ = false, restore_pending_ = false;
  int untried_ = 0;
  // The current server session holds a history (a frame applied on it, or one restored): a frame
  // it answers `from_rest` without a reset means the server lost that history.
  bool session_has_history_ = false;
  uint64_t frames_replayed_ = 0, checkpoints_ = 0, histories_lost_ = 0;
  std::minstd_rand random_;  // the waits' jitter, seeded per session
};

}  // namespace sinew::client
