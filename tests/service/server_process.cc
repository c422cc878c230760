#include "tests/service/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <regex>
#include <thread>

namespace sinew::testing {

ServerProcess::ServerProcess(const std::vector<std::string>& extra_args) {
  int fds[2];
  if (pipe(fds) != 0) return;
  std::vector<std::string> args = {SINEW_SERVER_PATH, "--listen", "127.0.0.1:0",
                                   "--metrics-listen", "127.0.0.1:0"};
  // The CPU backend unless the test names one: the suites compare with core bit for bit, and a
  // machine with a GPU would otherwise put their AUTO sessions on it (GpuService asks for it).
  // Likewise no admission control unless the test names it: a loaded CI machine may keep a frame
  // waiting longer than the production default, and the suites assert every frame's positions.
  auto named = [&](const std::string& flag) {
    return std::any_of(extra_args.begin(), extra_args.end(),
                       [&](const std::string& a) { return a == flag || a.rfind(flag + "=", 0) == 0; });
  };
  if (!named("--gpu")) args.insert(args.end(), {"--gpu", "off"});
  if (!named("--max-queue-ms")) args.insert(args.end(), {"--max-queue-ms", "0"});
  if (!named("--cache-dir")) {
    std::string dir = (std::filesystem::temp_directory_path() / "sinew-test-cache-XXXXXX").string();
    if (mkdtemp(dir.data()) != nullptr) {
      cache_dir_ = dir;
      // The character-independent operator grids (seconds to build) are shared; nothing else is.
      std::error_code ec;
      if (const char* ops = std::getenv("SINEW_TEST_OPERATOR_CACHE")) {
        for (const auto& e : std::filesystem::directory_iterator(ops, ec)) {
          if (e.path().extension() == ".sinewop") {
            std::filesystem::create_symlink(e.path(), std::filesystem::path(dir) / e.path().filename(), ec);
          }
        }
      }
      args.insert(args.end(), {"--cache-dir", dir});
    }
  }
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
  // Read stdout until both "listening" lines arrived (a minute at most, a bound for a hang: it
  // takes milliseconds; more under a sanitizer).
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60 * TimeoutScale());
  const std::regex grpc_re("grpc listening on [^\\n]*:(\\d+)\\n"),
      metrics_re("metrics listening on [^\\n]*:(\\d+)\\n");
  std::smatch m;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, size_t(n));
    if (std::regex_search(out, m, grpc_re)) grpc_port_ = std::stoi(m[1]);
    if (std::regex_search(out, m, metrics_re)) metrics_port_ = std::stoi(m[1]);
    if (grpc_port_ > 0 && metrics_port_ > 0) break;
  }
  if (grpc_port_ == 0) std::fprintf(stderr, "sinew-server did not start; stdout: %s\n", out.c_str());
}

int TimeoutScale() {
  const char* s = std::getenv("SINEW_TIMEOUT_SCALE");
  const int v = s ? std::atoi(s) : 1;
  return v >= 1 && v <= 100 ? v : 1;
}

bool ServerProcess::Running() {
  if (pid_ <= 0) return false;
  int status;
  return waitpid(pid_, &status, WNOHANG) == 0;
}

int ServerProcess::Terminate(double timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(int64_t(timeout_s * 1000));
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
  if (!cache_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(cache_dir_, ec);  // the links, not what they point at
  }
}

namespace {
std::vector<char*> Argv(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

std::string ReadFile(const std::string& path) {
  std::string s;
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    std::fclose(f);
  }
  return s;
}
}  // namespace

int WaitProcess(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool StopProcess(pid_t pid) {
  if (kill(pid, SIGSTOP) != 0) return false;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::minutes(1);
       std::chrono::steady_clock::now() < until;) {
    int status = 0;
    const pid_t got = waitpid(pid, &status, WUNTRACED | WNOHANG);
    if (got == pid) return WIFSTOPPED(status);  // anything else: it ended (and is reaped)
    if (got < 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

pid_t SpawnProcess(const std::vector<std::string>& argv_in) {
  std::vector<std::string> args = argv_in;
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    auto argv = Argv(args);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int RunProcess(const std::vector<std::string>& argv_in, std::string* out, std::string* err) {
  std::vector<std::string> args = argv_in;
  char out_path[] = "/tmp/sinew-run-out-XXXXXX", err_path[] = "/tmp/sinew-run-err-XXXXXX";
  const int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    auto argv = Argv(args);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out_fd);
  close(err_fd);
  const int code = WaitProcess(pid);
  if (out) *out = ReadFile(out_path);
  if (err) *err = ReadFile(err_path);
  unlink(out_path);
  unlink(err_path);
  return code;
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

RefusingPort::RefusingPort() {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port_ = ntohs(a.sin_port);
  }
}

RefusingPort::~RefusingPort() {
  if (fd_ >= 0) close(fd_);
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req.data(), req.size()) == ssize_t(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) body.append(buf, size_t(n));
    }
  }
  close(fd);
  const auto split = body.find("\r\n\r\n");
  return split == std::string::npos ? "" : body.substr(split + 4);
}

double MetricValue(const std::string& body, const std::string& series) {
  for (size_t at = body.find(series); at != std::string::npos; at = body.find(series, at + 1)) {
    if (at > 0 && body[at - 1] != '\n') continue;
    return std::stod(body.substr(at + series.size() + 1));
  }
  return -1;
}

bool Eventually(const std::function<bool()>& done, std::chrono::milliseconds every) {
  for (auto until = std::chrono::steady_clock::now() + std::chrono::minutes(1);;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(every);
  }
}

double WaitForMetric(int port, const std::string& series, double at_least) {
  double value = MetricValue(HttpGet(port, "/metrics"), series);
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       value < at_least && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    value = MetricValue(HttpGet(port, "/metrics"), series);
  }
  return value;
}

}  // namespace sinew::testing
