// `sinew play FILE --snapshot`: through a real server, BCN_Epileptic under LBS and DQS drawn into
// a PNG, read back here with zlib: the grid's size, the mesh drawn in every cell, and with
// --snapshot-diff the DQS row tinted where it left LBS's frame while the LBS row is not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "clients/lib/client.h"
#include "tests/service/server_process.h"
#include "tests/service/test_util.h"

namespace sinew::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kCharacter = "/usr/share/assimp/models/X/BCN_Epileptic.X";

struct Rgb {
  int width = 0, height = 0;
  std::string pixels;  // 3 bytes a pixel
  const uint8_t* At(int x, int y) const { return reinterpret_cast<const uint8_t*>(&pixels[3 * (size_t(y) * width + x)]); }
};

// The PNGs sinew writes: 8-bit RGB, filter 0 on every row.
Rgb ReadPng(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string png((std::istreambuf_iterator<char>(in)), {});
  auto be = [&](size_t p) {
    return uint32_t(uint8_t(png[p])) << 24 | uint32_t(uint8_t(png[p + 1])) << 16 | uint32_t(uint8_t(png[p + 2])) << 8 |
           uint8_t(png[p + 3]);
  };
  Rgb img;
  std::string idat;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t len = be(at);
    const std::string type = png.substr(at + 4, 4);
    if (type == "IHDR") img.width = int(be(at + 8)), img.height = int(be(at + 12));
    if (type == "IDAT") idat += png.substr(at + 8, len);
    at += 12 + len;
  }
  std::string raw(size_t(img.height) * (1 + 3 * size_t(img.width)), '\0');
  uLongf size = raw.size();
  if (uncompress(reinterpret_cast<Bytef*>(raw.data()), &size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      size != raw.size()) {
    return {};
  }
  for (int y = 0; y < img.height; ++y) img.pixels += raw.substr(size_t(y) * (1 + 3 * img.width) + 1, 3 * size_t(img.width));
  return img;
}

TEST(SnapshotCli, MethodsDrawnInRowsAndTheirDifferenceTinted) {
  if (!fs::exists(kCharacter)) GTEST_SKIP() << "assimp-testmodels not installed";
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const std::string png = (fs::temp_directory_path() / ("sinew-snap-" + std::to_string(getpid()) + ".png")).string();
  std::string out, err;
  ASSERT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", kCharacter, "--method", "lbs,dqs", "--clip-fps", "30",
                        "--frames", "64", "--snapshot", png, "--snapshot-frames", "5,37,62", "--snapshot-size", "200x150",
                        "--snapshot-diff", "0.01"},
                       &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("2 methods x 3 frames, 600x300 pixels"));
  EXPECT_THAT(out, HasSubstr("dqs vs lbs, farthest vertex apart (of the rest diagonal): frame 5 "));
  const Rgb img = ReadPng(png);
  fs::remove(png);
  ASSERT_EQ(img.width, 600);
  ASSERT_EQ(img.height, 300);
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) {
      size_t drawn = 0, red = 0;
      for (int y = r * 150 + 26; y < (r + 1) * 150; ++y) {
        for (int x = c * 200; x < (c + 1) * 200; ++x) {
          const uint8_t* p = img.At(x, y);
          drawn += !(p[0] == 246 && p[1] == 246 && p[2] == 244);
          red += p[0] > p[1] + 40;
        }
      }
      EXPECT_GT(drawn, 200 * 124 / 50) << "row " << r << " column " << c << ": mesh drawn";
      if (r == 0) {
        EXPECT_EQ(red, 0u) << "column " << c << ": the first row is the reference";
      }
      if (r == 1 && c > 0) {
        EXPECT_GT(red, 20u) << "column " << c << ": DQS differs from LBS at bent joints";
      }
    }
  }
  // Bad flags are refused before anything is played.
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", kCharacter, "--frames", "10", "--snapshot", png,
                        "--snapshot-frames", "3,10"},
                       &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("--snapshot-frames: '10' is not a frame in [0, 10)"));
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", kCharacter, "--snapshot", png, "--snapshot-view", "+x,+x"},
                       &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("--snapshot-view"));
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", kCharacter, "--snapshot",
                        "/nonexistent-sinew-dir/x.png"},
                       &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("--snapshot: the folder '/nonexistent-sinew-dir' does not exist"));
  EXPECT_FALSE(fs::exists(png));
  EXPECT_EQ(server.Terminate(), 0);
}

