// Tenants and their bearer tokens (--token-file). Each line of the file is "TOKEN TENANT
// [QUOTA=N ...]" (blank lines and lines starting with '#' are skipped), the quotas being
// max_rigs, max_rig_bytes (resident bytes of the tenant's rigs), max_sessions,
// max_frames_per_second and max_shared_memory_bytes (its registered regions, in whole pages)
// (0 or absent: no limit; counts and bytes whole numbers; a tenant named on several lines has
// the quotas any of them gives, and lines that give quotas must agree). A call past one is RESOURCE_EXHAUSTED naming it (a DeformClip batch waits for
// frame tokens instead: TakeFrameOrWait). A client sends the token as gRPC
// metadata "authorization: Bearer TOKEN". Every call is answered as its tenant: rigs, sessions
// and shared-memory regions belong to the tenants that made them, and another tenant gets
// NOT_FOUND for them (so ids do not leak). Without a token file the server is unauthenticated
// and every caller is the one tenant "" (loopback development, the README's quick start).
// Reload() replaces the table at once (SIGHUP); a file that does not parse leaves the old one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace sinew::server {

struct TenantQuotas {
  uint64_t max_rigs = 0, max_rig_bytes = 0, max_sessions = 0;
  double max_frames_per_second = 0;
  uint64_t max_shared_memory_bytes = 0;  // regions mapped (RegisterSharedMemory), in whole pages
};

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
  // Whether a call that started as `tenant` may go on: its token is still in the table. Long
  // calls (StreamDeform, DeformClip) ask before each frame; `seen` is the call's record of the
  // last reload it was checked against (0 at its start), so between reloads this is one atomic
  // load. A token removed by Reload() ends the calls it opened (until 2026-12-03 they went on,
  // and, their tenant gone, without its frame quota).
  bool StillHolds(const grpc::CallbackServerContext& ctx, const std::string& tenant, uint64_t* seen) const;
  // The tenant's quotas (none for "" or an unknown tenant).
  TenantQuotas Quotas(const std::string& tenant) const;
  // Counts one frame of `tenant` against max_frames_per_second (a token bucket holding one
  // second of frames, at least one); RESOURCE_EXHAUSTED naming the quota when it is spent.
  absl::Status TakeFrame(const std::string& tenant);
  // The same without failing: true when the frame may go now (its token taken); false with
  // *wait_seconds set to when the next token will be there (DeformClip paces its batch so).
  bool TakeFrameOrWait(const std::string& tenant, double* wait_seconds);

 private:
  struct Parsed {
    absl::flat_hash_map<std::string, std::string> tenant_of;  // SHA-256 of the token -> tenant
    absl::flat_hash_map<std::string, TenantQuotas> quotas;
  };
  static absl::StatusOr<std::shared_ptr<const Parsed>> Parse(const std::string& path);
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };

  std::string path_;
  std::atomic<uint64_t> generation_{0};  // reloads that replaced the table
  mutable std::mutex mu_;
  std::shared_ptr<const Parsed> table_;
  absl::flat_hash_map<std::string, Bucket> buckets_;  // under mu_; kept across reloads
};

}  // namespace sinew::server
