// Point caches (.pc2 writer/reader with crash-safe resume, OBJ sequences) and the progress
// display of batch jobs.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "clients/lib/point_cache.h"
#include "clients/lib/progress.h"

namespace sinew::client {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

std::string LeFloat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return Le32(u);
}

// Deterministic, distinct coordinates for frame `f`.
std::vector<float> MakeFrame(uint32_t points, uint64_t f) {
  std::vector<float> xyz(points * 3);
  for (size_t i = 0; i < xyz.size(); ++i) {
    xyz[i] = static_cast<float>(f) * 10.0f + static_cast<float>(i) * 0.37f - 5.0f;
  }
  return xyz;
}

// Sets the header's numSamples of an existing file in place.
void SetHeaderCount(const std::string& path, uint32_t count) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const std::string b = Le32(count);
  ASSERT_EQ(::pwrite(fd, b.data(), 4, 28), 4);
  ::close(fd);
}

// Whether a temporary of `path`'s writer (`<path>.tmp...`) is left in its folder.
bool TemporaryBeside(const std::string& path) {
  const fs::path p(path);
  for (const auto& e : fs::directory_iterator(p.parent_path())) {
    if (e.path().filename().string().starts_with(p.filename().string() + ".tmp")) return true;
  }
  return false;
}

class PointCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "sinew_pc2_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Writes `frames` frames in one uninterrupted run; returns the file's bytes.
  std::string WriteReference(const std::string& path, uint32_t points, uint64_t frames) {
    auto w = Pc2Writer::Open(path, points, kStart, kRate, /*resume=*/false);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return {};
    for (uint64_t f = 0; f < frames; ++f) EXPECT_TRUE(w->Append(MakeFrame(points, f)).ok());
    EXPECT_TRUE(w->Close().ok());
    return ReadBytes(path);
  }

  static constexpr float kStart = 10.0f;
  static constexpr float kRate = 0.5f;
  std::string dir_;
};

// ---------------------------------------------------------------------------------------------
// Pc2Writer / ReadPc2

TEST_F(PointCacheTest, WrittenFileHasExactHeaderBytesAndSize) {
  const std::string path = Path("a.pc2");
  const std::string bytes = WriteReference(path, 3, 2);
  const std::string header = std::string("POINTCACHE2\0", 12) + Le32(1) + Le32(3) +
                             LeFloat(kStart) + LeFloat(kRate) + Le32(2);
  ASSERT_EQ(header.size(), 32u);
  ASSERT_EQ(bytes.size(), 32u + 2 * 3 * 12);
  EXPECT_EQ(bytes.substr(0, 32), header);
  std::string data;
  for (uint64_t f = 0; f < 2; ++f) {
    for (float v : MakeFrame(3, f)) data += LeFloat(v);
  }
  EXPECT_EQ(bytes.substr(32), data);
}

TEST_F(PointCacheTest, NewFileHasHeaderWithZeroSamples) {
  const std::string path = Path("a.pc2");
  auto w = Pc2Writer::Open(path, 5, kStart, kRate, /*resume=*/false);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->frames(), 0u);
  const std::string bytes = ReadBytes(path);
  ASSERT_EQ(bytes.size(), 32u);
  EXPECT_EQ(bytes.substr(28), Le32(0));
  EXPECT_TRUE(w->Close().ok());
  EXPECT_TRUE(w->Close().ok());  // idempotent
  EXPECT_EQ(w->Append(MakeFrame(5, 0)).code(), absl::StatusCode::kFailedPrecondition);
}

// One writer at a time: while a run holds the file, a second one (resumed or fresh) is refused
// and cuts nothing; once the first is closed the next opens it (until 2026-12-07 a second run
// truncated the file under the first: a Kubernetes Indexed Job can run two pods for one index).
TEST_F(PointCacheTest, ASecondWriterIsRefusedWhileTheFirstHoldsTheFile) {
  const std::string path = Path("a.pc2");
  auto first = Pc2Writer::Open(path, 3, kStart, kRate, /*resume=*/false);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->Append(MakeFrame(3, 0)).ok());
  ASSERT_TRUE(first->Append(MakeFrame(3, 1)).ok());
  const std::string before = ReadBytes(path);
  for (bool resume : {true, false}) {
    auto second = Pc2Writer::Open(path, 3, kStart, kRate, resume);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
    EXPECT_THAT(std::string(second.status().message()), ::testing::HasSubstr("another run is writing it"));
    EXPECT_EQ(ReadBytes(path), before) << "resume " << resume;
  }
  ASSERT_TRUE(first->Close().ok());
  auto next = Pc2Writer::Open(path, 3, kStart, kRate, /*resume=*/true);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->frames(), 2u);
}