// A method whose session the server refuses does not end `play`: the others play, the snapshot
// is written with its row blank, the comparison says "n/a" for frames not drawn (it printed
// 0.00 %, "identical", until 2026-12-03), and the exit status is 1. Until then the run ended at the
// refusal, after the methods before it had played, with no snapshot.
TEST(SnapshotCli, AMethodWithoutASessionLeavesTheOthersPlayingAndItsRowBlank) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const std::string png = (fs::temp_directory_path() / ("sinew-snap-blank-" + std::to_string(getpid()) + ".png")).string();
  std::string out, err;
  // The limb has 4 joints: joint 99 is refused by the server, for the implicit method only.
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", "--method", "lbs,implicit",
                        "--joint-operator", "99=bulge", "--frames", "4", "--vertices", "2000", "--snapshot", png,
                        "--snapshot-frames", "1,2", "--snapshot-size", "100x100"},
                       &out, &err),
            1)
      << err;
  EXPECT_THAT(out, HasSubstr("lbs (cpu): 4 frames"));
  EXPECT_THAT(err, HasSubstr("implicit: no session: INVALID_ARGUMENT"));
  EXPECT_THAT(err, HasSubstr("joints[0].joint"));
  EXPECT_THAT(out, HasSubstr("2 methods x 2 frames, 200x200 pixels"));
  EXPECT_THAT(out, HasSubstr("implicit vs lbs, farthest vertex apart (of the rest diagonal): frame 1 n/a (not drawn), "
                             "frame 2 n/a (not drawn)"));
  const Rgb img = ReadPng(png);
  fs::remove(png);
  ASSERT_EQ(img.width, 200);
  ASSERT_EQ(img.height, 200);
  size_t drawn[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    for (int y = r * 100 + 26; y < (r + 1) * 100; ++y) {
      for (int x = 0; x < 200; ++x) {
        const uint8_t* p = img.At(x, y);
        drawn[r] += !(p[0] == 246 && p[1] == 246 && p[2] == 244);
      }
    }
  }
  EXPECT_GT(drawn[0], 200u) << "the LBS row is drawn";
  EXPECT_EQ(drawn[1], 0u) << "the row of the method without a session is blank";

  // Flags refused before anything plays (exit 2, the flag named).
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", "--fps", "1e-9", "--frames", "2"}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("--fps: 1e-09; expected 0 (as fast as answered) or at least 0.001"));
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", "--method", "lbs,dqs", "--snapshot", png,
                        "--snapshot-frames", "0,1,2,3,4,5,6,7,8,9", "--snapshot-size", "4096x4096", "--frames", "10"},
                       &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("--snapshot: 2 rows x 10 columns of 4096x4096 pixels are 335 megapixels; at most 134"));
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", "--point-set", "100", "--frames", "2"}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("--point-set: makes an asset's character into points: play FILE"));
  // A method flag that no method of --method takes (it was ignored, unchecked).
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", "--method", "lbs,dqs", "--blend-weight", "7",
                        "--frames", "2"},
                       &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("--blend-weight: no method of --method is blend"));
  EXPECT_FALSE(fs::exists(png));
  EXPECT_EQ(server.Terminate(), 0);
}

// `play`'s latency and frames/s are those of the frames answered without error: a rig too large
// for half floats fails every f16 frame at once (OUT_OF_RANGE), and play reports no latency and
// no rate for them, where until 2026-12-07 their instant refusals were its p50 and its frames/s.
TEST(PlayCli, FailedFramesAreNotInTheLatencyOrTheRate) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  LimbOptions o = LimbOf(2000);
  o.length = 2e5f;  // coordinates past half float's 65 504
  client::Client c(server.target());
  auto up = c.UploadRig(client::RigToProto(MakeLimb(o)));
  ASSERT_TRUE(up.ok()) << up.status();
  std::string out, err;
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", "--rig", up->rig_id(), "--encoding", "f16",
                        "--frames", "5", "--json"},
                       &out, &err),
            1)
      << out << err;
  EXPECT_THAT(err, HasSubstr("OUT_OF_RANGE")) << err;
  EXPECT_THAT(out, HasSubstr("\"errors\":5")) << out;
  EXPECT_THAT(out, HasSubstr("\"frames_per_s\":0.00,\"p50_ms\":0.000,\"p99_ms\":0.000,\"max_ms\":0.000")) << out;
  EXPECT_EQ(server.Terminate(), 0);
}

