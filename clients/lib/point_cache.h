// Point caches for batch jobs: a `.pc2` writer that can resume a file an interrupted run left
// behind, a strict `.pc2` reader, and an OBJ-sequence writer (one complete file per frame).
//
// PC2 layout (what Blender, Maya and 3ds Max read), all little-endian:
//   bytes  0..11  char[12]  "POINTCACHE2\0"
//   bytes 12..15  int32     version, 1
//   bytes 16..19  int32     numPoints
//   bytes 20..23  float32   startFrame
//   bytes 24..27  float32   sampleRate
//   bytes 28..31  int32     numSamples
//   then numSamples frames, each numPoints x (float32 x, y, z).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sinew::client {

inline constexpr uint64_t kPc2HeaderBytes = 32;

// Appends frames to a `.pc2` file, keeping the header's numSamples equal to the frames written.
//
// Crash safety: each Append writes the frame's bytes first and only then the new numSamples,
// so a writer killed at any instant leaves a header that counts at most the complete frames in
// the file (never more). Open(..., resume=true) trusts min(numSamples, complete frames by file
// size), cuts any partial trailing frame, and continues from there; appending the remaining
// frames gives a file byte-identical to an uninterrupted run.
//
// Durability choice: Append does not fdatasync. Against a killed process (the case batch
// resume is for) the ordering above is enough, since both writes are in the page cache once
// pwrite returns. Against power loss the kernel may persist the two writes in either order;
// the min() rule still stops an over-counting header from claiming data beyond the end of the
// file, but a frame inside the file may then read back as zeros. Call Sync() at checkpoints if
// that matters; Close() syncs once.
//
// Move-only; the destructor closes the file without syncing (errors are then lost, so call
// Close()). Not thread-safe.
class Pc2Writer {
 public:
  // Opens `path` for `points` points per frame (> 0); `start_frame` and `sample_rate` go to
  // the header and must be finite.
  //   resume=false, or no file at `path`: creates/truncates it and writes a header with
  //     numSamples 0; frames() is 0.
  //   resume=true and a file exists: validates its header (magic, version 1, numPoints ==
  //     points, startFrame and sampleRate bit-equal to the arguments) and fails without
  //     changing the file when any differs, naming the field and both values. Then keeps
  //     min(numSamples, (size - 32) / (points * 12)) frames, truncates anything after them,
  //     rewrites numSamples if it differed, and appends after them; frames() is that count,
  //     i.e. the frame index to resume from. A file shorter than the header whose bytes are a
  //     prefix of the header this call would write (a writer killed while creating it) is
  //     started afresh; any other short file is an error.
  // Errors: INVALID_ARGUMENT for bad arguments, FAILED_PRECONDITION for a mismatching or
  // corrupt existing file, errno-derived codes (with the path and errno text) for I/O.
  static absl::StatusOr<Pc2Writer> Open(const std::string& path, uint32_t points, float start_frame,
                                        float sample_rate, bool resume);

  Pc2Writer(Pc2Writer&& other) noexcept;
  Pc2Writer& operator=(Pc2Writer&& other) noexcept;
  Pc2Writer(const Pc2Writer&) = delete;
  Pc2Writer& operator=(const Pc2Writer&) = delete;
  ~Pc2Writer();

  // Writes one frame: exactly points() * 3 finite floats (x, y, z per point), then bumps
  // numSamples. On error the frame is not counted (frames() unchanged) and the file still
  // resumes correctly; retrying Append with the same frame is safe.
  absl::Status Append(std::span<const float> xyz);

  // fdatasync: everything appended so far survives power loss.
  absl::Status Sync();

  // Syncs and closes. Further calls to Append/Sync fail; a second Close is OK.
  absl::Status Close();

  uint32_t points() const { return points_; }
  // Complete frames in the file: after Open, the index of the next frame to write.
  uint64_t frames() const { return frames_; }
  const std::string& path() const { return path_; }

 private:
  Pc2Writer(std::string path, int fd, uint32_t points, uint64_t frames);
  absl::Status WriteCount(uint64_t count);

  std::string path_;
  int fd_ = -1;
  uint32_t points_ = 0;
  uint64_t frames_ = 0;
  std::vector<unsigned char> scratch_;  // byte-swapped frame on big-endian hosts only
};

