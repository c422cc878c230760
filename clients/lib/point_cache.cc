#include "clients/lib/point_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/atomic_file.h"

namespace sinew::client {
namespace {

constexpr char kMagic[12] = {'P', 'O', 'I', 'N', 'T', 'C', 'A', 'C', 'H', 'E', '2', '\0'};
constexpr uint64_t kCountOffset = 28;
constexpr uint64_t kMaxSamples = std::numeric_limits<int32_t>::max();
constexpr bool kLittleEndianHost = std::endian::native == std::endian::little;

void PutU32(unsigned char* p, uint32_t v) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
  p[2] = static_cast<unsigned char>(v >> 16);
  p[3] = static_cast<unsigned char>(v >> 24);
}

uint32_t GetU32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

void EncodeFloats(std::span<const float> in, unsigned char* out) {
  for (size_t i = 0; i < in.size(); ++i) PutU32(out + 4 * i, std::bit_cast<uint32_t>(in[i]));
}

struct Header {
  unsigned char bytes[kPc2HeaderBytes];
};

Header MakeHeader(uint32_t points, float start_frame, float sample_rate, uint32_t samples) {
  Header h;
  std::memcpy(h.bytes, kMagic, sizeof(kMagic));
  PutU32(h.bytes + 12, 1);
  PutU32(h.bytes + 16, points);
  PutU32(h.bytes + 20, std::bit_cast<uint32_t>(start_frame));
  PutU32(h.bytes + 24, std::bit_cast<uint32_t>(sample_rate));
  PutU32(h.bytes + 28, samples);
  return h;
}

std::string G9(float f) { return absl::StrFormat("%.9g", f); }

absl::Status IoError(int err, const char* op, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(op, " ", path));
}

// pwrite all of [data, data + n) at `offset`; 0 or an errno.
int WriteAllAt(int fd, const void* data, uint64_t n, uint64_t offset) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1u << 30));
    const ssize_t w = ::pwrite(fd, p, chunk, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    p += w;
    n -= static_cast<uint64_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return 0;
}

// pread exactly n bytes at `offset`; 0, an errno, or -1 at an early end of file.
int ReadAllAt(int fd, void* data, uint64_t n, uint64_t offset) {
  auto* p = static_cast<unsigned char*>(data);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1u << 30));
    const ssize_t r = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return -1;
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return 0;
}

// Closes an fd on scope exit unless released.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Validated header fields of an existing file.
struct ParsedHeader {
  uint32_t points;
  float start_frame, sample_rate;
  uint64_t samples;
  uint64_t file_bytes = 0;  // the whole file's size (ReadHeaderOf)
};

absl::StatusOr<ParsedHeader> ParseHeader(const Header& h, const std::string& path) {
  if (std::memcmp(h.bytes, kMagic, sizeof(kMagic)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not a PC2 file (bad magic, expected \"POINTCACHE2\")"));
  }
  const int32_t version = static_cast<int32_t>(GetU32(h.bytes + 12));
  if (version != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": unsupported PC2 version ", version, " (expected 1)"));
  }
  const int32_t points = static_cast<int32_t>(GetU32(h.bytes + 16));
  const int32_t samples = static_cast<int32_t>(GetU32(h.bytes + 28));
  if (points < 0 || samples < 0) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": corrupt PC2 header (numPoints ",
                                                      points, ", numSamples ", samples, ")"));
  }
  return ParsedHeader{static_cast<uint32_t>(points), std::bit_cast<float>(GetU32(h.bytes + 20)),
                      std::bit_cast<float>(GetU32(h.bytes + 24)), static_cast<uint64_t>(samples)};
}

// The header of an open PC2 file, with the file's size: what ReadPc2 and InspectPc2 start from.
absl::StatusOr<ParsedHeader> ReadHeaderOf(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return IoError(errno, "stat", path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kPc2HeaderBytes) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": truncated PC2 header (", size, " of 32 bytes)"));
  }
  Header raw;
  if (int err = ReadAllAt(fd, raw.bytes, kPc2HeaderBytes, 0); err != 0) {
    if (err > 0) return IoError(err, "read", path);
    return absl::FailedPreconditionError(absl::StrCat(path, ": unexpected end of file"));
  }
  absl::StatusOr<ParsedHeader> h = ParseHeader(raw, path);
  if (h.ok()) h->file_bytes = size;
  return h;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Pc2Writer

