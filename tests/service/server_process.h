// Starts the real sinew-server binary on loopback ports picked at run time (port 0), reads the
// ports it prints, and stops it with SIGTERM (or SIGKILL on destruction if still running). The
// server runs with --gpu off unless extra_args give --gpu, and with a --cache-dir of its own
// unless they give one (removed with it): the operator grids of $SINEW_TEST_OPERATOR_CACHE linked
// in, nothing else. (Until 2026-12-03 test servers shared the user's ~/.cache/sinew: a rig's
// preparation read from there by one test had been computed by another, or by another run.)
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace sinew::testing {

class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& extra_args = {});
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool started() const { return grpc_port_ > 0; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(grpc_port_); }

  // Sends SIGTERM and waits up to `timeout_s` for exit. Returns the exit code, or -1 if it
  // did not exit in time (then it is killed) or died of a signal.
  int Terminate(double timeout_s = 20);
  bool Running();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::string cache_dir_;  // made here (empty: the test gave --cache-dir)
};

// Runs argv to completion; stdout and stderr go to *out and *err (when given). Returns the exit
// code, or 128 + signal number when it died of a signal.
int RunProcess(const std::vector<std::string>& argv, std::string* out = nullptr,
               std::string* err = nullptr);
// Starts argv in the background with stdout/stderr sent to /dev/null; returns its pid.
pid_t SpawnProcess(const std::vector<std::string>& argv);
// Waits for pid; returns its exit code, or 128 + signal.
int WaitProcess(pid_t pid);
// SIGSTOP to a child of this process, returning true once all its threads have stopped
// (waitpid's WUNTRACED report), false if it ended or had not stopped in a minute. kill() alone
// returns before: the thread the signal went to stops the others when it next runs, and under
// load the others go on answering meanwhile.
bool StopProcess(pid_t pid);

// $SINEW_TIMEOUT_SCALE (scripts/sanitize.sh sets it; 1 otherwise): the factor on waits for
// programs to start, for slower sanitized builds.
int TimeoutScale();

// A loopback TCP port free when asked (for programs that cannot listen on port 0 and say which
// port they got: HAProxy, Prometheus); 0 if none could be had.
int FreeLoopbackPort();

// A loopback port that refuses connections for as long as this object lives: bound, never
// listening, so no program started meanwhile (a server of a test running beside this one, on a
// port the kernel picks) can take it, as it could a FreeLoopbackPort() left closed. port() is 0
// if none could be had.
class RefusingPort {
 public:
  RefusingPort();
  ~RefusingPort();
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// GET http://127.0.0.1:port/path over a plain socket; returns the body ("" on failure).
std::string HttpGet(int port, const std::string& path);
// The value of one series (a line starting with `series`, labels included) of a Prometheus
// text body; -1 when absent.
double MetricValue(const std::string& body, const std::string& series);
// Polls the server's /metrics on `port` until `series` reaches `at_least` or a minute has passed
// (a bound on a hang, not a time the test judges by); returns its last value (-1: absent).
double WaitForMetric(int port, const std::string& series, double at_least);
// Calls `done` until it returns true, every `every`, for a minute at most (a bound on a hang, not
// a time the test judges by: what is waited for takes milliseconds); returns its last answer.
bool Eventually(const std::function<bool()>& done,
                std::chrono::milliseconds every = std::chrono::milliseconds(10));

}  // namespace sinew::testing
