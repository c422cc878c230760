#pragma once
// --cache-dir's per-rig preparations (prepared/*.bin) under a byte budget, --max-cache-bytes.
//
// Each rig a method with saved preparations (swing-twist) is asked for leaves a file there, so a
// long-running server, or replicas sharing the folder, filled their disk rig after rig (until
// 2026-12-07 nothing was ever removed). After each file written, TrimFolder removes the least
// recently used files of that kind until the rest fit: "used" is the file's modification time,
// which a write sets and a read refreshes (TouchFile), as does, at most hourly, a preparation
// used from memory: a rig in use, or read from the cache at every start, stays. Replicas sharing the folder each trim it; a file removed under a reader is a miss there,
// and the preparation is computed again. Temporaries (NAME.bin.tmp.XXXXXX) and files of other
// kinds are neither counted nor removed.
#include <cstdint>
#include <string>

namespace sinew::server {

struct CacheFolder {
  std::string dir;         // --cache-dir; empty: preparations are kept in memory only
  uint64_t max_bytes = 0;  // --max-cache-bytes for its prepared/ folder; 0: no limit
};

struct TrimResult {
  int removed = 0;              // files removed
  uint64_t removed_bytes = 0;   // their bytes
  uint64_t kept_bytes = 0;      // bytes of the files of that kind left
};

// Removes files ending in `extension` directly in `dir` (not below it), oldest modification time
// first (ties by name), until the others hold at most `max_bytes`; never `keep` (the file just
// written), which counts towards the total. A folder it cannot read is left as it is; a file it
// cannot remove, or one already gone (another replica trimmed it), is skipped.
TrimResult TrimFolder(const std::string& dir, const std::string& extension, uint64_t max_bytes,
                      const std::string& keep);

// Marks `path` used now (its modification time), best effort: a cache hit.
void TouchFile(const std::string& path);

}  // namespace sinew::server