Pc2Writer::Pc2Writer(std::string path, int fd, uint32_t points, uint64_t frames)
    : path_(std::move(path)), fd_(fd), points_(points), frames_(frames) {}

Pc2Writer::Pc2Writer(Pc2Writer&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      points_(o.points_),
      frames_(o.frames_),
      scratch_(std::move(o.scratch_)) {}

Pc2Writer& Pc2Writer::operator=(Pc2Writer&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    points_ = o.points_;
    frames_ = o.frames_;
    scratch_ = std::move(o.scratch_);
  }
  return *this;
}

Pc2Writer::~Pc2Writer() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<Pc2Writer> Pc2Writer::Open(const std::string& path, uint32_t points,
                                          float start_frame, float sample_rate, bool resume) {
  if (points == 0 || points > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": point count ", points, " out of range [1, 2^31)"));
  }
  if (!std::isfinite(start_frame) || !std::isfinite(sample_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": start frame ", G9(start_frame),
                                                   " and sample rate ", G9(sample_rate),
                                                   " must be finite"));
  }
  const uint64_t frame_bytes = uint64_t{points} * 12;
  const Header fresh = MakeHeader(points, start_frame, sample_rate, 0);

  // One writer at a time: a second run on the same file (a Kubernetes Indexed Job can briefly
  // run two pods for one index) is refused while the first holds it, before anything is cut
  // (until 2026-12-07 a second run's resume truncated the file under the first's frame write,
  // and a zero-filled frame could be counted). Truncated for a fresh start only once locked.
  FdGuard fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (fd.get() < 0) return IoError(errno, "open", path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": another run is writing it (locked); wait for it, or write elsewhere"));
    }
    if (errno != ENOSYS && errno != EOPNOTSUPP && errno != ENOLCK) return IoError(errno, "lock", path);
    // No flock on this file system: as before locks, one run at a time is the caller's to keep.
  }
  if (!resume && ::ftruncate(fd.get(), 0) != 0) return IoError(errno, "truncate", path);

  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return IoError(errno, "stat", path);
  const uint64_t size = resume ? static_cast<uint64_t>(st.st_size) : 0;

  if (size < kPc2HeaderBytes) {
    // New, truncated by us, or cut short while its header was being written.
    if (size > 0) {
      unsigned char prefix[kPc2HeaderBytes];
      const int err = ReadAllAt(fd.get(), prefix, size, 0);
      if (err > 0) return IoError(err, "read", path);
      if (err < 0 || std::memcmp(prefix, fresh.bytes, size) != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            path, ": ", size, "-byte file is not the start of a PC2 header for this job"));
      }
    }
    if (int err = WriteAllAt(fd.get(), fresh.bytes, kPc2HeaderBytes, 0); err != 0) {
      return IoError(err, "write", path);
    }
    return Pc2Writer(path, fd.release(), points, 0);
  }

  Header existing;
  if (int err = ReadAllAt(fd.get(), existing.bytes, kPc2HeaderBytes, 0); err != 0) {
    if (err > 0) return IoError(err, "read", path);
    return absl::FailedPreconditionError(absl::StrCat(path, ": file shrank while reading"));
  }
  absl::StatusOr<ParsedHeader> h = ParseHeader(existing, path);
  if (!h.ok()) return h.status();
  if (h->points != points) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": point count mismatch: file has ",
                                                      h->points, " points, this job has ", points));
  }
  if (std::bit_cast<uint32_t>(h->start_frame) != std::bit_cast<uint32_t>(start_frame)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": start frame mismatch: file has ",
                                                      G9(h->start_frame), ", this job has ",
                                                      G9(start_frame)));
  }
  if (std::bit_cast<uint32_t>(h->sample_rate) != std::bit_cast<uint32_t>(sample_rate)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": sample rate mismatch: file has ",
                                                      G9(h->sample_rate), ", this job has ",
                                                      G9(sample_rate)));
  }

  const uint64_t complete = (size - kPc2HeaderBytes) / frame_bytes;
  const uint64_t frames = std::min(h->samples, complete);
  const uint64_t keep = kPc2HeaderBytes + frames * frame_bytes;
  if (size != keep && ::ftruncate(fd.get(), static_cast<off_t>(keep)) != 0) {
    return IoError(errno, "truncate", path);
  }
  Pc2Writer w(path, fd.release(), points, frames);
  if (h->samples != frames) {
    if (absl::Status s = w.WriteCount(frames); !s.ok()) return s;
  }
  return w;
}

