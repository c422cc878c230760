// The client programs' flags (clients/lib/args.h).
#include "clients/lib/args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sinew::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

bool Parse(Args& args, std::vector<std::string> words) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return args.Parse(static_cast<int>(argv.size()), argv.data(), 0);
}

Args Declared() {
  Args args;
  args.Flag("snapshot-view", "VIEW,UP", "auto", "camera axes")
      .Flag("fps", "F", "0", "rate")
      .Flag("unary", "", "", "a switch");
  return args;
}

// A value that starts with '-' belongs to its flag whether written `--flag VALUE` or
// `--flag=VALUE`. Until 2026-12-01 CLI11 read `--snapshot-view -y,+z` as a short option "-y,+z"
// and refused the command for a missing value, though the help shows signed axes.
TEST(Args, AValueStartingWithADashIsItsFlagsValue) {
  Args spaced = Declared();
  ASSERT_TRUE(Parse(spaced, {"play", "--snapshot-view", "-y,+z", "--fps", "-1", "file.fbx"})) << spaced.error();
  EXPECT_EQ(spaced.Get("snapshot-view"), "-y,+z");
  EXPECT_EQ(spaced.Get("fps"), "-1");
  EXPECT_THAT(spaced.positional(), ElementsAre("play", "file.fbx"));
  double fps = 0;
  EXPECT_FALSE(spaced.GetDouble("fps", &fps, 0, 100)) << "a negative rate is still refused, as a value";

  Args joined = Declared();
  ASSERT_TRUE(Parse(joined, {"play", "--snapshot-view=-x,+y"})) << joined.error();
  EXPECT_EQ(joined.Get("snapshot-view"), "-x,+y");

  // Unknown flags stay errors.
  Args unknown = Declared();
  EXPECT_FALSE(Parse(unknown, {"play", "--bogus", "-1"}));
  EXPECT_THAT(unknown.error(), HasSubstr("bogus"));
}

// Integers are decimal and whole: CLI11's cast read a leading 0 as octal and 0x as hex, so a
// zero-padded --max-frames 000500 meant 320 frames and --key-interval 08 was "not an integer"
// (until 2026-12-03).
TEST(Args, IntegersAreDecimalWhateverTheirLeadingZeros) {
  const auto get = [](const std::string& value, long long* out) {
    Args args;
    args.Flag("frames", "N", "0", "frames");
    return Parse(args, {"play", "--frames", value}) && args.GetInt("frames", out, -1000, 1000);
  };
  long long n = 0;
  ASSERT_TRUE(get("000500", &n));
  EXPECT_EQ(n, 500);
  ASSERT_TRUE(get("08", &n));
  EXPECT_EQ(n, 8);
  ASSERT_TRUE(get("-12", &n));
  EXPECT_EQ(n, -12);
  for (const char* refused : {"0x100", "12abc", "", " 5", "1e3", "1001"}) {
    EXPECT_FALSE(get(refused, &n)) << refused;
  }
  Args args;
  args.Flag("frames", "N", "0", "frames");
  ASSERT_TRUE(Parse(args, {"play", "--frames", "0x10"}));
  EXPECT_FALSE(args.GetInt("frames", &n, 0, 100));
  EXPECT_THAT(args.error(), HasSubstr("--frames: '0x10' is not an integer in [0, 100]"));
}

}  // namespace
}  // namespace sinew::client
