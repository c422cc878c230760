// Issue 17's compose check without Docker: Debian's real Prometheus runs deploy/prometheus.yml
// (its targets pointed at loopback, its interval at 1 s) against a real sinew-server, and its
// HTTP API reports the frames this test drove. The committed file also passes `promtool check
// config`. Skips, saying so, where the prometheus package is not installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/service/server_process.h"
#include "tests/service/test_util.h"

namespace sinew::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kPromtool[] = "/usr/bin/promtool";

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~') {
      out += char(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    }
  }
  return out;
}

// The value of an instant query that returns one series; nullopt while it returns none (or
// Prometheus does not answer yet).
std::optional<double> Query(int port, const std::string& promql, std::string* body = nullptr) {
  const std::string answer = HttpGet(port, "/api/v1/query?query=" + UrlEncode(promql));
  if (body) *body = answer;
  static const std::regex value_re(R"re("value":\[[0-9.e+]+,"([^"]+)"\])re");
  std::smatch m;
  if (answer.find("\"status\":\"success\"") == std::string::npos || !std::regex_search(answer, m, value_re)) {
    return std::nullopt;
  }
  return std::stod(m[1]);
}

// Polls `promql` until it equals `want` (or 60 s pass, then fails the test): Prometheus sees the
// server's counters only at its next scrape. A value above `want` fails at once.
void ExpectEventually(int port, const std::string& promql, double want) {
  std::optional<double> v;
  std::string body;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    v = Query(port, promql, &body);
    if (v && *v == want) return;
    ASSERT_FALSE(v && *v > want) << promql << " = " << *v << ", more than the " << want << " driven";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ADD_FAILURE() << promql << ": wanted " << want << ", last answer " << (v ? std::to_string(*v) : "none") << ": "
                << body.substr(0, 500);
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t n = 0;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()), ++n) {
    s.replace(at, from.size(), to);
  }
  EXPECT_GT(n, 0u) << "deploy/prometheus.yml no longer holds \"" << from << "\"";
  return s;
}

TEST(Prometheus, ScrapesAServerWithTheDeployConfigAndCountsTheFramesDriven) {
  if (!fs::exists(kPrometheus)) {
    GTEST_SKIP() << "no " << kPrometheus << " (Debian's prometheus package; scripts/install-deps.sh installs it)";
  }
  const std::string deploy_config = std::string(SINEW_SOURCE_DIR) + "/deploy/prometheus.yml";
  if (fs::exists(kPromtool)) {
    std::string out, err;
    EXPECT_EQ(RunProcess({kPromtool, "check", "config", deploy_config}, &out, &err), 0) << out << err;
  }

  ServerProcess server;
  ASSERT_TRUE(server.started());
  const fs::path dir = fs::temp_directory_path() / ("sinew-prometheus-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "data");
  // The committed file with its compose names replaced: the CPU target is the real server, the
  // GPU target (absent without compose's gpu profile) a loopback port nothing listens on.
  std::string config;
  {
    std::ifstream in(deploy_config);
    config.assign(std::istreambuf_iterator<char>(in), {});
  }
  config = Replace(config, "sinew-server:9464", "127.0.0.1:" + std::to_string(server.metrics_port()));
  const RefusingPort absent_gpu;
  ASSERT_GT(absent_gpu.port(), 0);
  config = Replace(config, "sinew-server-gpu:9464", "127.0.0.1:" + std::to_string(absent_gpu.port()));
  config = Replace(config, "15s", "1s");
  std::ofstream(dir / "prometheus.yml") << config;

  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const pid_t prometheus = SpawnProcess({kPrometheus, "--config.file=" + (dir / "prometheus.yml").string(),
                                         "--storage.tsdb.path=" + (dir / "data").string(),
                                         "--web.listen-address=127.0.0.1:" + std::to_string(port),
                                         "--log.level=error"});
  ASSERT_GT(prometheus, 0);
  struct Stop {  // however the test ends: no Prometheus left running, no files left behind
    pid_t pid;
    fs::path dir;
    ~Stop() {
      if (pid > 0) {
        kill(pid, SIGKILL);
        WaitProcess(pid);
      }
      fs::remove_all(dir);
    }
  } stop{prometheus, dir};

  // The server is up and the absent GPU target is down, as deploy/README.md says.
  ExpectEventually(port, "up{job=\"sinew\",image=\"cpu\"}", 1);
  ExpectEventually(port, "up{job=\"sinew\",image=\"gpu\"}", 0);
  ExpectEventually(port, "sum(sinew_frames_total{job=\"sinew\"})", 0);

  const LimbOptions limb = LimbOf(2000);
  client::Client c(server.target());
  auto up = c.UploadRig(client::RigToProto(MakeLimb(limb)));
  ASSERT_TRUE(up.ok()) << up.status();
  v1::CreateSessionRequest create;
  create.set_rig_id(up->rig_id());
  create.mutable_deformer()->set_method(v1::METHOD_DQS);
  auto session = c.CreateSession(create);
  ASSERT_TRUE(session.ok()) << session.status();
  const Skeleton sk = LimbSkeleton(limb);
  uint64_t frame = 0;
  const auto drive = [&](int frames) {
    for (int i = 0; i < frames; ++i, ++frame) {
      auto r = c.Deform(Frame(session->session_id(), frame, LimbPose(sk, frame / 30.0)));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  };
  const std::string dqs = "{job=\"sinew\",image=\"cpu\",method=\"dqs\",backend=\"cpu\"}";
  drive(17);
  ExpectEventually(port, "sinew_frames_total" + dqs, 17);
  ExpectEventually(port, "sinew_frame_latency_seconds_count" + dqs, 17);
  drive(25);
  ExpectEventually(port, "sinew_frames_total" + dqs, 42);
  ExpectEventually(port, "sum(sinew_frames_total{job=\"sinew\"})", 42);  // no frame counted elsewhere
  ExpectEventually(port, "sinew_sessions{job=\"sinew\",image=\"cpu\"}", 1);

  kill(prometheus, SIGTERM);
  EXPECT_EQ(WaitProcess(prometheus), 0);
  stop.pid = -1;
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace sinew::testing
