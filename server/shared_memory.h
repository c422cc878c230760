// Client shared-memory regions (RegisterSharedMemory): POSIX shared-memory objects a same-host
// client created, mapped here so that frames write their positions into them. A region stays
// mapped while a frame holds it, even after it is unregistered.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace sinew::server {

struct SharedMemoryMapping {
  SharedMemoryMapping(char* data, uint64_t bytes) : data(data), bytes(bytes) {}
  ~SharedMemoryMapping();
  SharedMemoryMapping(const SharedMemoryMapping&) = delete;
  SharedMemoryMapping& operator=(const SharedMemoryMapping&) = delete;
  char* const data;
  const uint64_t bytes;
};

class SharedMemoryRegistry {
 public:
  explicit SharedMemoryRegistry(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // Maps `bytes` of the object `name`. FAILED_PRECONDITION when the feature is off,
  // INVALID_ARGUMENT for a bad name or an object smaller than `bytes`, NOT_FOUND when there is
  // no such object, RESOURCE_EXHAUSTED past --shared-memory-bytes.
  // A region belongs to the tenant that registered it; another tenant's lookups find nothing.
  absl::StatusOr<std::string> Register(const std::string& name, uint64_t bytes, const std::string& tenant);
  absl::Status Unregister(const std::string& region_id, const std::string& tenant);
  std::shared_ptr<SharedMemoryMapping> Find(const std::string& region_id, const std::string& tenant) const;

 private:
  // Regions are keyed by id and tenant (ids are sequential, so guessable).
  static std::string Key(const std::string& id, const std::string& tenant) { return tenant + '\n' + id; }

  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  uint64_t mapped_ = 0;
  uint64_t next_id_ = 1;
  absl::flat_hash_map<std::string, std::shared_ptr<SharedMemoryMapping>> regions_;
};

}  // namespace sinew::server
