// Client shared-memory regions (RegisterSharedMemory): POSIX shared-memory objects a same-host
// client created, mapped here so that frames write their positions into them. A region stays
// mapped while a frame holds it, even after it is unregistered. A region no frame has used for
// the idle TTL (the sessions' --session-idle-ttl) is unregistered by ExpireIdle, as an idle
// session is closed: a client that dies without UnregisterSharedMemory does not keep its bytes
// counted against --shared-memory-bytes for the server's lifetime.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace sinew::server {

// A mapped region. A client may shrink its object (ftruncate) under the mapping; touching the
// pages past the object's end then raises SIGBUS, which would kill the server. The mapping is
// guarded: a SIGBUS inside it puts anonymous memory over the whole region (the access in progress
// completes into memory nobody sees) and marks it shrunk; frames that used it fail (Shrunk).
struct SharedMemoryMapping {
  // Takes ownership of the mapping; `guard` is its SIGBUS slot (GuardSlot), -1 for none.
  SharedMemoryMapping(char* data, uint64_t bytes, int guard) : data(data), bytes(bytes), guard(guard) {}
  ~SharedMemoryMapping();
  SharedMemoryMapping(const SharedMemoryMapping&) = delete;
  SharedMemoryMapping& operator=(const SharedMemoryMapping&) = delete;
  // Whether the object was found shrunk below the region (a SIGBUS caught in it): its contents
  // since then went nowhere, and every later frame into it fails.
  bool Shrunk() const;
  char* const data;
  const uint64_t bytes;
  const int guard;
};

// FAILED_PRECONDITION naming region `region_id` (as the client gave it) as shrunk.
absl::Status ShrunkRegionError(const std::string& region_id);

class SharedMemoryRegistry {
 public:
  SharedMemoryRegistry(uint64_t max_bytes, int64_t idle_ttl_ms) : max_bytes_(max_bytes), idle_ttl_ms_(idle_ttl_ms) {}

  // Maps `bytes` of the object `name`. FAILED_PRECONDITION when the feature is off,
  // INVALID_ARGUMENT for a bad name or an object smaller than `bytes`, NOT_FOUND when there is
  // no such object, RESOURCE_EXHAUSTED past --shared-memory-bytes, past the tenant's
  // `tenant_max` bytes (its max_shared_memory_bytes quota; 0: none) or when the server maps as
  // many regions as it can guard (1 024), or when a named tenant (authentication on) holds a
  // quarter of them (256: one tenant cannot take every slot with one-page regions). A region
  // counts the pages it maps: a 1-byte region is a page against both byte limits.
  // A region belongs to the tenant that registered it; another tenant's lookups find nothing,
  // and an object (the same file, by device and inode, under any name) that another tenant has
  // registered is refused PERMISSION_DENIED: one tenant cannot have the server write its frames
  // into another's object. (Objects no tenant has registered are not guarded: the host's file
  // permissions are what keeps tenants of one host apart; see README, Security.)
  // `now_ms` is its first use.
  absl::StatusOr<std::string> Register(const std::string& name, uint64_t bytes, const std::string& tenant,
                                       int64_t now_ms, uint64_t tenant_max = 0);
  absl::Status Unregister(const std::string& region_id, const std::string& tenant);
  // nullptr when unknown, expired or another tenant's; a region found is used at `now_ms`.
  std::shared_ptr<SharedMemoryMapping> Find(const std::string& region_id, const std::string& tenant, int64_t now_ms);
  // Unregisters the regions unused for longer than the idle TTL; returns how many.
  size_t ExpireIdle(int64_t now_ms);
  uint64_t mapped_bytes() const;

 private:
  struct Region {
    std::shared_ptr<SharedMemoryMapping> mapping;
    int64_t last_used_ms = 0;
    std::string tenant;
    uint64_t counted = 0;  // its pages' bytes, as counted in mapped_ and tenant_mapped_
    uint64_t device = 0, inode = 0;  // the object's identity (fstat)
  };
  void ForgetLocked(const Region& r);
  // Regions are keyed by id and tenant (ids are sequential, so guessable).
  static std::string Key(const std::string& id, const std::string& tenant) { return tenant + '\n' + id; }

  const uint64_t max_bytes_;
  const int64_t idle_ttl_ms_;
  mutable std::mutex mu_;
  uint64_t mapped_ = 0;
  absl::flat_hash_map<std::string, uint64_t> tenant_mapped_;  // by tenant; no entry for 0
  absl::flat_hash_map<std::string, uint32_t> tenant_regions_;  // by tenant; no entry for 0
  uint64_t next_id_ = 1;
  absl::flat_hash_map<std::string, Region> regions_;
};

}  // namespace sinew::server
