// --state-dir: what a restart must not lose. Every rig an upload acknowledged is written there
// before the client hears OK (the serialized bytes as uploaded, and the tenants holding it), and
// read back when the server starts; DeleteRig removes it. Files are written to a temporary name,
// synced and renamed, so a crash (kill -9, power loss) leaves either the old file or the new one.
//
//   DIR/rigs/<id>.rig      the serialized sinew.v1.Rig (its SHA-256 is <id>)
//   DIR/rigs/<id>.tenants  one tenant per line ("" is the unauthenticated one)
//   DIR/sessions/<id>.session  an open session: its tenant and the CreateSessionRequest that
//                          makes it again (with the parameters UpdateSession set since), written
//                          before CreateSession answers, removed when the session is closed or
//                          expires; a restart opens it again under the same id
//   DIR/sessions/<id>.state    a stateful session's state (a serialized sinew.v1.SessionState, as
//                          GetSessionState gives it), written when the server stops (SIGTERM or
//                          SIGINT, after the drain); the next start removes it and restores it
//                          (SetSessionState; on the kind of backend it ran on), so a later crash
//                          cannot bring back an old history; removed with a record set aside
//
//   DIR/lock               held by the server using DIR (flock, for its whole life; the file
//                          names its pid): a second server given DIR fails to start, naming it
//
// Not kept: a stateful session's state after a crash (kill -9, power loss: it starts again from
// rest; GetSessionState/SetSessionState carry it to another server), finished preparations other than those --cache-dir keeps
// (swing-twist's weights, implicit skinning's composition operators; the others are redone by
// the first session after a restart).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sinew::server {

// Removes the temporaries older than an hour that writers killed mid-write left in `dir`, of the
// files named with `extensions` (core/util/atomic_file.h), and says how many on stderr.
void SweepStaleTemporaries(const std::string& dir, const std::vector<std::string>& extensions);

class StateDir {
 public:
  // Creates DIR/rigs when missing and locks DIR (FAILED_PRECONDITION, naming the holder's pid,
  // when another process holds it). Empty `dir`: a StateDir that keeps nothing.
  static absl::StatusOr<StateDir> Open(const std::string& dir);
  StateDir() = default;
  bool enabled() const { return !rigs_.empty(); }

  // Writes (or rewrites) the rig's bytes and its tenants durably.
  absl::Status SaveRig(const std::string& id, const std::string& bytes, const std::vector<std::string>& tenants) const;
  // Rewrites its tenants only.
  absl::Status SaveTenants(const std::string& id, const std::vector<std::string>& tenants) const;
  absl::Status RemoveRig(const std::string& id) const;
  // Calls load(id, bytes, tenants) for every rig kept; a rig whose file cannot be read, whose
  // bytes do not hash to its id or that load refuses is renamed *.bad, one that load finds no
  // room for (RESOURCE_EXHAUSTED) is left as it is; both are reported in the returned list.
  std::vector<std::string> LoadRigs(
      const std::function<absl::Status(const std::string& id, const std::string& bytes,
                                       const std::vector<std::string>& tenants)>& load) const;

  // Writes (or rewrites) a session's record durably: its tenant and `request`, a serialized
  // sinew.v1.CreateSessionRequest.
  absl::Status SaveSession(const std::string& id, const std::string& tenant, const std::string& request) const;
  // Removes the record and the session's state file, if any.
  absl::Status RemoveSession(const std::string& id) const;
  // A stateful session's state kept at a stop (DIR/sessions/<id>.state), written durably.
  absl::Status SaveSessionState(const std::string& id, const std::string& bytes) const;
  // The session's kept state; nullopt when there is none or it cannot be read (`problem` says
  // why). The caller removes it (RemoveSessionState) before it applies it: a state is used once.
  std::optional<std::string> ReadSessionState(const std::string& id, std::string* problem) const;
  absl::Status RemoveSessionState(const std::string& id) const;
  // Whether rig `id`'s file is kept (loaded at this start or not).
  bool HasRig(const std::string& id) const;
  // The tenants its tenants file names (none: no file, or it cannot be read).
  std::vector<std::string> ReadTenants(const std::string& id) const;
  // Calls load(id, tenant, request) for every session kept; a record that cannot be read, or that
  // load refuses for good (DATA_LOSS, INVALID_ARGUMENT, NOT_FOUND: its rig is not kept), is
  // renamed *.bad; any other refusal (no room, a GPU or a rig not available at this start, a
  // preparation that failed) leaves it for a later start (until 2026-12-03 only no room did, and
  // sessions clients were told are kept were lost to a passing condition); both are reported.
  std::vector<std::string> LoadSessions(
      const std::function<absl::Status(const std::string& id, const std::string& tenant, const std::string& request)>&
          load) const;
  // Whether LoadSessions sets a record that load refused so aside (*.bad, its history with it).
  static bool SetAside(const absl::Status& refused) {
    return refused.code() == absl::StatusCode::kDataLoss || refused.code() == absl::StatusCode::kInvalidArgument ||
           refused.code() == absl::StatusCode::kNotFound;
  }

 private:
  StateDir(std::string rigs, std::string sessions) : rigs_(std::move(rigs)), sessions_(std::move(sessions)) {}
  static absl::StatusOr<std::shared_ptr<const int>> LockDir(const std::string& dir);
  std::string rigs_;      // DIR/rigs
  std::string sessions_;  // DIR/sessions
  std::shared_ptr<const int> lock_;  // DIR/lock's descriptor, closed (unlocked) with the last copy
};

}  // namespace sinew::server
