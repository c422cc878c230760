#include "core/util/atomic_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sinew {

namespace fs = std::filesystem;

absl::Status WriteFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces,
                                 const AtomicWriteOptions& options) {
  const std::string pattern = path + ".tmp.XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("create ", pattern));
  const std::string tmp = name.data();
  const char* step = "write";
  int err = 0;
  if (::fchmod(fd, mode_t(options.mode)) != 0) err = errno, step = "chmod";
  for (auto piece = pieces.begin(); err == 0 && piece != pieces.end(); ++piece) {
    for (size_t done = 0; done < piece->size();) {
      const ssize_t n = ::write(fd, piece->data() + done, piece->size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        err = n < 0 ? errno : EIO;
        break;
      }
      done += size_t(n);
    }
  }
  if (err == 0 && options.durable && ::fsync(fd) != 0) err = errno, step = "fsync";
  // No retry on EINTR: on Linux the descriptor is released either way.
  if (::close(fd) != 0 && err == 0) err = errno, step = "close";
  if (err != 0) {
    ::unlink(tmp.c_str());
    return absl::ErrnoToStatus(err, absl::StrCat(step, " ", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return absl::ErrnoToStatus(err, absl::StrCat("rename ", tmp, " to ", path));
  }
  if (options.durable) {
    const fs::path parent = fs::path(path).parent_path();
    const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }
  return absl::OkStatus();
}

int RemoveStaleTemporaries(const std::string& dir, std::chrono::seconds max_age) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  int removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().find(".tmp") == std::string::npos) continue;
    std::error_code e;
    if (!it->is_regular_file(e) || e) continue;
    const auto written = fs::last_write_time(it->path(), e);
    if (e || now - written <= max_age) continue;
    if (fs::remove(it->path(), e) && !e) ++removed;
  }
  return removed;
}

}  // namespace sinew