TEST_F(PointCacheTest, ReadPc2ReturnsTheFramesWritten) {
  const std::string path = Path("a.pc2");
  WriteReference(path, 4, 6);
  auto data = ReadPc2(path);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->points, 4u);
  EXPECT_EQ(data->start_frame, kStart);
  EXPECT_EQ(data->sample_rate, kRate);
  ASSERT_EQ(data->frames.size(), 6u);
  for (uint64_t f = 0; f < 6; ++f) EXPECT_EQ(data->frames[f], MakeFrame(4, f)) << f;
}

TEST_F(PointCacheTest, ReadPc2OfEmptyCacheHasNoFrames) {
  const std::string path = Path("a.pc2");
  WriteReference(path, 4, 0);
  auto data = ReadPc2(path);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_TRUE(data->frames.empty());
}

// The crash model: a writer killed at any instant leaves some prefix of the uninterrupted file,
// with a header count that may lag (killed between the frame and the count update) or, after
// a power loss, run ahead of the data. For every cut offset and each of those header counts,
// resuming starts at min(count, complete frames), and appending the rest reproduces the
// uninterrupted file byte for byte.
TEST_F(PointCacheTest, ResumeFromAnyTruncationIsByteIdenticalToUninterruptedRun) {
  constexpr uint32_t kPoints = 3;
  constexpr uint64_t kFrames = 4;
  constexpr uint64_t kFrameBytes = kPoints * 12;
  const std::string reference = WriteReference(Path("ref.pc2"), kPoints, kFrames);
  ASSERT_EQ(reference.size(), 32 + kFrames * kFrameBytes);
  const std::string path = Path("cut.pc2");

  int cases = 0;
  for (uint64_t size = 32; size <= reference.size(); ++size) {
    const uint64_t complete = (size - 32) / kFrameBytes;
    // Header counts a killed run can leave: the full count (a copy of the finished file cut
    // short: count ahead of the data, including "count updated, frame partial"), exactly the
    // complete frames, one behind (killed between frame and count), one ahead.
    std::vector<uint64_t> counts = {kFrames, complete};
    if (complete > 0) counts.push_back(complete - 1);
    if (complete < kFrames) counts.push_back(complete + 1);
    for (uint64_t count : counts) {
      SCOPED_TRACE(testing::Message() << "size " << size << " count " << count);
      fs::copy_file(Path("ref.pc2"), path, fs::copy_options::overwrite_existing);
      ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0);
      SetHeaderCount(path, static_cast<uint32_t>(count));

      auto w = Pc2Writer::Open(path, kPoints, kStart, kRate, /*resume=*/true);
      ASSERT_TRUE(w.ok()) << w.status();
      const uint64_t expected = std::min(count, complete);
      ASSERT_EQ(w->frames(), expected);
      // The partial frame is gone and the header agrees with the data.
      const std::string resumed = ReadBytes(path);
      ASSERT_EQ(resumed.size(), 32 + expected * kFrameBytes);
      EXPECT_EQ(resumed.substr(28, 4), Le32(static_cast<uint32_t>(expected)));
      ASSERT_TRUE(ReadPc2(path).ok());

      for (uint64_t f = w->frames(); f < kFrames; ++f) {
        ASSERT_TRUE(w->Append(MakeFrame(kPoints, f)).ok());
      }
      ASSERT_TRUE(w->Close().ok());
      ASSERT_EQ(ReadBytes(path), reference);
      ++cases;
    }
  }
  EXPECT_GT(cases, 400);
}

