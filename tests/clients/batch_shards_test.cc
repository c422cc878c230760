// The pieces of sharded batches without a server: how frames split into shards, the --shard and
// $JOB_COMPLETION_INDEX parsing, the manifest file, ConcatPc2 and MergeShards on parts written
// by Pc2Writer.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "clients/lib/batch_shards.h"
#include "clients/lib/point_cache.h"

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

TEST(ShardFrames, SlicesAreContiguousCoverEveryFrameAndDifferByAtMostOne) {
  for (uint64_t total : {0, 1, 2, 7, 100, 793, 30000001}) {
    for (uint64_t n : {1, 2, 3, 7, 64, 101}) {
      uint64_t next = 0, smallest = ~uint64_t{0}, largest = 0;
      for (uint64_t i = 0; i < n; ++i) {
        const FrameRange r = ShardFrames(total, Shard{i, n});
        EXPECT_EQ(r.begin, next) << total << " " << i << "/" << n;
        EXPECT_LE(r.begin, r.end);
        next = r.end;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
      }
      EXPECT_EQ(next, total) << total << " / " << n;
      EXPECT_LE(largest - smallest, 1u);
    }
  }
  // No overflow for huge counts.
  EXPECT_EQ(ShardFrames(~uint64_t{0}, Shard{99999, 100000}).end, ~uint64_t{0});
}

TEST(ParseShard, AcceptsIOfNAndNamesWhatIsWrong) {
  auto s = ParseShard("2/5");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->index, 2u);
  EXPECT_EQ(s->count, 5u);
  EXPECT_THAT(std::string(ParseShard("5/5").status().message()), HasSubstr("index 5 is not below the shard count 5"));
  EXPECT_THAT(std::string(ParseShard("0/0").status().message()), HasSubstr("N = 0 is not in [1, 100000]"));
  for (const char* bad : {"", "1", "1/", "/3", "-1/3", "1/3/4", "a/3", "1 /3", "99999999999999999999/3"}) {
    EXPECT_THAT(std::string(ParseShard(bad).status().message()), HasSubstr("is not I/N")) << bad;
  }
}

TEST(ShardFromEnvironment, ReadsTheIndexAnIndexedJobSets) {
  ::unsetenv("SINEW_TEST_SHARD_INDEX");
  EXPECT_THAT(std::string(ShardFromEnvironment(3, "SINEW_TEST_SHARD_INDEX").status().message()),
              HasSubstr("$SINEW_TEST_SHARD_INDEX is not set"));
  ::setenv("SINEW_TEST_SHARD_INDEX", "2", 1);
  auto s = ShardFromEnvironment(3, "SINEW_TEST_SHARD_INDEX");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->index, 2u);
  EXPECT_EQ(s->count, 3u);
  ::setenv("SINEW_TEST_SHARD_INDEX", "3", 1);
  EXPECT_THAT(std::string(ShardFromEnvironment(3, "SINEW_TEST_SHARD_INDEX").status().message()),
              HasSubstr("= 3 is not below the shard count 3"));
  ::setenv("SINEW_TEST_SHARD_INDEX", "x1", 1);
  EXPECT_THAT(std::string(ShardFromEnvironment(3, "SINEW_TEST_SHARD_INDEX").status().message()),
              HasSubstr("is not a shard index"));
  ::unsetenv("SINEW_TEST_SHARD_INDEX");
}

class ShardFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sinew-shard-files-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Frame f of a 5-point job: distinct values per frame and point.
  static std::vector<float> FrameOf(uint64_t f) {
    std::vector<float> xyz(15);
    for (size_t i = 0; i < xyz.size(); ++i) xyz[i] = float(f) * 100.0f + float(i) * 0.25f;
    return xyz;
  }
  ShardManifest ManifestOf(Shard s, uint64_t total) const {
    ShardManifest m;
    m.job = std::string(64, 'a');
    m.shard = s;
    m.total_frames = total;
    m.frames = ShardFrames(total, s);
    m.points = 5;
    m.backend = m.frames.size() ? "cpu" : "none";
    m.stem = "walk";
    return m;
  }
  // Writes shard s's manifest and its first `frames` frames (all of them when -1).
  void WriteShard(const std::string& pc2, Shard s, uint64_t total, int64_t frames = -1) {
    const ShardManifest m = ManifestOf(s, total);
    ASSERT_TRUE(WriteShardManifest(ShardManifestPath(pc2, "", s), m).ok());
    auto w = Pc2Writer::Open(ShardPartPath(pc2, s), 5, 0.0f, 1.0f, false);
    ASSERT_TRUE(w.ok());
    const uint64_t n = frames < 0 ? m.frames.size() : uint64_t(frames);
    for (uint64_t f = m.frames.begin; f < m.frames.begin + n; ++f) ASSERT_TRUE(w->Append(FrameOf(f)).ok());
    ASSERT_TRUE(w->Close().ok());
  }

  fs::path dir_;
};

