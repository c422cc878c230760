#include "server/shared_memory.h"
#include "server/echo_id.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sinew::server {
namespace {

// The live mappings' address ranges, read by the SIGBUS handler: fixed slots of atomics (no lock,
// no allocation in the handler). base 0: a free slot.
constexpr int kGuardSlots = 1024;
// Regions a named tenant may hold (the unauthenticated one, alone on its server, may take all).
constexpr uint32_t kTenantRegions = kGuardSlots / 4;
struct GuardSlot {
  std::atomic<uintptr_t> base{0};
  std::atomic<uintptr_t> size{0};
  std::atomic<bool> shrunk{false};
};
GuardSlot g_guard[kGuardSlots];
constexpr uintptr_t kReserved = 1;  // a slot being filled
struct sigaction g_previous_sigbus;

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardSlot& slot : g_guard) {
    const uintptr_t base = slot.base.load(std::memory_order_acquire);
    if (base == 0 || base == kReserved || at - base >= slot.size.load(std::memory_order_relaxed)) continue;
    // A client's object shrank under this region: anonymous pages over all of it, so that the
    // faulting access (and every later one) completes, and the frame is failed afterwards.
    if (mmap(reinterpret_cast<void*>(base), slot.size.load(std::memory_order_relaxed), PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS, -1, 0) != MAP_FAILED) {
      slot.shrunk.store(true, std::memory_order_release);
      return;  // the access is retried, now into anonymous memory
    }
    break;
  }
  // Not a region's (or it could not be replaced): what SIGBUS did before, on the retried access.
  sigaction(SIGBUS, &g_previous_sigbus, nullptr);
  (void)sig;
  (void)context;
}

void InstallSigbusGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = &OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

// A free slot for [data, data + bytes), or -1 when all are taken. The slot is reserved (base 1,
// which the handler skips) while its size is written, then published by its base.
int TakeGuardSlot(char* data, uint64_t bytes) {
  for (int i = 0; i < kGuardSlots; ++i) {
    uintptr_t expected = 0;
    if (!g_guard[i].base.compare_exchange_strong(expected, kReserved, std::memory_order_acq_rel)) continue;
    g_guard[i].size.store(bytes, std::memory_order_relaxed);
    g_guard[i].shrunk.store(false, std::memory_order_relaxed);
    g_guard[i].base.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return i;
  }
  return -1;
}

}  // namespace

SharedMemoryMapping::~SharedMemoryMapping() {
  if (guard >= 0) g_guard[guard].base.store(0, std::memory_order_release);
  munmap(data, bytes);
}

absl::Status ShrunkRegionError(const std::string& region_id) {
  return absl::FailedPreconditionError(absl::StrCat(
      "outputs.shared_memory.region_id: the object behind region ", EchoId(region_id),
      " was shrunk below its registered size (ftruncate); nothing more reaches it: register a new region"));
}

bool SharedMemoryMapping::Shrunk() const {
  return guard >= 0 && g_guard[guard].shrunk.load(std::memory_order_acquire);
}