absl::Status Pc2Writer::WriteCount(uint64_t count) {
  unsigned char b[4];
  PutU32(b, static_cast<uint32_t>(count));
  if (int err = WriteAllAt(fd_, b, sizeof(b), kCountOffset); err != 0) {
    return IoError(err, "write", path_);
  }
  return absl::OkStatus();
}

absl::Status Pc2Writer::Append(std::span<const float> xyz) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  const uint64_t n = uint64_t{points_} * 3;
  if (xyz.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": frame has ", xyz.size(), " floats, expected ", n, " (", points_, " points x 3)"));
  }
  for (size_t i = 0; i < xyz.size(); ++i) {
    if (!std::isfinite(xyz[i])) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": frame ", frames_, " point ", i / 3,
                                                     " has a non-finite coordinate"));
    }
  }
  if (frames_ >= kMaxSamples) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": PC2 holds at most 2^31-1 frames"));
  }
  const uint64_t bytes = n * 4;
  const void* data = xyz.data();
  if constexpr (!kLittleEndianHost) {
    scratch_.resize(bytes);
    EncodeFloats(xyz, scratch_.data());
    data = scratch_.data();
  }
  // Frame first, count second: a crash in between leaves a header that under-counts.
  const uint64_t offset = kPc2HeaderBytes + frames_ * bytes;
  if (int err = WriteAllAt(fd_, data, bytes, offset); err != 0) {
    return IoError(err, "write", path_);
  }
  if (absl::Status s = WriteCount(frames_ + 1); !s.ok()) return s;
  ++frames_;
  return absl::OkStatus();
}

absl::Status Pc2Writer::Sync() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  if (::fdatasync(fd_) != 0) return IoError(errno, "fdatasync", path_);
  return absl::OkStatus();
}

absl::Status Pc2Writer::Close() {
  if (fd_ < 0) return absl::OkStatus();
  absl::Status s;
  if (::fdatasync(fd_) != 0) s = IoError(errno, "fdatasync", path_);
  // No retry on EINTR: on Linux the descriptor is released either way.
  if (::close(std::exchange(fd_, -1)) != 0 && s.ok()) s = IoError(errno, "close", path_);
  return s;
}

// ---------------------------------------------------------------------------------------------
// ReadPc2

