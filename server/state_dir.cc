#include "server/state_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/util/atomic_file.h"
#include "sinew/v1/rig_id.h"

namespace sinew::server {
namespace {

namespace fs = std::filesystem;

// A write or removal that failed, for the client: said in full (paths, errno) on the server's
// stderr, and answered UNAVAILABLE without them: a full or failing disk is the server's state,
// which may pass, and its paths are not the client's to see (until 2026-12-08 INTERNAL, with
// them).
absl::Status NotKept(absl::string_view detail) {
  std::fprintf(stderr, "sinew-server: --state-dir: %.*s\n", int(detail.size()), detail.data());
  return absl::UnavailableError("the server could not update its --state-dir (its log says why)");
}

// Writes `text` to `path` durably: a unique temporary file, fsync, rename over, fsync of the
// folder; readable by this user only (tenants' rigs).
absl::Status WriteDurably(const std::string& path, const std::string& text) {
  auto st = WriteFileAtomically(path, {text}, {.mode = 0600});
  if (!st.ok()) return NotKept(st.message());
  return st;
}

std::string TenantsText(const std::vector<std::string>& tenants) {
  std::string out;
  for (const std::string& t : tenants) absl::StrAppend(&out, "tenant ", t, "\n");
  return out;
}

}  // namespace

namespace {
// Whether `path` is a regular file itself (not a link, FIFO or device): the only kind read here.
bool RegularFile(const fs::path& path) {
  std::error_code ec;
  return fs::symlink_status(path, ec).type() == fs::file_type::regular;
}

// A whole file as one string, or nullopt where it cannot be read.
std::optional<std::string> ReadBytes(const fs::path& path) {
  if (!RegularFile(path)) return std::nullopt;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;
  const std::streamoff size = in.tellg();
  if (size < 0) return std::nullopt;
  std::string bytes(size_t(size), '\0');
  in.seekg(0);
  if (size > 0 && !in.read(bytes.data(), size)) return std::nullopt;
  return bytes;
}
}  // namespace

void SweepStaleTemporaries(const std::string& dir, const std::vector<std::string>& extensions) {
  if (const int n = RemoveStaleTemporaries(dir, kStaleTemporaryAge, extensions); n > 0) {
    std::fprintf(stderr, "sinew-server: removed %d temporary file%s older than an hour from %s\n", n, n == 1 ? "" : "s",
                 dir.c_str());
  }
}

absl::StatusOr<StateDir> StateDir::Open(const std::string& dir) {
  if (dir.empty()) return StateDir();
  std::error_code ec;
  const fs::path rigs = fs::path(dir) / "rigs", sessions = fs::path(dir) / "sessions";
  for (const fs::path& folder : {fs::path(dir), rigs, sessions}) {
    // Made for the server's user alone, as its files are (0600): the names are rig and session
    // ids (until 2026-12-03 the umask's, usually 0755). A folder that exists keeps its mode.
    if (fs::exists(folder, ec)) continue;
    fs::create_directories(folder, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--state-dir: cannot create ", folder.string(), ": ", ec.message()));
    fs::permissions(folder, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  // Locked before anything in it is written or removed: a second server refused here touches
  // nothing of the first one's (until 2026-12-07 it probed and swept stale temporaries first).
  auto lock = LockDir(dir);
  if (!lock.ok()) return lock.status();
  const std::string probe = (rigs / ".probe").string();
  if (auto st = WriteFileAtomically(probe, {std::string("ok")}, {.mode = 0600}); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--state-dir ", dir, " is not writable: ", st.message()));
  }
  fs::remove(probe, ec);
  // Temporaries a killed server left (core/util/atomic_file.h), of the kinds written here.
  SweepStaleTemporaries(rigs.string(), {".rig", ".tenants", ".probe"});
  SweepStaleTemporaries(sessions.string(), {".session", ".state"});
  StateDir opened(rigs.string(), sessions.string());
  opened.lock_ = std::move(*lock);
  return opened;
}

// DIR/lock, held (flock) for the process's life: released by the kernel however it ends, so a
// crashed server's successor starts at once. The file says whose it is.
absl::StatusOr<std::shared_ptr<const int>> StateDir::LockDir(const std::string& dir) {
  const std::string path = (fs::path(dir) / "lock").string();
  // Not through a symbolic link: the server truncates the file (until 2026-12-07 whatever a link
  // named lock pointed to).
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--state-dir: cannot open ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char owner[64] = {};
    const ssize_t n = ::pread(fd, owner, sizeof owner - 1, 0);
    ::close(fd);
    std::string who(owner, n > 0 ? size_t(n) : 0);
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--state-dir ", dir, " is in use by another server (", who.empty() ? "pid unknown" : who,
          "): two servers on one state directory would each remove and rename the other's records"));
    }
    return absl::InvalidArgumentError(absl::StrCat("--state-dir: cannot lock ", path, ": ", std::strerror(err)));
  }
  const std::string mine = absl::StrCat("pid ", ::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, mine.data(), mine.size(), 0) != ssize_t(mine.size())) {
    // Only the message to a second server suffers; the lock holds.
    std::fprintf(stderr, "sinew-server: --state-dir: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
  }
  return std::shared_ptr<const int>(new int(fd), [](const int* f) {
    ::close(*f);
    delete f;
  });
}

absl::Status StateDir::SaveRig(const std::string& id, const std::string& bytes,
                               const std::vector<std::string>& tenants) const {
  if (!enabled()) return absl::OkStatus();
  // Tenants first: a crash between the two leaves a tenants file without its rig, ignored.
  if (auto st = SaveTenants(id, tenants); !st.ok()) return st;
  return WriteDurably(absl::StrCat(rigs_, "/", id, ".rig"), bytes);
}

absl::Status StateDir::SaveTenants(const std::string& id, const std::vector<std::string>& tenants) const {
  if (!enabled()) return absl::OkStatus();
  return WriteDurably(absl::StrCat(rigs_, "/", id, ".tenants"), TenantsText(tenants));
}

// Removes `path` (gone already: fine) and syncs its folder, so that a power cut after the caller
// answers does not bring the file back (until 2026-12-03 an error was ignored and the folder not
// synced: a deleted rig or closed session could return at the next start).
static absl::Status RemoveDurably(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return NotKept(absl::StrCat("cannot remove ", path, ": ", ec.message()));
  }
  SyncFolderOf(path);
  return absl::OkStatus();
}

