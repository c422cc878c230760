#include "server/shared_memory.h"
#include "server/echo_id.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace sinew::server {

SharedMemoryMapping::~SharedMemoryMapping() { munmap(data, bytes); }

absl::StatusOr<std::string> SharedMemoryRegistry::Register(const std::string& name, uint64_t bytes,
                                                           const std::string& tenant) {
  if (max_bytes_ == 0) {
    return absl::FailedPreconditionError(
        "shared memory is off on this server (start it with --shared-memory-bytes); use the positions in responses");
  }
  const std::string prefix = "/sinew-";
  bool ok = name.size() > prefix.size() && name.size() <= prefix.size() + 200 && name.rfind(prefix, 0) == 0;
  for (size_t i = prefix.size(); ok && i < name.size(); ++i) {
    const char c = name[i];
    ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name: \"", name.substr(0, 64), name.size() > 64 ? "...\"" : "\"",
        " is not \"/sinew-\" followed by 1 to 200 of A-Z a-z 0-9 . _ -"));
  }
  if (bytes == 0) return absl::InvalidArgumentError("bytes: must be > 0");
  {
    std::lock_guard lock(mu_);
    if (mapped_ + bytes > max_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat("bytes: ", bytes, " more would map ", mapped_ + bytes,
                                                       " bytes, over --shared-memory-bytes ", max_bytes_));
    }
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat("name: no shared-memory object ", name));
    return absl::PermissionDeniedError(absl::StrCat("name: ", name, ": ", std::strerror(e)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || uint64_t(st.st_size) < bytes) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("bytes: ", bytes, " but the object ", name, " holds ", uint64_t(st.st_size)));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("name: ", name, ": mmap: ", std::strerror(errno)));
  }
  auto mapping = std::make_shared<SharedMemoryMapping>(static_cast<char*>(data), bytes);
  std::lock_guard lock(mu_);
  if (mapped_ + bytes > max_bytes_) {  // another registration took the room meanwhile
    return absl::ResourceExhaustedError(absl::StrCat("bytes: over --shared-memory-bytes ", max_bytes_));
  }
  mapped_ += bytes;
  std::string id = absl::StrCat("shm-", next_id_++);
  regions_[Key(id, tenant)] = std::move(mapping);
  return id;
}

absl::Status SharedMemoryRegistry::Unregister(const std::string& region_id, const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto it = regions_.find(Key(region_id, tenant));
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("region_id: no region \"", EchoId(region_id), "\""));
  }
  mapped_ -= it->second->bytes;
  regions_.erase(it);  // unmapped when the last frame using it lets go
  return absl::OkStatus();
}

std::shared_ptr<SharedMemoryMapping> SharedMemoryRegistry::Find(const std::string& region_id,
                                                                const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = regions_.find(Key(region_id, tenant));
  return it == regions_.end() ? nullptr : it->second;
}

}  // namespace sinew::server
