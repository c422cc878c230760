#pragma once
// Files written whole or not at all, in folders that several processes may share: the server's
// caches and state, and what the clients write for people and programs to pick up (OBJ frames,
// shard manifests, joined point caches, .glb clips, PNG snapshots, HTML reports).
//
// WriteFileAtomically writes the bytes to a temporary file beside `path` and renames it over
// `path`: a reader sees the old file or the whole new one, never a part. The temporary's name is
// `<path>.tmp.XXXXXX`, made unique by mkstemp(3) with O_EXCL, so two writers never share one —
// not two threads, nor two processes with the same pid in different containers on one volume
// (the case a `<path>.tmp<pid>` name gets wrong). The file gets `options.mode` (not narrowed by
// the umask, which a multi-threaded process cannot read safely). With `options.durable` (the
// default) the file is fsync'ed before the rename and its folder after, so a power cut leaves the
// old file or the new one. On any failure the temporary is removed and `path` is left as it was;
// the status's code follows errno (ENOSPC: RESOURCE_EXHAUSTED, ENOENT: NOT_FOUND, ...) and its
// message names the step and the file ("write out.glb.tmp.Ab3xYz: No space left on device").
//
// A process killed between the two steps leaves its temporary behind. RemoveStaleTemporaries
// deletes, in one folder (not below it), the temporaries of files ending in one of `extensions`
// (the kinds the caller writes there: ".bin") that were last written more than `max_age` ago: a
// live writer writes its temporary within seconds, so one untouched for long has no writer, even
// in a folder other processes share. A temporary is `NAME.EXT.tmp.XXXXXX` (six letters or
// digits), or the names earlier Sinew versions used, `NAME.EXT.tmp`, `NAME.EXT.tmpPID` and
// `NAME.EXT.tmpPID-N` (`earlier_names`); nothing else is touched, so a folder shared with other programs loses only
// such files. It returns how many it removed; a folder it cannot read, or a file it cannot
// remove, is skipped.
#include <chrono>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sinew {

struct AtomicWriteOptions {
  bool durable = true;
  unsigned mode = 0644;
};

absl::Status WriteFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces,
                                 const AtomicWriteOptions& options = {});

// fsyncs the folder holding `path` (best effort), so that a rename or a removal there survives a
// power cut.
void SyncFolderOf(const std::string& path);
inline absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                                        const AtomicWriteOptions& options = {}) {
  return WriteFileAtomically(path, {bytes}, options);
}

// The same for a file written piece by piece, one too large to hold in memory (a joined point
// cache): Create makes the temporary, the caller writes to fd() (write or pwrite), Commit syncs
// it, renames it over the path and says how that went. An AtomicFile destroyed uncommitted, or
// whose Commit failed, removes its temporary; the path is then as it was.
class AtomicFile {
 public:
  static absl::StatusOr<AtomicFile> Create(const std::string& path, const AtomicWriteOptions& options = {});
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  int fd() const { return fd_; }
  const std::string& temporary() const { return temporary_; }  // for error messages
  absl::Status Commit();

 private:
  AtomicFile() = default;
  void Discard();

  std::string path_, temporary_;
  AtomicWriteOptions options_;
  int fd_ = -1;
};

// Removes the temporaries of this process's writes in progress (AtomicFile and
// WriteFileAtomically, on any thread), for a process about to end without unwinding (_Exit on
// an interrupt: the command line's Ctrl-C, clients/lib/interrupt.h); returns how many. A write
// still running then fails its rename (NOT_FOUND) instead of committing, and later ones fail
// at once (CANCELLED): no temporary is made after it. Until 2026-12-07 an
// interrupted `sinew batch --obj` left its frame's temporary beside the frames, for an hour.
int RemoveTemporariesInProgress();

// `earlier_names`: also the names earlier Sinew versions used (.tmp, .tmpPID, .tmpPID-N), for the
// folders Sinew owns (the server's cache and state folders); not for folders users own (the
// command line's output folders, where a user's `mesh.obj.tmp` is theirs: removed there until
// 2026-12-07).
int RemoveStaleTemporaries(const std::string& dir, std::chrono::seconds max_age,
                           const std::vector<std::string>& extensions, bool earlier_names = true);

// The age the server removes temporaries at: far beyond any write, short of filling a disk.
inline constexpr std::chrono::hours kStaleTemporaryAge{1};

}  // namespace sinew
