// --state-dir: what a restart must not lose. Every rig an upload acknowledged is written there
// before the client hears OK (the serialized bytes as uploaded, and the tenants holding it), and
// read back when the server starts; DeleteRig removes it. Files are written to a temporary name,
// synced and renamed, so a crash (kill -9, power loss) leaves either the old file or the new one.
//
//   DIR/rigs/<id>.rig      the serialized sinew.v1.Rig (its SHA-256 is <id>)
//   DIR/rigs/<id>.tenants  one tenant per line ("" is the unauthenticated one)
//
// Not kept (yet): sessions and their state, finished preparations (implicit skinning's fields
// are recomputed by the first session, its composition operators are in --cache-dir).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sinew::server {

class StateDir {
 public:
  // Creates DIR/rigs when missing. Empty `dir`: a StateDir that keeps nothing.
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

 private:
  explicit StateDir(std::string rigs) : rigs_(std::move(rigs)) {}
  std::string rigs_;  // DIR/rigs
};

}  // namespace sinew::server