absl::Status StateDir::RemoveRig(const std::string& id) const {
  if (!enabled()) return absl::OkStatus();
  // The rig first: a tenants file without its rig is ignored at a start.
  if (auto st = RemoveDurably(absl::StrCat(rigs_, "/", id, ".rig")); !st.ok()) return st;
  return RemoveDurably(absl::StrCat(rigs_, "/", id, ".tenants"));
}

std::vector<std::string> StateDir::LoadRigs(
    const std::function<absl::Status(const std::string&, const std::string&, const std::vector<std::string>&)>& load)
    const {
  std::vector<std::string> problems;
  if (!enabled()) return problems;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(rigs_, ec)) {
    const fs::path path = entry.path();
    if (path.extension() != ".rig") continue;
    // A FIFO (or any file that is not a regular one, links included) is not read: reading a FIFO
    // blocked the start for good (until 2026-12-07).
    if (!RegularFile(path)) {
      problems.push_back(absl::StrCat(path.string(), ": not a regular file (left alone)"));
      continue;
    }
    const std::string id = path.stem().string();
    const fs::path tenants_path = fs::path(rigs_) / (id + ".tenants");
    // One copy of the bytes in memory (until 2026-12-07 three: a stream and two copies of it).
    const std::optional<std::string> bytes = ReadBytes(path);
    const std::vector<std::string> tenants = ReadTenants(id);
    absl::Status st;
    if (!bytes) {
      st = absl::DataLossError("it cannot be read");
    } else if (v1::Sha256Hex(*bytes) != id) {
      st = absl::DataLossError("its bytes do not hash to its name");
    } else if (tenants.empty()) {
      st = absl::DataLossError(
          absl::StrCat("its tenants file ", tenants_path.string(), fs::exists(tenants_path, ec) ? " names no tenant" : " is missing"));
    } else {
      st = load(id, *bytes, tenants);
    }
    if (st.code() == absl::StatusCode::kResourceExhausted) {  // fine, but no room (--max-store-bytes): kept
      problems.push_back(absl::StrCat(path.string(), ": ", st.message(), " (not loaded; kept for a later start)"));
    } else if (!st.ok()) {
      problems.push_back(absl::StrCat(path.string(), ": ", st.message(), " (renamed *.bad)"));
      fs::rename(path, path.string() + ".bad", ec);
      if (fs::exists(tenants_path, ec)) fs::rename(tenants_path, tenants_path.string() + ".bad", ec);  // with its rig
    }
  }
  // Tenants files whose rig is gone (a crash between KeepRig's or RemoveRig's two steps) are
  // never read: removed, as orphan states are (LoadSessions).
  for (const auto& entry : fs::directory_iterator(rigs_, ec)) {
    const fs::path path = entry.path();
    if (path.extension() != ".tenants") continue;
    if (!fs::exists(fs::path(path).replace_extension(".rig"), ec)) (void)RemoveDurably(path.string());
  }
  return problems;
}

