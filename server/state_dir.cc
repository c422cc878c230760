#include "server/state_dir.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/util/atomic_file.h"
#include "sinew/v1/rig_id.h"

namespace sinew::server {
namespace {

namespace fs = std::filesystem;

// Writes `text` to `path` durably: a unique temporary file, fsync, rename over, fsync of the
// folder; readable by this user only (tenants' rigs).
absl::Status WriteDurably(const std::string& path, const std::string& text) {
  auto st = WriteFileAtomically(path, {text}, {.mode = 0600});
  if (!st.ok()) return absl::InternalError(absl::StrCat("state-dir: ", st.message()));
  return st;
}

std::string TenantsText(const std::vector<std::string>& tenants) {
  std::string out;
  for (const std::string& t : tenants) absl::StrAppend(&out, "tenant ", t, "\n");
  return out;
}

}  // namespace

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
  const std::string probe = (rigs / ".probe").string();
  if (auto st = WriteDurably(probe, "ok"); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--state-dir ", dir, " is not writable: ", st.message()));
  }
  fs::remove(probe, ec);
  return StateDir(rigs.string(), sessions.string());
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
    return absl::UnavailableError(absl::StrCat("--state-dir: cannot remove ", path, ": ", ec.message()));
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
    const std::string id = path.stem().string();
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    std::vector<std::string> tenants;
    std::ifstream tenants_in(fs::path(rigs_) / (id + ".tenants"));
    for (std::string line; std::getline(tenants_in, line);) {
      if (line.rfind("tenant ", 0) == 0) tenants.push_back(line.substr(7));
    }
    absl::Status st;
    if (!in || v1::Sha256Hex(bytes.str()) != id) {
      st = absl::DataLossError("its bytes do not hash to its name");
    } else if (tenants.empty()) {
      st = absl::DataLossError("no tenants file");
    } else {
      st = load(id, bytes.str(), tenants);
    }
    if (st.code() == absl::StatusCode::kResourceExhausted) {  // fine, but no room (--max-store-bytes): kept
      problems.push_back(absl::StrCat(path.string(), ": ", st.message(), " (not loaded; kept for a later start)"));
    } else if (!st.ok()) {
      problems.push_back(absl::StrCat(path.string(), ": ", st.message(), " (renamed *.bad)"));
      fs::rename(path, path.string() + ".bad", ec);
    }
  }
  return problems;
}

namespace {
constexpr std::string_view kSessionMagic = "sinew-session 1\n";
}  // namespace

absl::Status StateDir::SaveSession(const std::string& id, const std::string& tenant, const std::string& request) const {
  if (!enabled()) return absl::OkStatus();
  if (tenant.find('\n') != std::string::npos) return absl::InternalError("state-dir: a tenant name holds a newline");
  return WriteDurably(absl::StrCat(sessions_, "/", id, ".session"), std::string(kSessionMagic) + "tenant " + tenant + "\n" + request);
}

absl::Status StateDir::RemoveSession(const std::string& id) const {
  if (!enabled()) return absl::OkStatus();
  return RemoveDurably(absl::StrCat(sessions_, "/", id, ".session"));
}

std::vector<std::string> StateDir::LoadSessions(
    const std::function<absl::Status(const std::string&, const std::string&, const std::string&)>& load) const {
  std::vector<std::string> problems;
  if (!enabled()) return problems;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(sessions_, ec)) {
    const fs::path path = entry.path();
    if (path.extension() != ".session") continue;
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string text = buffer.str();
    absl::Status st;
    const size_t tenant_end = text.find('\n', kSessionMagic.size());
    if (!in || text.rfind(kSessionMagic, 0) != 0 || tenant_end == std::string::npos ||
        text.compare(kSessionMagic.size(), 7, "tenant ") != 0) {
      st = absl::DataLossError("not a session record");
    } else {
      const std::string tenant = text.substr(kSessionMagic.size() + 7, tenant_end - kSessionMagic.size() - 7);
      st = load(path.stem().string(), tenant, text.substr(tenant_end + 1));
    }
    const bool for_good = st.code() == absl::StatusCode::kDataLoss ||
                          st.code() == absl::StatusCode::kInvalidArgument || st.code() == absl::StatusCode::kNotFound;
    if (!st.ok() && !for_good) {
      problems.push_back(absl::StrCat(path.string(), ": ", absl::StatusCodeToString(st.code()), ": ", st.message(),
                                      " (not opened; kept for a later start)"));
    } else if (!st.ok()) {
      problems.push_back(absl::StrCat(path.string(), ": ", st.message(), " (renamed *.bad)"));
      fs::rename(path, path.string() + ".bad", ec);
    }
  }
  return problems;
}

bool StateDir::HasRig(const std::string& id) const {
  if (!enabled() || id.empty() || id.find('/') != std::string::npos) return false;
  std::error_code ec;
  return fs::exists(fs::path(rigs_) / (id + ".rig"), ec);
}

}  // namespace sinew::server