// A writer killed while creating the file leaves a prefix of the fresh header (count 0):
// resume starts again at frame 0.
TEST_F(PointCacheTest, ResumeFromPartialHeaderStartsAtFrameZero) {
  constexpr uint32_t kPoints = 3;
  const std::string reference = WriteReference(Path("ref.pc2"), kPoints, 2);
  std::string fresh = reference.substr(0, 32);
  fresh.replace(28, 4, Le32(0));
  const std::string path = Path("cut.pc2");
  for (size_t size = 0; size < 32; ++size) {
    SCOPED_TRACE(size);
    WriteBytes(path, fresh.substr(0, size));
    auto w = Pc2Writer::Open(path, kPoints, kStart, kRate, /*resume=*/true);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->frames(), 0u);
    for (uint64_t f = 0; f < 2; ++f) ASSERT_TRUE(w->Append(MakeFrame(kPoints, f)).ok());
    ASSERT_TRUE(w->Close().ok());
    EXPECT_EQ(ReadBytes(path), reference);
  }
}

// A real writer process SIGKILLed at random instants, resumed each time, ends with the same
// bytes as an uninterrupted run.
TEST_F(PointCacheTest, WriterKilledAtRandomInstantsResumesToIdenticalFile) {
  constexpr uint32_t kPoints = 2000;
  constexpr uint64_t kFrames = 150;
  const std::string reference = WriteReference(Path("ref.pc2"), kPoints, kFrames);
  const std::string path = Path("killed.pc2");
  std::vector<std::vector<float>> frames;
  for (uint64_t f = 0; f < kFrames; ++f) frames.push_back(MakeFrame(kPoints, f));

  std::mt19937 rng(1234);
  int kills = 0;
  bool done = false;
  // Kills stop after kMaxKills, and the last writer runs to its end: a disk whose flush outlasts
  // every random delay would otherwise never let one finish (the loop bounded only that).
  constexpr int kMaxKills = 40;
  for (int attempt = 0; !done; ++attempt) {
    std::fflush(nullptr);
    int hold[2];
    ASSERT_EQ(::pipe(hold), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(hold[1]);
      if (attempt == 0) {  // the first is killed before it opens the file: it waits for a byte never sent
        char byte;
        (void)!::read(hold[0], &byte, 1);
      }
      auto w = Pc2Writer::Open(path, kPoints, kStart, kRate, /*resume=*/true);
      if (!w.ok()) ::_exit(2);
      for (uint64_t f = w->frames(); f < kFrames; ++f) {
        if (!w->Append(frames[f]).ok()) ::_exit(3);
      }
      ::_exit(w->Close().ok() ? 0 : 4);
    }
    ::close(hold[0]);
    if (kills < kMaxKills) {
      if (attempt > 0) ::usleep(std::uniform_int_distribution<int>(0, 1500)(rng));
      ::kill(pid, SIGKILL);
    }
    ::close(hold[1]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status)) {
      ASSERT_EQ(WEXITSTATUS(status), 0);
      done = true;
    } else {
      ++kills;
    }
  }
  ASSERT_TRUE(done);
  EXPECT_GT(kills, 0);
  EXPECT_EQ(ReadBytes(path), reference);
  std::printf("writer killed %d times before it finished\n", kills);
}

TEST_F(PointCacheTest, ResumeWithDifferentPointCountFailsAndLeavesFileUnchanged) {
  const std::string path = Path("a.pc2");
  const std::string before = WriteReference(path, 3, 2);
  auto w = Pc2Writer::Open(path, 4, kStart, kRate, /*resume=*/true);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(w.status().message()),
              HasSubstr("point count mismatch: file has 3 points, this job has 4"));
  EXPECT_THAT(std::string(w.status().message()), HasSubstr(path));
  EXPECT_EQ(ReadBytes(path), before);
}

TEST_F(PointCacheTest, ResumeWithDifferentStartOrRateFailsNamingTheField) {
  const std::string path = Path("a.pc2");
  const std::string before = WriteReference(path, 3, 2);
  auto w = Pc2Writer::Open(path, 3, 11.0f, kRate, /*resume=*/true);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()),
              HasSubstr("start frame mismatch: file has 10, this job has 11"));
  w = Pc2Writer::Open(path, 3, kStart, 0.25f, /*resume=*/true);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()),
              HasSubstr("sample rate mismatch: file has 0.5, this job has 0.25"));
  EXPECT_EQ(ReadBytes(path), before);
}

