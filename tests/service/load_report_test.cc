// `sinew-load --report`: against a real server, the HTML page is written and holds the figures
// sinew-load printed, one histogram sample per answered frame, and nothing external.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "tests/service/server_process.h"

namespace sinew::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(LoadReportCli, PageHoldsThePrintedFigures) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const std::string path = (fs::temp_directory_path() / ("sinew-load-" + std::to_string(getpid()) + ".html")).string();
  std::string out, err;
  ASSERT_EQ(RunProcess({SINEW_LOAD_PATH, "--target", server.target(), "--sessions", "3", "--fps", "40", "--duration", "1",
                        "--vertices", "2000", "--report", path},
                       &out, &err),
            0)
      << out << err;
  std::ifstream in(path);
  const std::string html((std::istreambuf_iterator<char>(in)), {});
  fs::remove(path);
  ASSERT_FALSE(html.empty());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // Every row of the printed table, value and note, is a row of the page's figures.
  const std::regex row(R"(^  (\S.*?\S) {2,}(\S+)(   \(.*\))?$)");
  size_t rows = 0;
  uint64_t frames_ok = 0, not_sent = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, row) || m[1] == "metric") continue;
    ++rows;
    EXPECT_THAT(html, HasSubstr("<tr><td>" + m[1].str() + "</td><td>" + m[2].str() + m[3].str() + "</td></tr>")) << line;
    if (m[1] == "frames ok") frames_ok = std::stoull(m[2]);
    if (m[1] == "frames not sent") not_sent = std::stoull(m[2]);
  }
  EXPECT_GE(rows, 10u) << out;
  EXPECT_GT(frames_ok, 0u);
  EXPECT_THAT(html, HasSubstr("<p>" + out.substr(0, out.find('\n')) + "</p>"));  // the run's line
  // No errors: one sample per frame answered, and one per frame the run ended before sending (a
  // loaded machine leaves some: they count, with their wait so far).
  EXPECT_THAT(html, HasSubstr("data-samples=\"" + std::to_string(frames_ok + not_sent) + "\""));
  EXPECT_THAT(html, HasSubstr("data-windows=\"4\""));
  // The windows' frame counts add up to the frames answered and those never sent.
  const std::regex window(R"(<tr><td>[0-9.]+–[0-9.]+</td><td>(\d+)</td>)");
  uint64_t in_windows = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), window); it != std::sregex_iterator(); ++it) {
    in_windows += std::stoull((*it)[1]);
  }
  EXPECT_EQ(in_windows, frames_ok + not_sent);
  for (const char* external : {"<script", "src=", "href=", "http:", "https:"}) EXPECT_THAT(html, Not(HasSubstr(external)));
  EXPECT_EQ(server.Terminate(), 0);
}

// `--json -` leaves stdout to the JSON line alone, the table going to stderr (until 2026-12-01
// the title and the table came first on stdout, and bench/gpu_concurrency.sh kept the last line).
TEST(LoadReportCli, JsonOnStdoutIsTheOnlyThingThere) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  std::string out, err;
  ASSERT_EQ(RunProcess({SINEW_LOAD_PATH, "--target", server.target(), "--sessions", "2", "--fps", "20", "--duration",
                        "0.5", "--vertices", "1000", "--json", "-"},
                       &out, &err),
            0)
      << out << err;
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.front(), '{') << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "more than one line on stdout:\n" << out;
  EXPECT_THAT(out, HasSubstr("\"frames_ok\":"));
  EXPECT_THAT(err, HasSubstr("achieved frames/s"));
  EXPECT_EQ(server.Terminate(), 0);
}

// Unpaced (--fps 0), the achieved rate is the frames answered over the run's time, from the
// sessions' common start to the last answer, which is at least --duration: until 2026-12-03 the
// streams started sending before that start and the count was divided by at most --duration,
// which overstated the rate by a frame's latency over the duration.
// A report that cannot be written to standard output fails the run (exit 1, said on stderr),
// as sinew's: until 2026-12-07 sinew-load exited 0.
TEST(LoadReportCli, AReportStandardOutputCannotTakeFailsTheRun) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  std::string err;
  const std::string load = std::string(SINEW_LOAD_PATH) + " --target " + server.target() +
                           " --sessions 1 --fps 0 --duration 0.2 --vertices 500 --json - > /dev/full";
  EXPECT_EQ(RunProcess({"/bin/sh", "-c", load}, nullptr, &err), 1) << err;
  EXPECT_THAT(err, HasSubstr("sinew-load: writing standard output failed"));
  EXPECT_EQ(server.Terminate(), 0);
}

