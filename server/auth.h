// Tenants and their bearer tokens (--token-file). Each line of the file is "TOKEN TENANT"
// (blank lines and lines starting with '#' are skipped); a client sends the token as gRPC
// metadata "authorization: Bearer TOKEN". Every call is answered as its tenant: rigs, sessions
// and shared-memory regions belong to the tenants that made them, and another tenant gets
// NOT_FOUND for them (so ids do not leak). Without a token file the server is unauthenticated
// and every caller is the one tenant "" (loopback development, the README's quick start).
// Reload() replaces the table at once (SIGHUP); a file that does not parse leaves the old one.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace sinew::server {

class TokenTable {
 public:
  // Reads `path` (empty: authentication off). INVALID_ARGUMENT names the file and line.
  absl::Status Load(const std::string& path);
  // Reads the same file again; on error the old table stays.
  absl::Status Reload();
  bool enabled() const { return !path_.empty(); }
  size_t size() const;

  // The caller's tenant: "" when authentication is off; UNAUTHENTICATED when the metadata is
  // missing, malformed or names no known token (the message says which, never the token).
  absl::StatusOr<std::string> Tenant(const grpc::CallbackServerContext& ctx) const;

 private:
  using Table = absl::flat_hash_map<std::string, std::string>;  // SHA-256 of the token -> tenant
  static absl::StatusOr<std::shared_ptr<const Table>> Parse(const std::string& path);

  std::string path_;
  mutable std::mutex mu_;
  std::shared_ptr<const Table> table_;
};

}  // namespace sinew::server