namespace {
constexpr std::string_view kSessionMagic = "sinew-session 1\n";

// A session record's tenant and request (SaveSession's layout); false when `text` is not one.
bool ParseSessionRecord(const std::string& text, std::string* tenant, std::string* request) {
  const size_t tenant_end = text.find('\n', kSessionMagic.size());
  if (text.rfind(kSessionMagic, 0) != 0 || tenant_end == std::string::npos ||
      text.compare(kSessionMagic.size(), 7, "tenant ") != 0) {
    return false;
  }
  *tenant = text.substr(kSessionMagic.size() + 7, tenant_end - kSessionMagic.size() - 7);
  *request = text.substr(tenant_end + 1);
  return true;
}
}  // namespace

absl::Status StateDir::SaveSession(const std::string& id, const std::string& tenant, const std::string& request) const {
  if (!enabled()) return absl::OkStatus();
  if (tenant.find('\n') != std::string::npos) return absl::InternalError("state-dir: a tenant name holds a newline");
  return WriteDurably(absl::StrCat(sessions_, "/", id, ".session"), std::string(kSessionMagic) + "tenant " + tenant + "\n" + request);
}

absl::Status StateDir::RemoveSession(const std::string& id) const {
  if (!enabled()) return absl::OkStatus();
  // The record first: a state file without its record is never read (LoadSessions removes it).
  if (auto st = RemoveDurably(absl::StrCat(sessions_, "/", id, ".session")); !st.ok()) return st;
  return RemoveDurably(absl::StrCat(sessions_, "/", id, ".state"));
}

absl::Status StateDir::SaveSessionState(const std::string& id, const std::string& bytes) const {
  if (!enabled()) return absl::OkStatus();
  return WriteDurably(absl::StrCat(sessions_, "/", id, ".state"), bytes);
}

std::optional<std::string> StateDir::ReadSessionState(const std::string& id, std::string* problem) const {
  if (!enabled()) return std::nullopt;
  const std::string path = absl::StrCat(sessions_, "/", id, ".state");
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::optional<std::string> bytes = ReadBytes(path);
  if (!bytes && problem) *problem = absl::StrCat(path, ": cannot be read");
  return bytes;
}

absl::Status StateDir::RemoveSessionState(const std::string& id) const {
  if (!enabled()) return absl::OkStatus();
  return RemoveDurably(absl::StrCat(sessions_, "/", id, ".state"));
}

std::vector<std::string> StateDir::LoadSessions(
    const std::function<absl::Status(const std::string&, const std::string&, const std::string&)>& load) const {
  std::vector<std::string> problems;
  if (!enabled()) return problems;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(sessions_, ec)) {
    const fs::path path = entry.path();
    if (path.extension() != ".session") continue;
    if (!RegularFile(path)) {  // as LoadRigs
      problems.push_back(absl::StrCat(path.string(), ": not a regular file (left alone)"));
      continue;
    }
    const std::string text = ReadBytes(path).value_or(std::string());
    absl::Status st;
    std::string tenant, request;
    if (!ParseSessionRecord(text, &tenant, &request)) {
      st = absl::DataLossError("not a session record");
    } else {
      st = load(path.stem().string(), tenant, request);
    }
    const bool for_good = SetAside(st);
    if (!st.ok() && !for_good) {
      problems.push_back(absl::StrCat(path.string(), ": ", absl::StatusCodeToString(st.code()), ": ", st.message(),
                                      " (not opened; kept for a later start)"));
    } else if (!st.ok()) {
      problems.push_back(absl::StrCat(path.string(), ": ", st.message(), " (renamed *.bad)"));
      fs::rename(path, path.string() + ".bad", ec);
      (void)RemoveSessionState(path.stem().string());  // its history goes with it
    }
  }
  // States whose record is gone (a crash between RemoveSession's two removals) are never read.
  for (const auto& entry : fs::directory_iterator(sessions_, ec)) {
    const fs::path path = entry.path();
    if (path.extension() != ".state") continue;
    if (!fs::exists(fs::path(path).replace_extension(".session"), ec)) (void)RemoveSessionState(path.stem().string());
  }
  return problems;
}

std::vector<std::string> StateDir::ReadTenants(const std::string& id) const {
  std::vector<std::string> tenants;
  if (!enabled() || id.empty() || id.find('/') != std::string::npos) return tenants;
  const fs::path path = fs::path(rigs_) / (id + ".tenants");
  if (!RegularFile(path)) return tenants;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("tenant ", 0) == 0) tenants.push_back(line.substr(7));
  }
  return tenants;
}

bool StateDir::HasRig(const std::string& id) const {
  if (!enabled() || id.empty() || id.find('/') != std::string::npos) return false;
  std::error_code ec;
  return fs::exists(fs::path(rigs_) / (id + ".rig"), ec);
}

}  // namespace sinew::server