absl::StatusOr<Pc2Data> ReadPc2(const std::string& path) {
  FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return IoError(errno, "open", path);
  absl::StatusOr<ParsedHeader> h = ReadHeaderOf(fd.get(), path);
  if (!h.ok()) return h.status();
  const uint64_t size = h->file_bytes;

  // No frame of no point: its sample count could ask for 2^31 empty frames, and nothing in Sinew
  // writes one (Pc2Writer::Open refuses it); until 2026-12-07 it was read so.
  if (h->points == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": PC2 header says 0 points (", h->samples, " samples): no point cache of a mesh"));
  }
  const uint64_t frame_bytes = uint64_t{h->points} * 12;
  const uint64_t data_bytes = size - kPc2HeaderBytes;
  const bool truncated = h->samples > data_bytes / frame_bytes;
  if (truncated) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": truncated PC2 data: header says ", h->samples, " frames of ",
                     h->points, " points but the file holds ", data_bytes, " data bytes (",
                     data_bytes / frame_bytes, " complete frames)"));
  }
  if (data_bytes != h->samples * frame_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": PC2 file has ",
                                                      data_bytes - h->samples * frame_bytes,
                                                      " bytes after its ", h->samples, " frames"));
  }

  Pc2Data out;
  out.points = h->points;
  out.start_frame = h->start_frame;
  out.sample_rate = h->sample_rate;
  out.frames.resize(h->samples);
  std::vector<unsigned char> scratch;
  for (uint64_t f = 0; f < h->samples; ++f) {
    std::vector<float>& frame = out.frames[f];
    frame.resize(uint64_t{h->points} * 3);
    void* dst = frame.data();
    if constexpr (!kLittleEndianHost) {
      scratch.resize(frame_bytes);
      dst = scratch.data();
    }
    const int err = ReadAllAt(fd.get(), dst, frame_bytes, kPc2HeaderBytes + f * frame_bytes);
    if (err > 0) return IoError(err, "read", path);
    if (err < 0) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": unexpected end of file"));
    }
    if constexpr (!kLittleEndianHost) {
      for (size_t i = 0; i < frame.size(); ++i) {
        frame[i] = std::bit_cast<float>(GetU32(scratch.data() + 4 * i));
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// InspectPc2, ConcatPc2

absl::StatusOr<Pc2Info> InspectPc2(const std::string& path) {
  FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return IoError(errno, "open", path);
  absl::StatusOr<ParsedHeader> h = ReadHeaderOf(fd.get(), path);
  if (!h.ok()) return h.status();
  const uint64_t size = h->file_bytes;
  Pc2Info info;
  info.points = h->points;
  info.start_frame = h->start_frame;
  info.sample_rate = h->sample_rate;
  info.header_frames = h->samples;
  const uint64_t frame_bytes = uint64_t{h->points} * 12;
  const uint64_t data_bytes = size - kPc2HeaderBytes;
  info.complete_frames = frame_bytes == 0 ? h->samples : std::min(h->samples, data_bytes / frame_bytes);
  info.exact = data_bytes == h->samples * frame_bytes;
  return info;
}

absl::Status ConcatPc2(const std::vector<Pc2Part>& parts, const std::string& out, uint32_t points,
                       float start_frame, float sample_rate) {
  if (points == 0 || points > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(out, ": point count ", points, " out of range [1, 2^31)"));
  }
  const uint64_t frame_bytes = uint64_t{points} * 12;
  uint64_t total = 0;
  for (const Pc2Part& part : parts) {
    absl::StatusOr<Pc2Info> info = InspectPc2(part.path);
    if (!info.ok()) return info.status();
    if (info->points != points) {
      return absl::FailedPreconditionError(
          absl::StrCat(part.path, ": holds ", info->points, " points a frame, expected ", points));
    }
    if (info->complete_frames < part.frames) {
      return absl::FailedPreconditionError(absl::StrCat(part.path, ": holds ", info->complete_frames,
                                                        " complete frames, expected ", part.frames));
    }
    total += part.frames;
  }
  if (total > kMaxSamples) {
    return absl::OutOfRangeError(absl::StrCat(out, ": PC2 holds at most 2^31-1 frames, the parts hold ", total));
  }
  // Written beside `out` under a unique temporary name and renamed over it when whole.
  absl::StatusOr<AtomicFile> file = AtomicFile::Create(out);
  if (!file.ok()) return file.status();
  const std::string& tmp = file->temporary();
  absl::Status s;
  const Header header = MakeHeader(points, start_frame, sample_rate, static_cast<uint32_t>(total));
  if (int err = WriteAllAt(file->fd(), header.bytes, kPc2HeaderBytes, 0); err != 0) s = IoError(err, "write", tmp);
  uint64_t at = kPc2HeaderBytes;
  std::vector<unsigned char> buffer;
  for (size_t p = 0; s.ok() && p < parts.size(); ++p) {
    FdGuard in(::open(parts[p].path.c_str(), O_RDONLY | O_CLOEXEC));
    if (in.get() < 0) {
      s = IoError(errno, "open", parts[p].path);
      break;
    }
    uint64_t left = parts[p].frames * frame_bytes, from = kPc2HeaderBytes;
    while (s.ok() && left > 0) {
      const uint64_t n = std::min<uint64_t>(left, uint64_t{8} << 20);
      buffer.resize(n);
      if (int err = ReadAllAt(in.get(), buffer.data(), n, from); err != 0) {
        s = err > 0 ? IoError(err, "read", parts[p].path)
                    : absl::FailedPreconditionError(absl::StrCat(parts[p].path, ": shrank while being read"));
      } else if (int werr = WriteAllAt(file->fd(), buffer.data(), n, at); werr != 0) {
        s = IoError(werr, "write", tmp);
      }
      left -= n;
      from += n;
      at += n;
    }
  }
  if (!s.ok()) return s;  // the temporary goes with `file`
  return file->Commit();
}

// ---------------------------------------------------------------------------------------------
// OBJ sequence

absl::Status WriteObjFrame(const std::string& path, std::span<const float> xyz,
                           std::span<const uint32_t> triangles) {
  if (xyz.size() % 3 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", xyz.size(), " coordinates is not a multiple of 3"));
  }
  if (triangles.size() % 3 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", triangles.size(), " triangle indices is not a multiple of 3"));
  }
  const uint64_t points = xyz.size() / 3;
  for (size_t i = 0; i < triangles.size(); ++i) {
    if (triangles[i] >= points) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": triangle ", i / 3, " index ",
                                                     triangles[i], " >= point count ", points));
    }
  }

  // std::to_chars(general, 9) prints exactly what "%.9g" does in the "C" locale.
  std::string text;
  text.reserve(points * 40 + triangles.size() / 3 * 24);
  char buf[64];
  for (uint64_t p = 0; p < points; ++p) {
    text += 'v';
    for (int c = 0; c < 3; ++c) {
      text += ' ';
      const auto r =
          std::to_chars(buf, buf + sizeof(buf), xyz[3 * p + c], std::chars_format::general, 9);
      text.append(buf, r.ptr);
    }
    text += '\n';
  }
  for (size_t t = 0; t < triangles.size(); t += 3) {
    const int len = std::snprintf(buf, sizeof(buf), "f %llu %llu %llu\n",
                                  static_cast<unsigned long long>(triangles[t]) + 1,
                                  static_cast<unsigned long long>(triangles[t + 1]) + 1,
                                  static_cast<unsigned long long>(triangles[t + 2]) + 1);
    text.append(buf, static_cast<size_t>(len));
  }

  return WriteFileAtomically(path, text);
}

