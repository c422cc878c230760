// Issue 17's batch at scale: `sinew batch --shard I/N` (or --shard-from-env N with
// $JOB_COMPLETION_INDEX, as a Kubernetes Indexed Job sets it) against separate real servers, then
// `sinew merge-shards`: the merged .pc2 and OBJ sequence equal one unsharded run's byte for byte;
// a missing, incomplete or foreign shard is refused with the missing frames named, and a shard
// resumes like any batch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "tests/service/server_process.h"

namespace sinew::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kCharacter = "/usr/share/assimp/models/X/BCN_Epileptic.X";

class BatchShards : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kCharacter)) GTEST_SKIP() << "assimp-testmodels not installed";
    dir_ = fs::temp_directory_path() / ("sinew-shards-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // sinew batch of the character's clip at 30 frames/s (100 frames) with DQS.
  static std::vector<std::string> Batch(const ServerProcess& server, std::vector<std::string> extra) {
    std::vector<std::string> a = {SINEW_CLI_PATH, "--target", server.target(), "batch", kCharacter,
                                  "--method", "dqs", "--clip-fps", "30"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  static std::vector<std::string> Merge(std::vector<std::string> extra) {
    std::vector<std::string> a = {SINEW_CLI_PATH, "merge-shards"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  static std::string Bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Every file of a folder by name, with its bytes.
  static std::map<std::string, std::string> Folder(const fs::path& dir) {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(dir)) files[e.path().filename().string()] = Bytes(e.path().string());
    return files;
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(BatchShards, ThreeShardsOnThreeServersMergeToTheBytesOfOneRun) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(std::make_unique<ServerProcess>());
    ASSERT_TRUE(servers.back()->started());
  }
  std::string err;
  ASSERT_EQ(RunProcess(Batch(*servers[0], {"--pc2", Path("one.pc2"), "--obj", Path("one")}), nullptr, &err), 0) << err;

  // The three shards at once, each on its own server; shard 1 takes its index from the
  // environment as an Indexed Job's pod would.
  const std::string pc2 = Path("sharded/out.pc2"), obj = Path("sharded/obj");
  int codes[3] = {-1, -1, -1};
  std::string errs[3];
  std::vector<std::thread> runs;
  for (int i = 0; i < 3; ++i) {
    runs.emplace_back([&, i] {
      std::vector<std::string> argv = Batch(*servers[i], {"--pc2", pc2, "--obj", obj});
      if (i == 1) {
        argv.insert(argv.begin(), {"/usr/bin/env", "JOB_COMPLETION_INDEX=1"});
        argv.insert(argv.end(), {"--shard-from-env", "3"});
      } else {
        argv.insert(argv.end(), {"--shard", std::to_string(i) + "/3"});
      }
      codes[i] = RunProcess(argv, nullptr, &errs[i]);
    });
  }
  for (auto& t : runs) t.join();
  const char* ranges[3] = {"frames 0 to 32", "frames 33 to 65", "frames 66 to 99"};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(codes[i], 0) << errs[i];
    EXPECT_THAT(errs[i], HasSubstr("shard " + std::to_string(i) + " of 3: " + ranges[i])) << errs[i];
    EXPECT_TRUE(fs::exists(pc2 + ".shard-" + std::to_string(i) + "-of-3"));
    EXPECT_TRUE(fs::exists(pc2 + ".shard-" + std::to_string(i) + "-of-3.manifest"));
  }
  EXPECT_FALSE(fs::exists(pc2));  // nothing but parts until the merge

  std::string out;
  ASSERT_EQ(RunProcess(Merge({"--pc2", pc2, "--obj", obj}), &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("100 frames"));
  EXPECT_THAT(out, HasSubstr("from 3 shards"));
  const std::string one = Bytes(Path("one.pc2")), merged = Bytes(pc2);
  ASSERT_EQ(merged.size(), one.size());
  EXPECT_TRUE(merged == one) << "merged cache differs from the single run's";
  const auto one_obj = Folder(Path("one")), sharded_obj = Folder(obj);
  EXPECT_EQ(one_obj.size(), 101u);  // 100 frames and the job's record (BCN_Epileptic.job), merged too
  EXPECT_TRUE(one_obj == sharded_obj) << "the OBJ sequences differ";
  for (auto& s : servers) EXPECT_EQ(s->Terminate(), 0);
}

// With --obj alone each shard locks its own outputs (DIR/STEM.shard-I-of-N.lock), as a --pc2
// shard locks its part: while shard 0 runs (its lock held here), shard 1 of the same clip into the
// same folder runs, and a second shard 0 is refused. Until 2026-12-07 every shard locked
// DIR/STEM.lock and the shards of one clip refused each other.
TEST_F(BatchShards, ObjOnlyShardsOfOneClipRunAtOnce) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const std::string obj = Path("obj");
  fs::create_directories(obj);
  const std::string lock0 = obj + "/BCN_Epileptic.shard-0-of-2.lock";
  const int held = ::open(lock0.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // shard 0, still going
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
  std::string err;
  EXPECT_EQ(RunProcess(Batch(server, {"--obj", obj, "--shard", "1/2"}), nullptr, &err), 0) << err;
  EXPECT_NE(RunProcess(Batch(server, {"--obj", obj, "--shard", "0/2"}), nullptr, &err), 0);
  EXPECT_THAT(err, HasSubstr(lock0 + ": another run is writing these outputs (locked)")) << err;
  ::close(held);
  EXPECT_EQ(RunProcess(Batch(server, {"--obj", obj, "--shard", "0/2"}), nullptr, &err), 0) << err;
  EXPECT_EQ(RunProcess(Merge({"--obj", obj}), nullptr, &err), 0) << err;
  size_t frames = 0;
  for (const auto& e : fs::directory_iterator(obj)) frames += e.path().extension() == ".obj";
  EXPECT_EQ(frames, 100u);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(BatchShards, MergeRefusesMissingIncompleteAndForeignShardsAndNamesTheFrames) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const std::string pc2 = Path("out.pc2");
  std::string out, err;

  // Bad shard flags fail before any work.
  EXPECT_EQ(RunProcess(Batch(server, {"--pc2", pc2, "--shard", "3/3"}), nullptr, &err), 2);
  EXPECT_THAT(err, HasSubstr("--shard: index 3 is not below the shard count 3"));
  EXPECT_EQ(RunProcess({"/usr/bin/env", "-u", "JOB_COMPLETION_INDEX", SINEW_CLI_PATH, "--target", server.target(),
                        "batch", kCharacter, "--pc2", pc2, "--shard-from-env", "3"}, nullptr, &err), 2);
  EXPECT_THAT(err, HasSubstr("$JOB_COMPLETION_INDEX is not set"));
  EXPECT_EQ(RunProcess(Merge({"--pc2", pc2}), nullptr, &err), 1);
  EXPECT_THAT(err, HasSubstr("no shards found"));

  // Shard 0 complete, shard 1 stopped after 5 of its 33 frames, shard 2 never run.
  ASSERT_EQ(RunProcess(Batch(server, {"--pc2", pc2, "--shard", "0/3"}), nullptr, &err), 0) << err;
  ASSERT_EQ(RunProcess(Batch(server, {"--pc2", pc2, "--shard", "1/3", "--max-frames", "5"}), nullptr, &err), 0) << err;
  EXPECT_EQ(RunProcess(Merge({"--pc2", pc2}), nullptr, &err), 1);
  EXPECT_THAT(err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(err, HasSubstr("frames 38 to 65 (shard 1 of 3: " + pc2 + ".shard-1-of-3 holds 5 of its 33 frames)"));
  EXPECT_THAT(err, HasSubstr("frames 66 to 99 (shard 2 of 3 has not run"));
  EXPECT_FALSE(fs::exists(pc2));

  // Shard 2 of another job (another clip rate): refused as such, and its batch will not resume
  // it as this job's.
  ASSERT_EQ(RunProcess(Batch(server, {"--pc2", pc2, "--shard", "2/3", "--clip-fps", "24"}), nullptr, &err), 0) << err;
  EXPECT_EQ(RunProcess(Merge({"--pc2", pc2}), nullptr, &err), 1);
  EXPECT_THAT(err, HasSubstr("are shards of different jobs"));
  EXPECT_EQ(RunProcess(Batch(server, {"--pc2", pc2, "--shard", "2/3"}), nullptr, &err), 1);
  EXPECT_THAT(err, HasSubstr("this shard was started for another job"));
  ASSERT_EQ(RunProcess(Batch(server, {"--pc2", pc2, "--shard", "2/3", "--no-resume"}), nullptr, &err), 0) << err;
  EXPECT_EQ(RunProcess(Merge({"--pc2", pc2}), nullptr, &err), 1);
  EXPECT_THAT(err, HasSubstr("frames 38 to 65"));
  EXPECT_THAT(err, Not(HasSubstr("shard 2 of 3")));

  // Shard 1 resumes where it stopped; then the merge equals one run.
  ASSERT_EQ(RunProcess(Batch(server, {"--pc2", pc2, "--shard", "1/3"}), nullptr, &err), 0) << err;
  EXPECT_THAT(err, HasSubstr("resuming at frame 38"));
  ASSERT_EQ(RunProcess(Merge({"--pc2", pc2, "--shards", "3"}), &out, &err), 0) << err;
  ASSERT_EQ(RunProcess(Batch(server, {"--pc2", Path("one.pc2")}), nullptr, &err), 0) << err;
  EXPECT_TRUE(Bytes(pc2) == Bytes(Path("one.pc2")));

  // A part cut short after the merge (a lost file) is refused again, naming its frames.
  const uint64_t frame_bytes = (fs::file_size(pc2 + ".shard-1-of-3") - 32) / 33;
  fs::resize_file(pc2 + ".shard-0-of-3", 32 + 7 * frame_bytes);
  EXPECT_EQ(RunProcess(Merge({"--pc2", pc2}), nullptr, &err), 1);
  EXPECT_THAT(err, HasSubstr("frames 7 to 32 (shard 0 of 3"));
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace sinew::testing