absl::StatusOr<std::string> SharedMemoryRegistry::Register(const std::string& name, uint64_t bytes,
                                                           const std::string& tenant, int64_t now_ms,
                                                           uint64_t tenant_max) {
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
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (bytes > UINT64_MAX - page) return absl::InvalidArgumentError(absl::StrCat("bytes: ", bytes, " is too large"));
  const uint64_t counted = (bytes + page - 1) / page * page;
  // Asked before the object is opened and again once it is mapped (another registration may
  // take the room meanwhile).
  auto room = [&]() -> absl::Status {
    if (mapped_ + counted > max_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat("bytes: ", bytes, " more (", counted, " in whole pages) would map ",
                                                       mapped_ + counted, " bytes, over --shared-memory-bytes ",
                                                       max_bytes_));
    }
    if (const auto held = tenant_regions_.find(tenant); !tenant.empty() && held != tenant_regions_.end() &&
                                                        held->second >= kTenantRegions) {
      return absl::ResourceExhaustedError(absl::StrCat("name: tenant ", tenant, " holds ", held->second,
                                                       " regions, as many as a tenant may (a quarter of the server's ",
                                                       kGuardSlots, "); unregister regions you no longer use"));
    }
    const auto it = tenant_mapped_.find(tenant);
    const uint64_t own = it == tenant_mapped_.end() ? 0 : it->second;
    if (tenant_max > 0 && own + counted > tenant_max) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "quota max_shared_memory_bytes=", tenant_max, " of tenant ", tenant, ": ", own, " mapped, ", counted,
          " more (", bytes, " in whole pages) would pass it; unregister regions you no longer use"));
    }
    return absl::OkStatus();
  };
  {
    std::lock_guard lock(mu_);
    if (auto st = room(); !st.ok()) return st;
  }
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat("name: no shared-memory object ", name));
    if (e == EMFILE || e == ENFILE) {
      return absl::ResourceExhaustedError(absl::StrCat("name: ", name, ": the server has no file descriptor to spare (",
                                                       std::strerror(e), ")"));
    }
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
  InstallSigbusGuard();
  const int guard = TakeGuardSlot(static_cast<char*>(data), bytes);
  if (guard < 0) {
    munmap(data, bytes);
    return absl::ResourceExhaustedError(absl::StrCat("name: ", name, ": ", kGuardSlots, " regions are mapped already"));
  }
  auto mapping = std::make_shared<SharedMemoryMapping>(static_cast<char*>(data), bytes, guard);
  std::lock_guard lock(mu_);
  if (auto st = room(); !st.ok()) return st;  // the mapping is released with `mapping`
  const uint64_t device = st.st_dev, inode = st.st_ino;
  for (const auto& [key, r] : regions_) {  // at most 1 024
    if (r.tenant != tenant && r.device == device && r.inode == inode) {
      return absl::PermissionDeniedError(
          absl::StrCat("name: ", name, " is an object another tenant has registered; make your own"));
    }
  }
  mapped_ += counted;
  tenant_mapped_[tenant] += counted;
  ++tenant_regions_[tenant];
  std::string id = absl::StrCat("shm-", next_id_++);
  regions_[Key(id, tenant)] = Region{std::move(mapping), now_ms, tenant, counted, device, inode};
  return id;
}

void SharedMemoryRegistry::ForgetLocked(const Region& r) {
  mapped_ -= r.counted;
  auto it = tenant_mapped_.find(r.tenant);
  if ((it->second -= r.counted) == 0) tenant_mapped_.erase(it);
  auto held = tenant_regions_.find(r.tenant);
  if (--held->second == 0) tenant_regions_.erase(held);
}

absl::Status SharedMemoryRegistry::Unregister(const std::string& region_id, const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto it = regions_.find(Key(region_id, tenant));
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("region_id: no region \"", EchoId(region_id), "\""));
  }
  ForgetLocked(it->second);
  regions_.erase(it);  // unmapped when the last frame using it lets go
  return absl::OkStatus();
}

std::shared_ptr<SharedMemoryMapping> SharedMemoryRegistry::Find(const std::string& region_id,
                                                                const std::string& tenant, int64_t now_ms) {
  std::lock_guard lock(mu_);
  auto it = regions_.find(Key(region_id, tenant));
  if (it == regions_.end()) return nullptr;
  it->second.last_used_ms = std::max(it->second.last_used_ms, now_ms);
  return it->second.mapping;
}

size_t SharedMemoryRegistry::ExpireIdle(int64_t now_ms) {
  // The mappings are released outside the lock (a munmap of a large region takes a while);
  // those a frame still holds stay mapped until it lets go.
  std::vector<std::shared_ptr<SharedMemoryMapping>> expired;
  {
    std::lock_guard lock(mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (now_ms - it->second.last_used_ms > idle_ttl_ms_) {
        ForgetLocked(it->second);
        expired.push_back(std::move(it->second.mapping));
        regions_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  return expired.size();
}

uint64_t SharedMemoryRegistry::mapped_bytes() const {
  std::lock_guard lock(mu_);
  return mapped_;
}

}  // namespace sinew::server