std::string ObjFramePath(const std::string& dir, const std::string& stem, uint64_t frame) {
  char num[32];
  std::snprintf(num, sizeof(num), "%06llu", static_cast<unsigned long long>(frame));
  std::string out = dir;
  if (!out.empty() && out.back() != '/') out += '/';
  return absl::StrCat(out, stem, "_", std::string(num), ".obj");
}

namespace {
// Calls visit(path) for every dir/stem_N.obj with N in [begin, end) (the names ObjFramePath gives).
absl::Status ForEachObjFrame(const std::string& dir, const std::string& stem, uint64_t begin, uint64_t end,
                             const std::function<absl::Status(const std::filesystem::path&)>& visit) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir.empty() ? "." : dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return absl::OkStatus();
  if (ec) return absl::FailedPreconditionError(absl::StrCat(dir, ": ", ec.message()));
  const std::string prefix = stem + "_";
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return absl::FailedPreconditionError(absl::StrCat(dir, ": ", ec.message()));
    const std::string name = it->path().filename().string();
    if (name.size() < prefix.size() + 6 + 4 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - 4, 4, ".obj") != 0) {
      continue;
    }
    const std::string_view digits(name.data() + prefix.size(), name.size() - prefix.size() - 4);
    uint64_t frame = 0;
    const auto [end_ptr, parse] = std::from_chars(digits.data(), digits.data() + digits.size(), frame);
    if (parse != std::errc() || end_ptr != digits.data() + digits.size()) continue;
    if (name != ObjFramePath("", stem, frame)) continue;  // not a name it gives (7 digits with a leading 0)
    if (frame < begin || frame >= end) continue;
    if (absl::Status st = visit(it->path()); !st.ok()) return st;
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status RemoveObjFrames(const std::string& dir, const std::string& stem, uint64_t begin, uint64_t end) {
  return ForEachObjFrame(dir, stem, begin, end, [](const std::filesystem::path& path) {
    std::error_code rm;
    std::filesystem::remove(path, rm);
    if (rm) return absl::FailedPreconditionError(absl::StrCat(path.string(), ": ", rm.message()));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::string> FirstObjFrame(const std::string& dir, const std::string& stem, uint64_t begin,
                                          uint64_t end) {
  std::string found;
  absl::Status st = ForEachObjFrame(dir, stem, begin, end, [&](const std::filesystem::path& path) {
    found = path.string();
    return absl::CancelledError();  // one is enough
  });
  if (!st.ok() && !absl::IsCancelled(st)) return st;
  return found;
}

absl::StatusOr<OutputLock> OutputLock::Acquire(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(errno, "open", path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK) {
      std::fprintf(stderr, "sinew: %s: this file system takes no locks (%s): nothing stops another run writing the "
                   "same outputs\n", path.c_str(), std::strerror(err));
      return OutputLock(fd);
    }
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": another run is writing these outputs (locked); wait for it, or write elsewhere"));
    }
    return IoError(err, "lock", path);
  }
  return OutputLock(fd);
}

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace sinew::client