TEST_F(ShardFiles, ManifestRoundTripsAndMalformedOnesNameTheLine) {
  const ShardManifest m = ManifestOf(Shard{1, 4}, 10);
  const std::string path = Path("m.manifest");
  ASSERT_TRUE(WriteShardManifest(path, m).ok());
  auto back = ReadShardManifest(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job, m.job);
  EXPECT_EQ(back->shard.index, 1u);
  EXPECT_EQ(back->shard.count, 4u);
  EXPECT_EQ(back->frames.begin, 2u);
  EXPECT_EQ(back->frames.end, 5u);
  EXPECT_EQ(back->stem, "walk");
  EXPECT_TRUE(SameShardJob(*back, m, path).ok());
  ShardManifest other = m;
  other.job = std::string(64, 'b');
  EXPECT_THAT(std::string(SameShardJob(*back, other, path).message()), HasSubstr("started for another job"));

  EXPECT_TRUE(absl::IsNotFound(ReadShardManifest(Path("none")).status()));
  const std::string text = ReadBytes(path);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    std::ofstream(path, std::ios::trunc) << t;
    return std::string(ReadShardManifest(path).status().message());
  };
  EXPECT_THAT(with("frames 2 5", "frames 2 6"), HasSubstr("is frames [2, 5), not [2, 6)"));
  EXPECT_THAT(with("points 5", "points x"), HasSubstr(":6: points is not a number"));
  EXPECT_THAT(with("backend cpu", "backend tpu"), HasSubstr(":7: backend is not cpu, gpu or none"));
  EXPECT_THAT(with("stem walk\n", ""), HasSubstr("no \"stem\" line"));
  EXPECT_THAT(with("sinew-batch-shard 1", "POINTCACHE2"), HasSubstr(":1: first line"));
}

TEST_F(ShardFiles, MergeEqualsOneWriterAndRefusesGapsNamingTheFrames) {
  constexpr uint64_t kTotal = 11;
  {
    auto one = Pc2Writer::Open(Path("one.pc2"), 5, 0.0f, 1.0f, false);
    ASSERT_TRUE(one.ok());
    for (uint64_t f = 0; f < kTotal; ++f) ASSERT_TRUE(one->Append(FrameOf(f)).ok());
    ASSERT_TRUE(one->Close().ok());
  }
  const std::string pc2 = Path("out.pc2");
  WriteShard(pc2, Shard{0, 4}, kTotal);
  WriteShard(pc2, Shard{2, 4}, kTotal, 1);
  MergeOptions o;
  o.pc2 = pc2;
  auto merged = MergeShards(o);
  ASSERT_FALSE(merged.ok());
  EXPECT_THAT(std::string(merged.status().message()), HasSubstr("frames 2 to 4 (shard 1 of 4 has not run"));
  EXPECT_THAT(std::string(merged.status().message()), HasSubstr("frames 6 to 7 (shard 2 of 4: "));
  EXPECT_THAT(std::string(merged.status().message()), HasSubstr("holds 1 of its 3 frames"));
  EXPECT_THAT(std::string(merged.status().message()), HasSubstr("frames 8 to 10 (shard 3 of 4 has not run"));
  EXPECT_FALSE(fs::exists(pc2));

  WriteShard(pc2, Shard{1, 4}, kTotal);
  WriteShard(pc2, Shard{2, 4}, kTotal);
  WriteShard(pc2, Shard{3, 4}, kTotal);
  merged = MergeShards(o);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->frames, kTotal);
  EXPECT_EQ(merged->shards, 4u);
  EXPECT_EQ(ReadBytes(pc2), ReadBytes(Path("one.pc2")));

  // Stale manifests of another shard count make the count ambiguous until --shards says it.
  WriteShard(pc2, Shard{0, 2}, kTotal);
  EXPECT_THAT(std::string(MergeShards(o).status().message()), HasSubstr("manifests of shards of 2, 4 found"));
  o.shards = 4;
  EXPECT_TRUE(MergeShards(o).ok());
  // Shards that ran on different backends would not give one run's floats.
  ShardManifest gpu = ManifestOf(Shard{3, 4}, kTotal);
  gpu.backend = "gpu";
  ASSERT_TRUE(WriteShardManifest(ShardManifestPath(pc2, "", Shard{3, 4}), gpu).ok());
  EXPECT_THAT(std::string(MergeShards(o).status().message()),
              HasSubstr("shard 0 of 4 ran on the cpu, shard 3 of 4 on the gpu"));
}

TEST_F(ShardFiles, MergeOfAnObjSequenceNamesTheMissingFiles) {
  const std::string obj = Path("obj");
  fs::create_directories(obj);
  for (uint64_t i = 0; i < 2; ++i) ASSERT_TRUE(WriteShardManifest(ShardManifestPath("", obj, Shard{i, 2}), ManifestOf(Shard{i, 2}, 6)).ok());
  for (uint64_t f : {0, 1, 2, 5}) ASSERT_TRUE(WriteObjFrame(ObjFramePath(obj, "walk", f), FrameOf(f), {}).ok());
  MergeOptions o;
  o.obj_dir = obj;
  auto merged = MergeShards(o);
  ASSERT_FALSE(merged.ok());
  EXPECT_THAT(std::string(merged.status().message()), HasSubstr("OBJ frames 3 to 4 (shard 1 of 2: no " +
                                                               ObjFramePath(obj, "walk", 3) + " ...)"));
  for (uint64_t f : {3, 4}) ASSERT_TRUE(WriteObjFrame(ObjFramePath(obj, "walk", f), FrameOf(f), {}).ok());
  EXPECT_TRUE(MergeShards(o).ok());
}

}  // namespace
}  // namespace sinew::client
