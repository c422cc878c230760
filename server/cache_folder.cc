#include "server/cache_folder.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <tuple>
#include <vector>

namespace sinew::server {

TrimResult TrimFolder(const std::string& dir, const std::string& extension, uint64_t max_bytes,
                      const std::string& keep) {
  namespace fs = std::filesystem;
  struct Entry {
    fs::file_time_type time;
    std::string path;
    uint64_t bytes;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= extension.size() || name.compare(name.size() - extension.size(), extension.size(), extension) != 0) {
      continue;
    }
    std::error_code e;
    if (!it->is_regular_file(e) || e) continue;
    const uint64_t bytes = it->file_size(e);
    if (e) continue;
    const fs::file_time_type time = it->last_write_time(e);
    if (e) continue;
    total += bytes;
    if (it->path().string() != fs::path(keep).string()) entries.push_back({time, it->path().string(), bytes});
  }
  TrimResult result;
  if (max_bytes > 0 && total > max_bytes) {
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return std::tie(a.time, a.path) < std::tie(b.time, b.path); });
    for (const Entry& e : entries) {
      if (total <= max_bytes) break;
      std::error_code rm;
      if (fs::remove(e.path, rm)) {
        ++result.removed;
        result.removed_bytes += e.bytes;
      }
      if (!rm) total -= e.bytes;  // removed here, or gone already
    }
  }
  result.kept_bytes = total;
  return result;
}

void TouchFile(const std::string& path) { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

}  // namespace sinew::server