TEST(LoadReportCli, TheAchievedRateIsTheAnsweredFramesOverTheRunsTime) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  std::string out, err;
  ASSERT_EQ(RunProcess({SINEW_LOAD_PATH, "--target", server.target(), "--sessions", "2", "--fps", "0", "--duration",
                        "0.3", "--vertices", "1000", "--json", "-"},
                       &out, &err),
            0)
      << out << err;
  const std::regex field(R"re("(achieved_frames_per_s|elapsed_s|frames_ok)":([0-9.]+))re");
  std::map<std::string, double> got;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), field); it != std::sregex_iterator(); ++it) {
    got[(*it)[1]] = std::stod((*it)[2]);
  }
  ASSERT_EQ(got.size(), 3u) << out;
  EXPECT_GT(got["frames_ok"], 0) << out;
  EXPECT_GE(got["elapsed_s"], 0.3) << out;
  // The JSON rounds the rate to 0.1 and the time to 1e-4 s.
  EXPECT_NEAR(got["achieved_frames_per_s"], got["frames_ok"] / got["elapsed_s"],
              0.06 + got["frames_ok"] / got["elapsed_s"] * 1e-3)
      << out;
  // Paced, the frames scheduled before the end (at 0, 0.25, 0.5 and 0.75 s here) are counted over
  // the run's length at least: never above the target (until 2026-12-07 over the time to the last
  // answer, about 0.75 s: 5.3 frames/s of 4).
  out.clear();
  ASSERT_EQ(RunProcess({SINEW_LOAD_PATH, "--target", server.target(), "--sessions", "1", "--fps", "4", "--duration", "1",
                        "--vertices", "1000", "--json", "-"},
                       &out, &err),
            0)
      << out << err;
  got.clear();
  for (auto it = std::sregex_iterator(out.begin(), out.end(), field); it != std::sregex_iterator(); ++it) {
    got[(*it)[1]] = std::stod((*it)[2]);
  }
  ASSERT_EQ(got.size(), 3u) << out;
  EXPECT_LE(got["frames_ok"], 4) << out;
  EXPECT_LE(got["achieved_frames_per_s"], 4.0) << out;
  EXPECT_NEAR(got["achieved_frames_per_s"], got["frames_ok"] / std::max(got["elapsed_s"], 1.0), 0.06) << out;
  EXPECT_EQ(server.Terminate(), 0);
}

// Paced one frame at a time, every frame scheduled before the end is accounted for: answered,
// shed, failed, or not sent because the server's answers came too late (their wait so far in the
// latencies). Until 2026-12-07 the frames not sent were counted nowhere, and an overloaded
// server's p99 read low (a review: 1 000 frames scheduled, 474 counted, 0 errors). A limb of
// 200 000 vertices on one worker at 1 000 frames/s is behind on any machine here; the count
// holds whether or not it is.
TEST(LoadReportCli, EveryScheduledFrameIsCountedWhenTheServerFallsBehind) {
  ServerProcess server({"--worker-threads", "1", "--max-queue-ms", "0"});
  ASSERT_TRUE(server.started());
  std::string out, err;
  ASSERT_EQ(RunProcess({SINEW_LOAD_PATH, "--target", server.target(), "--sessions", "1", "--fps", "1000", "--duration",
                        "1", "--vertices", "200000", "--json", "-"},
                       &out, &err),
            0)
      << out << err;
  const std::regex field(R"re("(frames_ok|errors|frames_shed|frames_skipped|frames_not_sent)":([0-9]+))re");
  std::map<std::string, double> got;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), field); it != std::sregex_iterator(); ++it) {
    got[(*it)[1]] = std::stod((*it)[2]);
  }
  ASSERT_EQ(got.size(), 5u) << out;
  EXPECT_EQ(got["errors"], 0) << out;
  EXPECT_EQ(got["frames_ok"] + got["frames_shed"] + got["frames_not_sent"], 1000) << out;
  std::printf("%s", out.c_str());
  EXPECT_EQ(server.Terminate(), 0);
}

// Ctrl-C on a long run stops sending, writes the report over what ran and closes the sessions
// (until 2026-12-03 it closed them and exited without a report: a day's soak interrupted left
// nothing). Exit status 128 + SIGINT; the JSON says it was interrupted.
TEST(LoadReportCli, AnInterruptedRunStillWritesItsReportAndClosesItsSessions) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const std::string json = (fs::temp_directory_path() / ("sinew-load-int-" + std::to_string(getpid()) + ".json")).string();
  const std::string html = json + ".html";
  fs::remove(json);
  fs::remove(html);
  const pid_t pid = SpawnProcess({SINEW_LOAD_PATH, "--target", server.target(), "--sessions", "2", "--fps", "20",
                                  "--duration", "3600", "--vertices", "1000", "--json", json, "--report", html});
  ASSERT_GT(pid, 0);
  auto metric = [&](const std::string& name) { return MetricValue(HttpGet(server.metrics_port(), "/metrics"), name); };
  ASSERT_GE(WaitForMetric(server.metrics_port(), "sinew_frames_total{backend=\"cpu\",method=\"lbs\"}", 4), 4)
      << "sinew-load had no frames answered within a minute";
  ASSERT_EQ(kill(pid, SIGINT), 0);
  EXPECT_EQ(WaitProcess(pid), 128 + SIGINT);
  std::ifstream in(json);
  const std::string got((std::istreambuf_iterator<char>(in)), {});
  fs::remove(json);
  EXPECT_THAT(got, HasSubstr("\"interrupted\":true")) << got;
  const std::regex ok(R"re("frames_ok":([0-9]+))re");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(got, m, ok)) << got;
  EXPECT_GE(std::stoull(m[1]), 4u) << got;
  EXPECT_THAT(got, HasSubstr("\"errors\":0,")) << got;
  // The report's windows span the time that ran, not --duration's hour (which drew every answer
  // into the first of 120 half-minute windows, the other 119 "no answers"). The run's end takes
  // in its streams' close, so the last windows may have none: far fewer than 119 either way.
  std::ifstream report_in(html);
  const std::string report((std::istreambuf_iterator<char>(report_in)), {});
  fs::remove(html);
  ASSERT_THAT(report, HasSubstr("sinew-load report"));
  size_t empty_windows = 0;
  for (size_t at = report.find("no answers"); at != std::string::npos; at = report.find("no answers", at + 1)) ++empty_windows;
  EXPECT_LT(empty_windows, 60u) << "the report's windows span --duration, not the time that ran";
  EXPECT_EQ(metric("sinew_sessions"), 0) << "the interrupted run left sessions open";
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace sinew::testing