// A bad flag of play or session create is named at once, whether or not a server answers (until
// 2026-12-07 both waited 10 s to connect first, and then reported only that they could not).
TEST(PlayCli, BadFlagsAreNamedBeforeConnecting) {
  const std::string nobody = "127.0.0.1:1";  // nothing listens there
  std::string out, err;
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", nobody, "play", "--frames", "-1"}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("--frames: '-1'"));
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", nobody, "session", "create", "--rig", "x", "--encoding", "bogus"},
                       &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("--encoding"));
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", nobody, "session", "create", "--rig", "x", "--blend-weight", "0.5"},
                       &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("--blend-weight"));
  // Before the asset is loaded too (here it does not exist: a load first fails on that instead):
  // batch's session flags and --quality with --point-set, play's --snapshot flags (until
  // 2026-12-07 checked after the load, the sampling and the upload).
  const std::string missing = "/nonexistent/character.fbx";
  const std::vector<std::vector<std::string>> cases = {
      {"batch", missing, "--pc2", "/tmp/x.pc2", "--backend", "gpux"},
      {"batch", missing, "--pc2", "/tmp/x.pc2", "--encoding", "bogus"},
      {"batch", missing, "--gltf", "/tmp/x.glb", "--quality", "--point-set", "100", "--method", "baseline"},
      {"play", missing, "--snapshot", "/tmp/x.png", "--snapshot-size", "5x5"},
      {"play", missing, "--snapshot", "/nonexistent/x.png"},
      {"play", missing, "--snapshot", "/tmp/x.png", "--point-set", "100", "--method", "baseline"},
  };
  // The error line (a usage error prints the whole help after it, every flag's name included).
  const std::vector<std::string> named = {"sinew: --backend", "sinew: --encoding", "sinew: batch --quality: measures a mesh",
                                          "sinew: --snapshot-size", "sinew: --snapshot: the folder",
                                          "sinew: --snapshot: draws a mesh"};
  for (size_t k = 0; k < cases.size(); ++k) {
    std::vector<std::string> argv = {SINEW_CLI_PATH, "--target", nobody};
    argv.insert(argv.end(), cases[k].begin(), cases[k].end());
    EXPECT_EQ(RunProcess(argv, &out, &err), 2) << cases[k][0] << " " << named[k] << ": " << err;
    EXPECT_THAT(err, HasSubstr(named[k]));
    EXPECT_THAT(err, Not(HasSubstr(missing)));
  }
}

// play --json prints one object per method even when a stream breaks: the broken method's with
// its error and each one not played after it (until 2026-12-07 the output stopped short, and a
// consumer counting objects got fewer than the methods). The stream breaks when the server is
// stopped with no drain time, once the first method's frames are flowing.
TEST(PlayCli, ABrokenStreamStillGivesEveryMethodItsJsonObject) {
  ServerProcess server({"--drain-timeout", "0"});
  ASSERT_TRUE(server.started());
  const fs::path dir = fs::temp_directory_path() / ("sinew-play-broken-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string json = (dir / "out.json").string(), errors = (dir / "err.txt").string();
  const pid_t play = SpawnProcess({"/bin/sh", "-c",
                                   std::string("exec ") + SINEW_CLI_PATH + " --target " + server.target() +
                                       " play --method lbs,dqs --json --fps 20 --frames 100000 --vertices 500 > " +
                                       json + " 2> " + errors});
  ASSERT_GE(WaitForMetric(server.metrics_port(), "sinew_frames_total{backend=\"cpu\",method=\"lbs\"}", 2), 2);
  (void)server.Terminate();
  EXPECT_EQ(WaitProcess(play), 1);
  std::ifstream in(json);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u) << "stdout: " << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0], HasSubstr("{\"method\":\"lbs\",\"error\":"));
  EXPECT_THAT(lines[1], HasSubstr("{\"method\":\"dqs\",\"error\":\"not played"));
  fs::remove_all(dir);
}

// --point-set asking for more points than the server takes in a rig is refused before they are
// sampled, naming both counts (until 2026-12-07 the points were made, up to 50 million, and the
// upload then failed).
TEST(PointSetCli, MorePointsThanTheServerTakesAreRefusedBeforeSampling) {
  if (!fs::exists(kCharacter)) GTEST_SKIP() << "assimp-testmodels not installed";
  ServerProcess server({"--max-vertices", "1000"});
  ASSERT_TRUE(server.started());
  std::string out, err;
  EXPECT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", kCharacter, "--point-set", "5000",
                        "--method", "lbs", "--frames", "1"},
                       &out, &err),
            1) << err;
  EXPECT_THAT(err, HasSubstr("--point-set: 5000 points; the server takes rigs of at most 1000 vertices"));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("a sphere-mesh of"))) << "the points were sampled";
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace sinew::testing
