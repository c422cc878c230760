// core/util/atomic_file.h: whole files in shared folders (written at once or streamed), and the
// clean-up of killed writers' temporaries.
#include "core/util/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace sinew {
namespace {

namespace fs = std::filesystem;

class Folder {
 public:
  Folder() {
    std::string tmpl = (fs::path(::testing::TempDir()) / "sinew_atomic_XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~Folder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::set<std::string> Names() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.insert(e.path().filename().string());
    return names;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "<absent>";
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

unsigned Mode(const std::string& path) {
  struct stat st{};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return st.st_mode & 0777;
}

TEST(AtomicFile, WritesThePiecesInOrderWithTheModeAskedAndLeavesNoTemporary) {
  Folder dir;
  const std::string path = dir / "grid.bin";
  ASSERT_TRUE(WriteFileAtomically(path, {"head\n", std::string_view("\0\1\2", 3), "tail"}).ok());
  EXPECT_EQ(Read(path), std::string("head\n\0\1\2tail", 12));
  EXPECT_EQ(Mode(path), 0644u);
  ASSERT_TRUE(WriteFileAtomically(path, "again", {.durable = false, .mode = 0600}).ok());
  EXPECT_EQ(Read(path), "again");
  EXPECT_EQ(Mode(path), 0600u);
  EXPECT_EQ(dir.Names(), std::set<std::string>{"grid.bin"});
}

// Several writers of one path (threads here; replicas sharing a cache volume in production, all
// pid 1 in their containers): each write succeeds, every read sees a whole file, and the end is
// one writer's whole file. A temporary named after the process would be shared by the writers
// (their bytes interleave, and all but one rename fail).
TEST(AtomicFile, WritersOfOnePathNeverMixTheirBytesAndReadersSeeWholeFiles) {
  Folder dir;
  const std::string path = dir / "prepared.bin";
  constexpr int kWriters = 6, kWrites = 15;
  std::vector<std::string> contents;
  for (int w = 0; w < kWriters; ++w) contents.push_back(std::string(size_t(200000 + 1000 * w), char('a' + w)));
  std::atomic<int> failures{0}, torn{0}, reads{0};
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const std::string got = Read(path);
      if (got == "<absent>") continue;
      ++reads;
      bool whole = false;
      for (const std::string& c : contents) whole = whole || got == c;
      if (!whole) ++torn;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kWrites; ++i) {
        if (!WriteFileAtomically(path, {contents[size_t(w)]}).ok()) ++failures;
      }
    });
  }
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  const std::string end = Read(path);
  bool whole = false;
  for (const std::string& c : contents) whole = whole || end == c;
  EXPECT_TRUE(whole);
  EXPECT_EQ(dir.Names(), std::set<std::string>{"prepared.bin"});
}

TEST(AtomicFile, AFailedWriteSaysWhichFileLeavesThePathAsItWasAndNoTemporary) {
  Folder dir;
  // No such folder: nothing can be created.
  auto st = WriteFileAtomically(dir / "missing/grid.bin", {"x"});
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_NE(st.message().find("missing/grid.bin"), std::string::npos) << st;
  // The rename fails (a folder holds the name): the folder stays, the temporary goes.
  fs::create_directory(dir / "taken");
  fs::create_directory(dir / "taken/inner");
  st = WriteFileAtomically(dir / "taken", {"x"});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("taken"), std::string::npos) << st;
  EXPECT_TRUE(fs::is_directory(dir / "taken/inner"));
  EXPECT_EQ(dir.Names(), std::set<std::string>{"taken"});
}

// Written piece by piece: readers see the old file until Commit, then the whole new one; one
// dropped uncommitted (an error half-way) leaves the old file and no temporary.
TEST(AtomicFile, AStreamedFileReplacesThePathOnlyWhenCommitted) {
  Folder dir;
  const std::string path = dir / "joined.pc2";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    auto file = AtomicFile::Create(path);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ(::pwrite(file->fd(), "new bytes", 9, 0), 9);
    EXPECT_EQ(Read(path), "old");
    EXPECT_NE(file->temporary().find("joined.pc2.tmp."), std::string::npos) << file->temporary();
    AtomicFile moved = std::move(*file);  // the temporary travels with it
    EXPECT_TRUE(moved.Commit().ok());
    EXPECT_EQ(moved.Commit().code(), absl::StatusCode::kFailedPrecondition) << "twice";
  }
  EXPECT_EQ(Read(path), "new bytes");
  {
    auto file = AtomicFile::Create(path, {.durable = false});
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ(::write(file->fd(), "half", 4), 4);
  }  // dropped
  EXPECT_EQ(Read(path), "new bytes");
  EXPECT_EQ(dir.Names(), std::set<std::string>{"joined.pc2"});
}