TEST_F(PointCacheTest, ResumeWithoutExistingFileStartsFresh) {
  const std::string path = Path("new.pc2");
  auto w = Pc2Writer::Open(path, 3, kStart, kRate, /*resume=*/true);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->frames(), 0u);
  ASSERT_TRUE(w->Append(MakeFrame(3, 0)).ok());
  ASSERT_TRUE(w->Close().ok());
  EXPECT_EQ(ReadBytes(path), WriteReference(Path("ref.pc2"), 3, 1));
}

TEST_F(PointCacheTest, NoResumeTruncatesExistingFile) {
  const std::string path = Path("a.pc2");
  WriteReference(path, 3, 5);
  auto w = Pc2Writer::Open(path, 7, kStart, kRate, /*resume=*/false);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->frames(), 0u);
  ASSERT_TRUE(w->Close().ok());
  auto data = ReadPc2(path);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->points, 7u);
  EXPECT_TRUE(data->frames.empty());
}

TEST_F(PointCacheTest, BadMagicFailsToReadAndToResume) {
  const std::string path = Path("a.pc2");
  std::string bytes = WriteReference(path, 3, 2);
  bytes[10] = '3';  // "POINTCACHE3"
  WriteBytes(path, bytes);
  auto data = ReadPc2(path);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("bad magic"));
  auto w = Pc2Writer::Open(path, 3, kStart, kRate, /*resume=*/true);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("bad magic"));
  EXPECT_EQ(ReadBytes(path), bytes);
}

TEST_F(PointCacheTest, ShortFileThatIsNotOurHeaderFailsToResume) {
  const std::string path = Path("a.pc2");
  WriteBytes(path, "hello");
  auto w = Pc2Writer::Open(path, 3, kStart, kRate, /*resume=*/true);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(ReadBytes(path), "hello");
}

TEST_F(PointCacheTest, ReadPc2RejectsTruncatedAndOverlongFiles) {
  const std::string path = Path("a.pc2");
  const std::string bytes = WriteReference(path, 3, 3);
  WriteBytes(path, bytes.substr(0, bytes.size() - 1));
  auto data = ReadPc2(path);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("truncated"));

  WriteBytes(path, bytes.substr(0, 20));
  data = ReadPc2(path);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("truncated PC2 header"));

  WriteBytes(path, bytes + "x");
  data = ReadPc2(path);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("1 bytes after its 3 frames"));

  // A header of 0 points and 2^31 - 1 samples: refused, not 2^31 empty frames (until 2026-12-07).
  std::string empty = bytes.substr(0, 32);
  for (int k = 0; k < 4; ++k) empty[16 + k] = 0;
  for (int k = 0; k < 4; ++k) empty[28 + k] = char(k == 3 ? 0x7f : 0xff);
  WriteBytes(path, empty);
  data = ReadPc2(path);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("0 points (2147483647 samples)"));

  data = ReadPc2(Path("missing.pc2"));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("missing.pc2"));
}