// Contents of a `.pc2` file.
struct Pc2Data {
  uint32_t points = 0;
  float start_frame = 0;
  float sample_rate = 0;
  std::vector<std::vector<float>> frames;  // numSamples frames of points * 3 floats
};

// Reads a whole `.pc2` file, strictly: FAILED_PRECONDITION for a short header, bad magic,
// version other than 1, negative counts, or a size other than exactly 32 + numSamples *
// numPoints * 12 (a truncated or over-long file); errno-derived codes for I/O.
absl::StatusOr<Pc2Data> ReadPc2(const std::string& path);

// A `.pc2` file's header fields and how many of its frames are complete, without reading them.
struct Pc2Info {
  uint32_t points = 0;
  float start_frame = 0;
  float sample_rate = 0;
  uint64_t header_frames = 0;    // numSamples
  uint64_t complete_frames = 0;  // min(numSamples, whole frames in the file): what a resume keeps
  bool exact = false;            // the size is exactly 32 + numSamples * numPoints * 12
};
// FAILED_PRECONDITION for a short header, bad magic, version or counts; errno codes for I/O.
absl::StatusOr<Pc2Info> InspectPc2(const std::string& path);

// One input of ConcatPc2: the first `frames` frames of the `.pc2` file at `path`.
struct Pc2Part {
  std::string path;
  uint64_t frames = 0;
};
// Writes `out` as one `.pc2` holding, in order, the first `frames` frames of each part, with the
// header (points, start_frame, sample_rate): byte-identical to a Pc2Writer that appended the same
// frames. Every part must hold `points` points and at least its `frames` complete frames
// (FAILED_PRECONDITION naming the part otherwise; nothing is written). Atomic: `out`.tmp, fsync,
// rename. Copies bytes in bounded chunks (memory does not grow with the cache).
absl::Status ConcatPc2(const std::vector<Pc2Part>& parts, const std::string& out, uint32_t points,
                       float start_frame, float sample_rate);

// Writes one OBJ frame: a "v x y z" line per point ("%.9g", which round-trips float32, in the
// "C" locale whatever the process locale) and an "f a b c" line (1-based) per triangle.
// `xyz` holds points * 3 floats; `triangles` holds 3 indices (0-based, < points) per triangle
// and may be empty. Atomic: writes `path`.tmp, fsyncs it and renames it over `path`, so a
// file at `path` is always complete (the old one or the new one). INVALID_ARGUMENT for bad
// sizes or indices (nothing is written); errno-derived codes with the path for I/O.
absl::Status WriteObjFrame(const std::string& path, std::span<const float> xyz,
                           std::span<const uint32_t> triangles);

// dir/stem_000123.obj: the frame number zero-padded to 6 digits (more when larger). An empty
// `dir` gives a relative name; a trailing '/' on `dir` is not doubled.
std::string ObjFramePath(const std::string& dir, const std::string& stem, uint64_t frame);

// Removes dir/stem_N.obj for every N in [begin, end) (the names ObjFramePath gives: 6 or more
// digits), and nothing else. A missing `dir` is OK; an entry that cannot be removed is an
// error naming it.
absl::Status RemoveObjFrames(const std::string& dir, const std::string& stem, uint64_t begin, uint64_t end);
// The path of one dir/stem_N.obj with N in [begin, end) (any one, the names ObjFramePath gives);
// "" when there is none or `dir` is missing.
absl::StatusOr<std::string> FirstObjFrame(const std::string& dir, const std::string& stem, uint64_t begin,
                                          uint64_t end);

// One batch run at a time on a set of outputs: an exclusive flock on `path` (OUT.pc2.lock, a
// shard part's, or OBJ_DIR/STEM.lock; made if missing, never removed), held until destroyed.
// FAILED_PRECONDITION naming the file while another run holds it. On a file system without
// flock (some network and FUSE volumes: ENOSYS, EOPNOTSUPP, ENOLCK) a warning goes to stderr and
// the run goes on unlocked.
class OutputLock {
 public:
  static absl::StatusOr<OutputLock> Acquire(const std::string& path);
  OutputLock(OutputLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  OutputLock& operator=(OutputLock&&) = delete;
  ~OutputLock();

 private:
  explicit OutputLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace sinew::client