TEST(AtomicFile, OnlyOurTemporariesOlderThanTheAgeAreRemoved) {
  Folder dir;
  const auto now = fs::file_time_type::clock::now();
  auto make = [&](const std::string& name, std::chrono::seconds age) {
    std::ofstream(dir / name) << "bytes";
    fs::last_write_time(dir / name, now - age);
  };
  const auto old = std::chrono::hours(2);
  make("contact-129x33-k950.sinewop.tmp.Ab3xYz", old);           // a killed writer's
  make("swing-twist-0123.bin.tmp4711", old);                      // earlier versions' names
  make("contact-129x33-k950.sinewop.tmp4711-94418312", old);
  make("swing-twist-4567.bin.tmp.Qw8eRt", std::chrono::minutes(5));  // a live writer's
  make("swing-twist-89ab.bin", std::chrono::hours(48));           // a cache file
  make("notes.txt.tmp.Zz9Yy8", old);                               // another program's kind of file
  make("someone.tmp", old);
  make("swing-twist-0123.bin.tmp.toolong", old);                   // not a name this writer makes
  make("swing-twist-0123.bin.tmp12x", old);
  fs::create_directory(dir / "old.bin.tmp.Dd1Dd1");
  fs::last_write_time(dir / "old.bin.tmp.Dd1Dd1", now - old);      // not a file
  std::ofstream(dir / "old.bin.tmp.Dd1Dd1/inner.bin.tmp.Ee2Ee2") << "below";
  fs::last_write_time(dir / "old.bin.tmp.Dd1Dd1/inner.bin.tmp.Ee2Ee2", now - old);

  EXPECT_EQ(RemoveStaleTemporaries(dir.path().string(), kStaleTemporaryAge, {".bin", ".sinewop"}), 3);
  EXPECT_EQ(dir.Names(), (std::set<std::string>{"swing-twist-4567.bin.tmp.Qw8eRt", "swing-twist-89ab.bin",
                                                "notes.txt.tmp.Zz9Yy8", "someone.tmp", "swing-twist-0123.bin.tmp.toolong",
                                                "swing-twist-0123.bin.tmp12x", "old.bin.tmp.Dd1Dd1"}));
  EXPECT_TRUE(fs::exists(dir / "old.bin.tmp.Dd1Dd1/inner.bin.tmp.Ee2Ee2"));  // one folder, not below it
  EXPECT_EQ(RemoveStaleTemporaries(dir.path().string(), kStaleTemporaryAge, {".bin", ".sinewop"}), 0);
  EXPECT_EQ(RemoveStaleTemporaries((dir.path() / "absent").string(), kStaleTemporaryAge, {".bin"}), 0);
  // The state folder's older name (NAME.rig.tmp).
  make("0123abcd.rig.tmp", old);
  EXPECT_EQ(RemoveStaleTemporaries(dir.path().string(), kStaleTemporaryAge, {".rig"}), 1);
}

// In folders users own (the command line's outputs) only the names AtomicFile makes go: a user's
// `mesh.obj.tmp` (or .tmp7) is theirs, however old (removed until 2026-12-07).
TEST(AtomicFile, InAUsersFolderOnlyTheNamesAtomicFileMakesAreRemoved) {
  Folder dir;
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(2);
  for (const char* name : {"mesh.obj.tmp", "mesh.obj.tmp7", "mesh.obj.tmp7-8", "mesh.obj.tmp.Ab3xYz"}) {
    std::ofstream(dir / name) << "bytes";
    fs::last_write_time(dir / name, old);
  }
  EXPECT_EQ(RemoveStaleTemporaries(dir.path().string(), kStaleTemporaryAge, {".obj"}, /*earlier_names=*/false), 1);
  EXPECT_EQ(dir.Names(), (std::set<std::string>{"mesh.obj.tmp", "mesh.obj.tmp7", "mesh.obj.tmp7-8"}));
}

// A process ending without unwinding (the command line's _Exit on Ctrl-C) first removes the
// temporaries of its writes in progress, on any thread; no temporary is made after that, and a
// write in progress then fails instead of committing. Run in a child: it changes the process.
TEST(AtomicFile, AnEndingProcessRemovesItsTemporariesInProgress) {
  Folder dir;
  EXPECT_EXIT(
      {
        auto open = AtomicFile::Create(dir / "frame.obj");
        absl::StatusOr<AtomicFile> other = absl::UnknownError("not made");
        std::thread([&] { other = AtomicFile::Create(dir / "other.obj"); }).join();  // still in progress
        if (!open.ok() || !other.ok()) std::_Exit(10);
        if (::write(open->fd(), "v 0 0 0\n", 8) != 8) std::_Exit(11);
        if (RemoveTemporariesInProgress() != 2) std::_Exit(12);
        if (AtomicFile::Create(dir / "late.obj").status().code() != absl::StatusCode::kCancelled) std::_Exit(13);
        if (WriteFileAtomically(dir / "late.obj", "x").ok()) std::_Exit(14);
        if (open->Commit().ok()) std::_Exit(15);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_TRUE(dir.Names().empty()) << *dir.Names().begin();
}

}  // namespace
}  // namespace sinew