TEST_F(PointCacheTest, AppendRejectsWrongSizeAndNonFiniteFramesWithoutCountingThem) {
  const std::string path = Path("a.pc2");
  auto w = Pc2Writer::Open(path, 3, kStart, kRate, /*resume=*/false);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->Append(MakeFrame(2, 0)).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> bad = MakeFrame(3, 0);
  bad[4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(w->Append(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w->frames(), 0u);
  EXPECT_EQ(ReadBytes(path).size(), 32u);
}

TEST_F(PointCacheTest, OpenRejectsZeroPointsAndNonFiniteHeaderValues) {
  EXPECT_EQ(Pc2Writer::Open(Path("a.pc2"), 0, 1, 1, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Pc2Writer::Open(Path("a.pc2"), 3, std::numeric_limits<float>::infinity(), 1, false)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PointCacheTest, OpenInMissingDirectoryReportsPathAndErrno) {
  auto w = Pc2Writer::Open(Path("no/such/dir/a.pc2"), 3, 1, 1, false);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("no/such/dir/a.pc2"));
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("No such file or directory"));
}

// ---------------------------------------------------------------------------------------------
// OBJ sequence

TEST(ObjFramePath, ZeroPadsToSixDigitsAndGrowsBeyond) {
  EXPECT_EQ(ObjFramePath("out", "arm", 123), "out/arm_000123.obj");
  EXPECT_EQ(ObjFramePath("out/", "arm", 0), "out/arm_000000.obj");
  EXPECT_EQ(ObjFramePath("/a/b", "arm", 999999), "/a/b/arm_999999.obj");
  EXPECT_EQ(ObjFramePath("out", "arm", 1234567), "out/arm_1234567.obj");
  EXPECT_EQ(ObjFramePath("", "arm", 7), "arm_000007.obj");
}

TEST_F(PointCacheTest, WriteObjFrameWritesParseableVerticesAndOneBasedFaces) {
  const std::string path = Path("f.obj");
  const std::vector<float> xyz = {0.f,  1.5f,    -2.f,       0.1f, 1e-7f, 3.4e38f,
                                  -0.f, 1.f / 3, 12345.678f, 7.f,  8.f,   9.f};
  const std::vector<uint32_t> tris = {0, 1, 2, 2, 3, 0};
  ASSERT_TRUE(WriteObjFrame(path, xyz, tris).ok());
  EXPECT_FALSE(TemporaryBeside(path));

  std::ifstream in(path);
  std::string line;
  std::vector<float> vs;
  std::vector<uint32_t> fs_;
  int v_lines = 0, f_lines = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tag;
    ls >> tag;
    if (tag == "v") {
      ++v_lines;
      for (int c = 0; c < 3; ++c) {
        std::string tok;
        ASSERT_TRUE(static_cast<bool>(ls >> tok)) << line;
        vs.push_back(std::strtof(tok.c_str(), nullptr));
      }
    } else if (tag == "f") {
      ++f_lines;
      for (int c = 0; c < 3; ++c) {
        uint32_t i;
        ASSERT_TRUE(static_cast<bool>(ls >> i)) << line;
        fs_.push_back(i);
      }
    } else {
      FAIL() << "unexpected line: " << line;
    }
    std::string rest;
    EXPECT_FALSE(static_cast<bool>(ls >> rest)) << line;
  }
  EXPECT_EQ(v_lines, 4);
  EXPECT_EQ(f_lines, 2);
  EXPECT_EQ(vs, xyz);  // %.9g round-trips float32 exactly
  EXPECT_EQ(fs_, (std::vector<uint32_t>{1, 2, 3, 3, 4, 1}));
  EXPECT_THAT(ReadBytes(path), HasSubstr("v 0 1.5 -2\n"));
}

TEST_F(PointCacheTest, WriteObjFrameReplacesAtomicallyAndRejectsBadIndices) {
  const std::string path = Path("f.obj");
  ASSERT_TRUE(WriteObjFrame(path, std::vector<float>{1, 2, 3}, {}).ok());
  EXPECT_EQ(ReadBytes(path), "v 1 2 3\n");
  ASSERT_TRUE(WriteObjFrame(path, std::vector<float>{4, 5, 6}, {}).ok());
  EXPECT_EQ(ReadBytes(path), "v 4 5 6\n");

  const std::vector<uint32_t> tris = {0, 1, 3};
  absl::Status s = WriteObjFrame(path, std::vector<float>(9, 0.f), tris);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadBytes(path), "v 4 5 6\n");  // the old complete file survives
  EXPECT_FALSE(TemporaryBeside(path));
  EXPECT_EQ(WriteObjFrame(path, std::vector<float>(4, 0.f), {}).code(),
            absl::StatusCode::kInvalidArgument);

  s = WriteObjFrame(Path("missing/f.obj"), std::vector<float>{1, 2, 3}, {});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("missing/f.obj.tmp"));
}

// ---------------------------------------------------------------------------------------------
// Progress

