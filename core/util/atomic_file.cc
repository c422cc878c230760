#include "core/util/atomic_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sinew {

namespace fs = std::filesystem;

namespace {
// The temporaries of this process's writes in progress (RemoveTemporariesInProgress). Never
// destroyed: a signal thread may use it while another thread's exit() runs static destructors.
struct Live {
  std::mutex mu;
  std::set<std::string> names;
  bool ending = false;  // RemoveTemporariesInProgress ran: no new temporaries
};
Live& LiveTemporaries() {
  static Live* live = new Live;
  return *live;
}
// False once the process is ending (the caller removes its temporary).
bool Track(const std::string& name) {
  Live& l = LiveTemporaries();
  std::lock_guard lock(l.mu);
  if (l.ending) return false;
  l.names.insert(name);
  return true;
}
void Untrack(const std::string& name) {
  Live& l = LiveTemporaries();
  std::lock_guard lock(l.mu);
  l.names.erase(name);
}
}  // namespace

int RemoveTemporariesInProgress() {
  Live& l = LiveTemporaries();
  std::lock_guard lock(l.mu);
  int removed = 0;
  for (const std::string& name : l.names) removed += ::unlink(name.c_str()) == 0;
  l.names.clear();
  l.ending = true;
  return removed;
}

absl::StatusOr<AtomicFile> AtomicFile::Create(const std::string& path, const AtomicWriteOptions& options) {
  const std::string pattern = path + ".tmp.XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  AtomicFile f;
  f.fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  if (f.fd_ < 0) return absl::ErrnoToStatus(errno, absl::StrCat("create ", pattern));
  f.path_ = path;
  if (!Track(name.data())) {
    ::close(std::exchange(f.fd_, -1));
    ::unlink(name.data());
    return absl::CancelledError(absl::StrCat("create ", pattern, ": the process is ending"));
  }
  f.temporary_ = name.data();
  f.options_ = options;
  if (::fchmod(f.fd_, mode_t(options.mode)) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("chmod ", f.temporary_));
  return f;
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      temporary_(std::move(other.temporary_)),
      options_(other.options_),
      fd_(std::exchange(other.fd_, -1)) {
  other.temporary_.clear();
}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    Discard();
    path_ = std::move(other.path_);
    temporary_ = std::move(other.temporary_);
    other.temporary_.clear();
    options_ = other.options_;
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

AtomicFile::~AtomicFile() { Discard(); }

void AtomicFile::Discard() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  if (!temporary_.empty()) {
    ::unlink(temporary_.c_str());
    Untrack(std::exchange(temporary_, std::string()));
  }
}

absl::Status AtomicFile::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": nothing to commit"));
  const char* step = nullptr;
  int err = 0;
  if (options_.durable && ::fsync(fd_) != 0) err = errno, step = "fsync";
  // No retry on EINTR: on Linux the descriptor is released either way.
  if (::close(std::exchange(fd_, -1)) != 0 && err == 0) err = errno, step = "close";
  if (err == 0 && ::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    const absl::Status st = absl::ErrnoToStatus(e, absl::StrCat("rename ", temporary_, " to ", path_));
    Discard();
    return st;
  }
  if (err != 0) {
    const absl::Status st = absl::ErrnoToStatus(err, absl::StrCat(step, " ", temporary_));
    Discard();
    return st;
  }
  Untrack(std::exchange(temporary_, std::string()));  // it is the path now
  if (options_.durable) SyncFolderOf(path_);
  return absl::OkStatus();
}

void SyncFolderOf(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  ::fsync(dir);
  ::close(dir);
}

absl::Status WriteFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces,
                                 const AtomicWriteOptions& options) {
  auto file = AtomicFile::Create(path, options);
  if (!file.ok()) return file.status();
  for (std::string_view piece : pieces) {
    for (size_t done = 0; done < piece.size();) {
      const ssize_t n = ::write(file->fd(), piece.data() + done, piece.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::ErrnoToStatus(n < 0 ? errno : EIO, absl::StrCat("write ", file->temporary()));
      done += size_t(n);
    }
  }
  return file->Commit();
}

namespace {

bool AllOf(std::string_view s, bool (*pred)(char)) {
  for (char c : s) {
    if (!pred(c)) return false;
  }
  return true;
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Whether `name` is a temporary of a file ending in one of `extensions` (see the header).
bool IsTemporary(std::string_view name, const std::vector<std::string>& extensions, bool earlier_names) {
  const size_t at = name.rfind(".tmp");
  if (at == std::string_view::npos) return false;
  const std::string_view file = name.substr(0, at), tail = name.substr(at + 4);
  bool ours = false;
  for (const std::string& ext : extensions) ours = ours || file.ends_with(ext);
  if (!ours) return false;
  if (tail.size() == 7 && tail[0] == '.') return AllOf(tail.substr(1), IsAlnum);  // .tmp.XXXXXX
  if (!earlier_names) return false;
  const size_t dash = tail.find('-');
  if (dash == std::string_view::npos) return AllOf(tail, IsDigit);                // .tmp, .tmpPID
  return dash > 0 && dash + 1 < tail.size() && AllOf(tail.substr(0, dash), IsDigit) &&
         AllOf(tail.substr(dash + 1), IsDigit);                                     // .tmpPID-N
}

}  // namespace

int RemoveStaleTemporaries(const std::string& dir, std::chrono::seconds max_age,
                           const std::vector<std::string>& extensions, bool earlier_names) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  int removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!IsTemporary(it->path().filename().string(), extensions, earlier_names)) continue;
    std::error_code e;
    if (!it->is_regular_file(e) || e) continue;
    const auto written = fs::last_write_time(it->path(), e);
    if (e || now - written <= max_age) continue;
    if (fs::remove(it->path(), e) && !e) ++removed;
  }
  return removed;
}

}  // namespace sinew