// Runs `body` with a memory stream; returns what was printed.
template <typename Body>
std::string Capture(Body body) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = ::open_memstream(&buf, &len);
  EXPECT_NE(f, nullptr);
  body(f);
  std::fclose(f);
  std::string out(buf, len);
  std::free(buf);
  return out;
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(Progress, NonTtyPrintsPlainLinesAtTenPercentSteps) {
  double t = 0;
  const std::string out = Capture([&](std::FILE* f) {
    Progress p("render", 120, f, /*tty=*/false, [&] { return t; });
    EXPECT_FALSE(p.tty());
    for (uint64_t i = 1; i <= 120; ++i) {
      t += 0.1;
      p.Update(i);
    }
    p.Finish();
  });
  EXPECT_EQ(out.find('\r'), std::string::npos);
  std::vector<std::string> expected;
  for (int step = 1; step <= 10; ++step) {
    expected.push_back("render: " + std::to_string(12 * step) + "/120 frames (" +
                       std::to_string(10 * step) + "%), 10.0 frames/s");
  }
  EXPECT_EQ(Lines(out), expected);
}

TEST(Progress, NonTtyFinishPrintsTheLastCountOnce) {
  double t = 0;
  const std::string out = Capture([&](std::FILE* f) {
    Progress p("render", 120, f, false, [&] { return t; });
    for (uint64_t i = 1; i <= 50; ++i) {
      t += 0.5;
      p.Update(i);
    }
    p.Finish();
    p.Finish();
  });
  const std::vector<std::string> lines = Lines(out);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[3], "render: 48/120 frames (40%), 2.0 frames/s");
  EXPECT_EQ(lines[4], "render: 50/120 frames (41%), 2.0 frames/s");
}

TEST(Progress, ResumedRunCountsOnlyItsOwnFramesInTheRate) {
  double t = 100;  // time before Resume does not count
  const std::string out = Capture([&](std::FILE* f) {
    Progress p("render", 120, f, false, [&] { return t; });
    t = 200;
    p.Resume(60);
    for (uint64_t i = 61; i <= 120; ++i) {
      t += 0.25;
      p.Update(i);
    }
    p.Finish();
  });
  const std::vector<std::string> lines = Lines(out);
  ASSERT_EQ(lines.size(), 5u);  // 60%, 70%, 80%, 90%, 100%: not the 50% it resumed at
  EXPECT_EQ(lines[0], "render: 72/120 frames (60%), 4.0 frames/s");
  EXPECT_EQ(lines[4], "render: 120/120 frames (100%), 4.0 frames/s");
}

TEST(Progress, TtyRedrawsOneLineWithCarriageReturnsAtMostEvery100ms) {
  double t = 0;
  const std::string out = Capture([&](std::FILE* f) {
    Progress p("render", 120, f, /*tty=*/true, [&] { return t; });
    EXPECT_TRUE(p.tty());
    for (uint64_t i = 1; i <= 120; ++i) {
      t += 1.0 / 32;  // exact in binary: a redraw every 4 frames (125 ms)
      p.Update(i);
    }
    p.Finish();
  });
  // Drawn at frames 1, 5, ..., 117 (30 times) and at Finish; one '\n', at the very end.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 31);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_THAT(out, HasSubstr("\rrender [#########...........]  47%  57/120 frames  "
                             "32.0 frames/s  ETA 2 s"));
  // The final line, padded with blanks over the longer "ETA 0 s" line it replaces.
  const std::string last = out.substr(out.rfind('\r') + 1);
  EXPECT_EQ(last, "render [####################] 100%  120/120 frames  32.0 frames/s  in 4 s \n");
}

TEST(Progress, TtyFinishAlwaysRedrawsAndEndsTheLine) {
  double t = 0;
  const std::string out = Capture([&](std::FILE* f) {
    Progress p("render", 10, f, true, [&] { return t; });
    p.Update(1);  // drawn (first)
    p.Update(2);  // throttled: no time has passed
    p.Finish();   // drawn regardless
  });
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 2);
  EXPECT_THAT(
      out, HasSubstr("\rrender [####................]  20%  2/10 frames  -- frames/s  in 0 s\n"));
}

}  // namespace
}  // namespace sinew::client
